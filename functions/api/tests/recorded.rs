//! The engine where recording is all it takes ([`Recorded`]), on a log, a seal and a payload
//! store in memory: what each write records, and what it refuses without recording anything.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use overture_api::recorded::Recorded;
use overture_api::{RunDeployments, RunError};
use overture_domain::secret::{SecretString, SecretValues};
use overture_domain::DeploymentError;
use overture_events::{DeploymentEvent as E, DeploymentId, ErrorClass, Timestamp};
use overture_kit::memory::MemoryLog;
use overture_kit::payload::MemoryPayloads;
use overture_kit::{Cause, DeploymentLog};
use overture_submit::again::Redrive;
use overture_submit::{SealError, SealSecrets, Submission, SubmitError};
use secrecy::ExposeSecret;

const SECRET: &str = "s3cr3t-never-recorded";
const HELLO: &str = "name: hello\nsecrets: [api_token]\nsteps:\n  greet:\n    run: script\n    with: { command: 'echo hello {{ secrets.api_token }}' }\n";

/// A seal that keeps in memory which deployment sealed which values; clones share them.
#[derive(Clone, Default)]
struct MemorySeal {
    sealed: Arc<Mutex<Vec<(DeploymentId, String)>>>,
}

#[async_trait]
impl SealSecrets for MemorySeal {
    async fn seal(
        &self,
        deployment: DeploymentId,
        _: &str,
        secrets: &SecretValues,
        _: Option<&SecretString>,
    ) -> Result<String, SealError> {
        let value = secrets
            .get("api_token")
            .map(|v| v.expose_secret().to_owned())
            .unwrap_or_default();
        self.sealed.lock().expect("lock").push((deployment, value));
        Ok(format!("memory:{deployment}"))
    }
}

type Engine = Recorded<MemoryLog, MemorySeal, MemoryPayloads>;

fn engine() -> (Engine, MemoryLog) {
    let (engine, log, _) = engine_and_seal();
    (engine, log)
}

fn engine_and_seal() -> (Engine, MemoryLog, MemorySeal) {
    let log = MemoryLog::new(Timestamp::UNIX_EPOCH);
    let seal = MemorySeal::default();
    let recorded = Recorded::new(
        log.clone(),
        seal.clone(),
        MemoryPayloads::default(),
        Duration::ZERO,
    );
    (recorded, log, seal)
}

fn secrets() -> SecretValues {
    let mut secrets = SecretValues::new();
    secrets.insert("api_token".into(), SecretString::from(SECRET.to_owned()));
    secrets
}

fn submission(text: &str) -> Submission {
    Submission {
        source: "hello.yaml".into(),
        text: text.into(),
        tenant: "acme".into(),
        requested_by: "ada".into(),
        trigger: "http".into(),
        params: BTreeMap::new(),
        secrets: secrets(),
        files: BTreeMap::new(),
        cloud: None,
        triggered_by: None,
        name: None,
    }
}

fn types(log: &MemoryLog, id: DeploymentId) -> Vec<&'static str> {
    log.events(id).iter().map(E::event_type).collect()
}

/// Its only step (scheduled when it was started) failed for good, and it failed: what the
/// runner and the orchestrator would have recorded.
async fn fail(log: &MemoryLog, id: DeploymentId) {
    let revision = log.load(id).await.expect("load").revision;
    let events = vec![
        E::StepStarted {
            step: "greet".into(),
            attempt: 1,
            sandbox: "greet-1".into(),
            lease_until: None,
            fingerprint: None,
        },
        E::StepAttemptFailed {
            step: "greet".into(),
            attempt: 1,
            error_class: ErrorClass::StepFailed,
            exit_code: Some(1),
            message: "boom".into(),
            duration_ms: 1,
        },
        E::StepFailed {
            step: "greet".into(),
            attempts: 1,
            error_class: ErrorClass::StepFailed,
        },
        E::SecretsPurged {},
        E::DeploymentFailed {
            reason: "step `greet` failed".into(),
        },
    ];
    log.append(
        id,
        "acme",
        revision,
        events,
        &Cause::new("orchestrator", id, uuid::Uuid::now_v7()),
    )
    .await
    .expect("appended");
}

#[tokio::test]
async fn starting_records_the_request_with_its_secrets_sealed_and_never_in_the_log() {
    let (engine, log, seal) = engine_and_seal();
    let id = engine.start(submission(HELLO)).await.expect("recorded");
    // Its first step is scheduled in the same append: one commit.
    assert_eq!(
        types(&log, id),
        ["DeploymentRequested", "CredentialsSealed", "StepScheduled"]
    );
    assert_eq!(log.appends(), 1);
    assert_eq!(
        *seal.sealed.lock().expect("lock"),
        [(id, SECRET.to_owned())]
    );
    let recorded = format!("{:?}", log.events(id));
    assert!(!recorded.contains(SECRET), "{recorded}");
}

#[tokio::test]
async fn an_invalid_blueprint_is_refused_with_its_problems_before_anything_is_sealed() {
    let (engine, _, seal) = engine_and_seal();
    let broken = HELLO.replace("run: script", "run: script\n    needs: [missing]");
    let refused = engine.start(submission(&broken)).await;
    let Err(RunError::Submit(SubmitError::Invalid(problems))) = refused else {
        panic!("refused as invalid: {refused:?}");
    };
    assert!(
        problems.0.iter().any(|p| p.field == "steps.greet.needs"),
        "{problems}"
    );
    assert!(seal.sealed.lock().expect("lock").is_empty());
}

#[tokio::test]
async fn cancelling_a_running_deployment_records_the_request_to_cancel() {
    let (engine, log) = engine();
    let id = engine.start(submission(HELLO)).await.expect("recorded");
    let cancelled = engine
        .cancel(id, "ada", "not today")
        .await
        .expect("recorded");
    assert_eq!(cancelled, Ok(()));
    // The step scheduled when it started never runs.
    let events = log.events(id);
    assert_eq!(
        events[events.len() - 2..],
        [
            E::CancellationRequested {
                requested_by: "ada".into(),
                reason: "not today".into(),
            },
            E::StepAbandoned {
                step: "greet".into(),
                attempt: 1,
                reason: "cancelled by ada".into(),
            },
        ]
    );
}

#[tokio::test]
async fn cancelling_an_ended_or_unknown_deployment_is_refused_and_records_nothing() {
    let (engine, log) = engine();
    let id = engine.start(submission(HELLO)).await.expect("recorded");
    fail(&log, id).await;
    let before = log.events(id).len();
    assert_eq!(
        engine.cancel(id, "ada", "too late").await.expect("asked"),
        Err(DeploymentError::AlreadyFinished)
    );
    assert_eq!(log.events(id).len(), before);

    let unknown = DeploymentId::from_uuid(uuid::Uuid::now_v7());
    assert_eq!(
        engine
            .cancel(unknown, "ada", "no such")
            .await
            .expect("asked"),
        Err(DeploymentError::NotRequested)
    );
    assert!(log.events(unknown).is_empty());
}

#[tokio::test]
async fn redriving_a_failed_deployment_seals_the_secrets_again_and_records_the_redrive() {
    let (engine, log) = engine();
    let id = engine.start(submission(HELLO)).await.expect("recorded");
    fail(&log, id).await;
    engine
        .redrive(Redrive {
            deployment: id,
            requested_by: "grace".into(),
            secrets: secrets(),
            cloud: None,
        })
        .await
        .expect("recorded");
    // Its step is scheduled again, as its second attempt, in the same append.
    let events = log.events(id);
    assert!(
        matches!(
            &events[events.len() - 3..],
            [
                E::DeploymentRedriven { requested_by, steps },
                E::CredentialsSealed { .. },
                E::StepScheduled { step, attempt: 2, .. },
            ] if requested_by == "grace" && steps == &["greet".to_owned()] && step == "greet"
        ),
        "{events:?}"
    );
}

#[tokio::test]
async fn redriving_a_running_deployment_is_refused_and_records_nothing() {
    let (engine, log) = engine();
    let id = engine.start(submission(HELLO)).await.expect("recorded");
    let before = log.events(id).len();
    let refused = engine
        .redrive(Redrive {
            deployment: id,
            requested_by: "grace".into(),
            secrets: secrets(),
            cloud: None,
        })
        .await;
    assert!(
        matches!(
            refused,
            Err(RunError::Submit(SubmitError::Refused(
                DeploymentError::RedriveWhileRunning
            )))
        ),
        "{refused:?}"
    );
    assert_eq!(log.events(id).len(), before);
}
