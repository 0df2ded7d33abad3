//! Redrive, given/when/then: a failed deployment carried on from its failed and abandoned
//! steps, in the same stream; steps that succeeded keep their outputs and do not run again.

use overture_domain::deployment::{
    actions, Action, Deployment, DeploymentCommand as C, DeploymentError, DeploymentState, Phase,
    SealedCredentials, StepStatus,
};
use overture_domain::history::check_determinism;
use overture_domain::projection::{project, DeploymentStatus};
use overture_domain::testing::events as kit;
use overture_domain::testing::events::{scheduled, started, succeeded_with};
use overture_domain::testing::t;
use overture_events::{
    DeploymentEvent as E, DeploymentId, Envelope, ErrorClass, Metadata, Timestamp,
};
use uuid::Uuid;

fn requested() -> E {
    // build → (unit, lint) → package; lint retries step-failed twice.
    let blueprint = kit::blueprint(
        r#"
name: shop
secrets: [api_key]
on_failure: { grace: 60s }
steps:
  build: { run: noop }
  unit: { run: noop, needs: [build] }
  lint: { run: noop, needs: [build], retry: { step-failed: { times: 2, wait: 5s } } }
  package: { run: noop, needs: [unit, lint] }
"#,
    );
    kit::requested("shop.yaml", blueprint)
}

fn failure(step: &str, attempt: u32, now: i64) -> C {
    C::RecordFailure {
        step: step.into(),
        attempt,
        error_class: ErrorClass::StepFailed,
        exit_code: Some(1),
        message: "boom".into(),
        duration_ms: 1,
        now: t(now),
    }
}

fn sealed() -> SealedCredentials {
    SealedCredentials {
        seal: "local:d".into(),
        secrets: vec!["api_key".into()],
        ssh_public_key: None,
        token: false,
    }
}

fn redrive() -> C {
    C::Redrive {
        requested_by: "grace".into(),
        sealed: Some(sealed()),
    }
}

fn redriven() -> Vec<E> {
    vec![
        E::DeploymentRedriven {
            requested_by: "grace".into(),
            steps: vec!["unit".into(), "lint".into(), "package".into()],
        },
        E::CredentialsSealed {
            seal: "local:d".into(),
            secrets: vec!["api_key".into()],
            ssh_public_key: None,
            token: false,
        },
    ]
}

fn state(events: &[E]) -> DeploymentState {
    Deployment::replay(events.iter().cloned())
}

/// build succeeded with an output; unit failed for good while lint ran, so lint was abandoned
/// at the grace period's end and package never ran; the secrets were purged and it failed.
fn failed_at_unit() -> Vec<E> {
    vec![
        requested(),
        E::CredentialsSealed {
            seal: "local:d".into(),
            secrets: vec!["api_key".into()],
            ssh_public_key: None,
            token: false,
        },
        scheduled("build", 1, 0),
        started("build", 1),
        succeeded_with("build", 1, &[("image", "shop:1")]),
        scheduled("unit", 1, 1),
        scheduled("lint", 1, 1),
        started("unit", 1),
        started("lint", 1),
        E::StepAttemptFailed {
            step: "unit".into(),
            attempt: 1,
            error_class: ErrorClass::StepFailed,
            exit_code: Some(1),
            message: "boom".into(),
            duration_ms: 1,
        },
        E::StepFailed {
            step: "unit".into(),
            attempts: 1,
            error_class: ErrorClass::StepFailed,
        },
        E::FailureGracePeriodStarted {
            failed_step: "unit".into(),
            deadline: t(62),
        },
        E::StepAbandoned {
            step: "lint".into(),
            attempt: 1,
            reason: "still running when the failure grace period ended".into(),
        },
        E::SecretsPurged {},
        E::DeploymentFailed {
            reason: "step `unit` failed after 1 attempt(s) (step-failed)".into(),
        },
    ]
}

#[test]
fn given_a_failed_deployment_when_redriven_then_the_steps_that_did_not_succeed_run_again() {
    let history = failed_at_unit();
    assert_eq!(
        Deployment::handle(&state(&history), redrive()),
        Ok(redriven()),
        "build succeeded and is left alone; package never ran and runs now"
    );
}

#[test]
fn given_a_redriven_deployment_then_it_runs_again_with_attempts_numbered_on() {
    let mut history = failed_at_unit();
    history.extend(redriven());
    let reopened = state(&history);
    assert_eq!(reopened.phase, Phase::Running);
    assert!(!reopened.secrets_purged);
    assert_eq!(reopened.seal.as_deref(), Some("local:d"));
    assert_eq!(
        Deployment::handle(&reopened, C::Advance { now: t(100) }),
        Ok(vec![scheduled("unit", 2, 100), scheduled("lint", 2, 100)]),
        "attempts go on after the old ones; build is not scheduled again"
    );
    history.extend([scheduled("unit", 2, 100), scheduled("lint", 2, 100)]);
    let waiting = state(&history);
    assert_eq!(waiting.steps["unit"].status, StepStatus::Scheduled);
    assert_eq!(
        actions(&waiting),
        vec![
            Action::RunAttempt {
                step: "unit".into(),
                attempt: 2,
                not_before: t(100),
            },
            Action::RunAttempt {
                step: "lint".into(),
                attempt: 2,
                not_before: t(100),
            },
        ]
    );
}

#[test]
fn given_a_redriven_step_when_it_fails_then_its_retries_count_from_this_run() {
    let mut history = failed_at_unit();
    history.extend(redriven());
    history.extend([
        scheduled("unit", 2, 100),
        scheduled("lint", 2, 100),
        started("lint", 2),
    ]);
    assert_eq!(
        Deployment::handle(&state(&history), failure("lint", 2, 101)),
        Ok(vec![
            E::StepAttemptFailed {
                step: "lint".into(),
                attempt: 2,
                error_class: ErrorClass::StepFailed,
                exit_code: Some(1),
                message: "boom".into(),
                duration_ms: 1,
            },
            E::StepRetryScheduled {
                step: "lint".into(),
                attempt: 2,
                next_attempt: 3,
                delay_ms: 5_000,
                not_before: t(106),
            },
        ]),
        "lint's first attempt of this run failed: it has its two retries again"
    );
}

#[test]
fn given_a_redriven_deployment_then_succeeded_outputs_are_kept_and_it_ends_as_every_run() {
    let mut history = failed_at_unit();
    history.extend(redriven());
    history.extend([
        scheduled("unit", 2, 100),
        scheduled("lint", 2, 100),
        started("unit", 2),
        started("lint", 2),
        succeeded_with("unit", 2, &[]),
        succeeded_with("lint", 2, &[]),
    ]);
    let needs_done = state(&history);
    assert_eq!(
        needs_done.steps["build"].outputs["image"], "shop:1",
        "build's outputs are reused, not made again"
    );
    assert_eq!(needs_done.steps["build"].attempt, 1);
    assert_eq!(
        Deployment::handle(&needs_done, C::Advance { now: t(110) }),
        Ok(vec![scheduled("package", 1, 110)]),
        "package never ran: this is its first attempt"
    );
    history.extend([
        scheduled("package", 1, 110),
        started("package", 1),
        succeeded_with("package", 1, &[]),
    ]);
    let done = state(&history);
    assert_eq!(actions(&done), vec![Action::PurgeSecrets]);
    assert_eq!(
        Deployment::handle(&done, C::RecordSecretsPurged),
        Ok(vec![E::SecretsPurged {}])
    );
    history.push(E::SecretsPurged {});
    assert_eq!(
        Deployment::handle(&state(&history), C::Advance { now: t(120) }),
        Ok(vec![E::DeploymentSucceeded {}])
    );
    history.push(E::DeploymentSucceeded {});
    let moments: Vec<Timestamp> = (0..130).step_by(10).map(t).collect();
    assert_eq!(check_determinism(&history, &moments), Ok(()));
}

#[test]
fn given_a_deployment_that_did_not_fail_when_redriven_then_it_is_refused() {
    let failed = failed_at_unit();
    let running = failed[..9].to_vec();
    assert_eq!(
        Deployment::handle(&state(&running), redrive()),
        Err(DeploymentError::RedriveWhileRunning)
    );
    let mut redriven_once = failed.clone();
    redriven_once.extend(redriven());
    assert_eq!(
        Deployment::handle(&state(&redriven_once), redrive()),
        Err(DeploymentError::RedriveWhileRunning),
        "a redrive under way is not redriven again"
    );
    let succeeded_history = vec![
        requested(),
        scheduled("build", 1, 0),
        started("build", 1),
        E::SecretsPurged {},
        E::DeploymentSucceeded {},
    ];
    assert_eq!(
        Deployment::handle(&state(&succeeded_history), redrive()),
        Err(DeploymentError::RedriveSucceeded)
    );
    let mut cancelled = running.clone();
    cancelled.extend([
        E::CancellationRequested {
            requested_by: "ada".into(),
            reason: "r".into(),
        },
        E::StepAbandoned {
            step: "unit".into(),
            attempt: 1,
            reason: "cancelled by ada".into(),
        },
        E::StepAbandoned {
            step: "lint".into(),
            attempt: 1,
            reason: "cancelled by ada".into(),
        },
        E::SecretsPurged {},
        E::DeploymentCancelled {
            reason: "r".into(),
            requested_by: "ada".into(),
        },
    ]);
    assert_eq!(
        Deployment::handle(&state(&cancelled), redrive()),
        Err(DeploymentError::RedriveCancelled)
    );
    assert_eq!(
        Deployment::handle(&DeploymentState::default(), redrive()),
        Err(DeploymentError::NotRequested)
    );
}

#[test]
fn given_a_failed_deployment_whose_resources_were_destroyed_when_redriven_then_it_is_refused() {
    let mut history = failed_at_unit();
    history.extend([
        E::DestroyRequested { steps: vec![] },
        E::DeploymentDestroyed {},
    ]);
    assert_eq!(
        Deployment::handle(&state(&history), redrive()),
        Err(DeploymentError::RedriveDestroyed)
    );
}

fn envelopes(id: DeploymentId, events: &[E]) -> Vec<Envelope> {
    events
        .iter()
        .enumerate()
        .map(|(revision, event)| Envelope {
            stream: id.stream(),
            revision: revision as u64,
            id: Uuid::new_v4(),
            event_type: event.event_type().into(),
            data: event.data(),
            metadata: Metadata {
                tenant: "acme".into(),
                actor: "test".into(),
                correlation_id: id.uuid(),
                causation_id: id.uuid(),
                recorded_at: t(revision as i64),
                previous: None,
                hash: None,
            },
        })
        .collect()
}

#[test]
fn given_a_redriven_deployment_then_its_status_is_running_again_with_build_kept() {
    let id = DeploymentId::from_uuid(Uuid::now_v7());
    let failed = failed_at_unit();
    let before = project(None, &envelopes(id, &failed)).expect("folds");
    let before = before.view.expect("a view");
    assert_eq!(before.status, DeploymentStatus::Failed);

    let mut history = failed;
    history.extend(redriven());
    let projected = project(None, &envelopes(id, &history)).expect("folds");
    let view = projected.view.expect("a view");
    assert_eq!(view.status, DeploymentStatus::Running);
    assert_eq!(view.finished_at, None);
    assert_eq!(view.reason, None);
    assert_eq!(view.steps["build"].status, StepStatus::Succeeded);
    assert_eq!(view.steps["build"].attempts, 1);
    assert_eq!(view.steps["build"].outputs["image"], "shop:1");
    for step in ["unit", "lint", "package"] {
        assert_eq!(view.steps[step].status, StepStatus::Pending, "{step}");
        assert_eq!(view.steps[step].finished_at, None, "{step}");
    }
    assert_eq!(
        view.steps["unit"].attempts, 1,
        "attempts already made count"
    );
}
