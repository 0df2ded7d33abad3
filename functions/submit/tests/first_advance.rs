//! A submit, a redeploy and a redrive record the request and the steps it makes ready in one
//! append (one commit), scheduled at the time the clock port gives; a store that cannot hold
//! both in one append gets the request alone, and the orchestrator schedules the steps, as it
//! does for a user who bears its name.

use std::collections::BTreeMap;

use async_trait::async_trait;
use overture_domain::secret::{SecretString, SecretValues};
use overture_domain::DeploymentCommand;
use overture_events::{DeploymentEvent, DeploymentId, ErrorClass, Timestamp};
use overture_kit::memory::{FixedClock, MemoryLog};
use overture_kit::payload::MemoryPayloads;
use overture_kit::{execute, Cause, DeploymentLog, Loaded, LogError, ORCHESTRATOR_ACTOR};
use overture_submit::again::{redeploy, redrive, Redeploy, Redrive};
use overture_submit::{submit, SealError, SealSecrets, Submission, SubmitPorts};

/// `build` and `lint` need nothing; `ship` needs both.
const BLUEPRINT: &str = "name: first
steps:
  build: { run: noop }
  lint: { run: noop }
  ship: { run: noop, needs: [build, lint] }
";

fn t(seconds: i64) -> Timestamp {
    Timestamp::from_timestamp(1_700_000_000 + seconds, 0).expect("in range")
}

/// The blueprint declares no secret and makes no key: nothing is sealed.
struct NothingToSeal;

#[async_trait]
impl SealSecrets for NothingToSeal {
    async fn seal(
        &self,
        _: DeploymentId,
        _: &str,
        _: &SecretValues,
        _: Option<&SecretString>,
    ) -> Result<String, SealError> {
        Err(SealError::Failed("nothing was to be sealed".into()))
    }
}

fn submission(text: &str) -> Submission {
    Submission {
        triggered_by: None,
        source: "first.yaml".into(),
        text: text.into(),
        tenant: "acme".into(),
        requested_by: "ada".into(),
        trigger: "test".into(),
        params: BTreeMap::new(),
        secrets: SecretValues::new(),
        files: BTreeMap::new(),
        cloud: None,
    }
}

fn scheduled(step: &str, attempt: u32, at: Timestamp) -> DeploymentEvent {
    DeploymentEvent::StepScheduled {
        step: step.into(),
        attempt,
        not_before: at,
    }
}

fn types(events: &[DeploymentEvent]) -> Vec<&'static str> {
    events.iter().map(DeploymentEvent::event_type).collect()
}

#[tokio::test]
async fn a_submit_records_the_request_and_its_first_steps_in_one_append() {
    let log = MemoryLog::new(t(0));
    let clock = FixedClock(t(5));
    let ports = SubmitPorts {
        log: &log,
        seals: &NothingToSeal,
        payloads: &MemoryPayloads::default(),
        clock: &clock,
    };
    let id = submit(submission(BLUEPRINT), &ports)
        .await
        .expect("submitted");

    assert_eq!(log.appends(), 1, "one commit");
    let events = log.events(id);
    assert_eq!(
        types(&events),
        ["DeploymentRequested", "StepScheduled", "StepScheduled"]
    );
    // `ship` waits for the others; the first two may start at once.
    assert_eq!(
        events[1..],
        [scheduled("build", 1, t(5)), scheduled("lint", 1, t(5))]
    );
}

#[tokio::test]
async fn a_redeploy_records_its_request_and_its_first_steps_in_one_append() {
    let log = MemoryLog::new(t(0));
    let clock = FixedClock(t(7));
    let ports = SubmitPorts {
        log: &log,
        seals: &NothingToSeal,
        payloads: &MemoryPayloads::default(),
        clock: &clock,
    };
    let from = submit(submission(BLUEPRINT), &ports)
        .await
        .expect("submitted");
    let Some(DeploymentEvent::DeploymentRequested {
        blueprint,
        blueprint_hash,
        params,
        ..
    }) = log.events(from).into_iter().next()
    else {
        panic!("the first event is the request");
    };

    let id = redeploy(
        Redeploy {
            from,
            tenant: "acme".into(),
            requested_by: "ada".into(),
            blueprint,
            blueprint_hash,
            params,
            recorded_cloud: None,
            secrets: SecretValues::new(),
            cloud: None,
        },
        &ports,
    )
    .await
    .expect("redeployed");

    assert_eq!(log.appends(), 2, "one commit for each deployment");
    assert_eq!(
        log.events(id)[1..],
        [scheduled("build", 1, t(7)), scheduled("lint", 1, t(7))]
    );
}

/// Records a command as the runner or the orchestrator would.
async fn record(log: &MemoryLog, id: DeploymentId, command: DeploymentCommand) {
    let cause = Cause::new("test", id, uuid::Uuid::now_v7());
    execute(log, id, "acme", &cause, |_| command.clone())
        .await
        .expect("the log works")
        .expect("the command is accepted");
}

#[tokio::test]
async fn a_redrive_records_itself_and_the_steps_it_makes_ready_in_one_append() {
    let log = MemoryLog::new(t(0));
    let ports = SubmitPorts {
        log: &log,
        seals: &NothingToSeal,
        payloads: &MemoryPayloads::default(),
        clock: &FixedClock(t(1)),
    };
    let id = submit(submission(BLUEPRINT), &ports)
        .await
        .expect("submitted");
    // `build` succeeds, `lint` fails for good, and the deployment ends failed.
    for step in ["build", "lint"] {
        record(
            &log,
            id,
            DeploymentCommand::StartAttempt {
                step: step.into(),
                attempt: 1,
                sandbox: step.into(),
                now: t(2),
            },
        )
        .await;
    }
    record(
        &log,
        id,
        DeploymentCommand::RecordSuccess {
            step: "build".into(),
            attempt: 1,
            outputs: BTreeMap::new(),
            duration_ms: 1,
        },
    )
    .await;
    record(
        &log,
        id,
        DeploymentCommand::RecordFailure {
            step: "lint".into(),
            attempt: 1,
            error_class: ErrorClass::StepFailed,
            exit_code: Some(1),
            message: "lint failed".into(),
            duration_ms: 1,
            now: t(3),
        },
    )
    .await;
    record(&log, id, DeploymentCommand::RecordSecretsPurged).await;
    record(&log, id, DeploymentCommand::Advance { now: t(3) }).await;
    assert!(log.load(id).await.expect("loads").state.is_finished());
    let before = log.events(id).len();
    let appends = log.appends();

    let ports = SubmitPorts {
        clock: &FixedClock(t(9)),
        ..ports
    };
    redrive(
        Redrive {
            deployment: id,
            requested_by: "ada".into(),
            secrets: SecretValues::new(),
            cloud: None,
        },
        &ports,
    )
    .await
    .expect("redriven");

    assert_eq!(log.appends() - appends, 1, "one commit");
    let events = log.events(id);
    assert_eq!(
        types(&events[before..]),
        ["DeploymentRedriven", "StepScheduled"]
    );
    // `lint` runs again as its second attempt; `ship` waits for it.
    assert_eq!(events[before + 1], scheduled("lint", 2, t(9)));
}

/// A log that refuses, as too large, an append of more events than it holds (as DynamoDB's
/// transactions hold at most 100).
struct Holding {
    log: MemoryLog,
    at_most: usize,
}

#[async_trait]
impl DeploymentLog for Holding {
    async fn load(&self, deployment: DeploymentId) -> Result<Loaded, LogError> {
        self.log.load(deployment).await
    }

    async fn append(
        &self,
        deployment: DeploymentId,
        tenant: &str,
        expected: Option<u64>,
        events: Vec<DeploymentEvent>,
        cause: &Cause,
    ) -> Result<(), LogError> {
        if events.len() > self.at_most {
            return Err(LogError::TooLarge {
                deployment,
                reason: format!("{} events", events.len()),
            });
        }
        self.log
            .append(deployment, tenant, expected, events, cause)
            .await
    }
}

#[tokio::test]
async fn a_store_that_cannot_hold_the_first_steps_with_the_request_records_the_request_alone() {
    let log = MemoryLog::new(t(0));
    let holding = Holding {
        log: log.clone(),
        at_most: 2,
    };
    let ports = SubmitPorts {
        log: &holding,
        seals: &NothingToSeal,
        payloads: &MemoryPayloads::default(),
        clock: &FixedClock(t(1)),
    };
    let id = submit(submission(BLUEPRINT), &ports)
        .await
        .expect("submitted");

    // The orchestrator schedules `build` and `lint` when it sees the request.
    assert_eq!(types(&log.events(id)), ["DeploymentRequested"]);
    assert_eq!(log.appends(), 1);
}

#[tokio::test]
async fn a_user_named_as_the_orchestrator_gets_the_request_alone() {
    let log = MemoryLog::new(t(0));
    let ports = SubmitPorts {
        log: &log,
        seals: &NothingToSeal,
        payloads: &MemoryPayloads::default(),
        clock: &FixedClock(t(1)),
    };
    let mut named = submission(BLUEPRINT);
    named.requested_by = ORCHESTRATOR_ACTOR.into();
    let id = submit(named, &ports).await.expect("submitted");

    // Steps scheduled under the orchestrator's name would be taken for its own, already queued.
    assert_eq!(types(&log.events(id)), ["DeploymentRequested"]);
}
