//! An attempt starts only when scheduled and due, and succeeds once.

use super::shop::*;

#[test]
fn an_attempt_starts_only_when_scheduled_and_due() {
    let history = [requested(), scheduled("build", 1, 10)];
    let mut decided = given(history.clone())
        .when(start("build", 1, 10))
        .expect("started");
    let Some(E::StepStarted { fingerprint, .. }) = decided.first_mut() else {
        panic!("a start: {decided:?}");
    };
    assert!(
        fingerprint
            .take()
            .is_some_and(|f| f.parts.contains_key("kind")),
        "the start records what the attempt runs with"
    );
    assert_eq!(
        decided,
        vec![started_at("build", 1, 10)],
        "its lease lasts its timeout (10 min) and a minute"
    );
    given(history.clone())
        .when(start("build", 1, 9))
        .then_error(DeploymentError::NotYetDue {
            step: "build".into(),
            attempt: 1,
            not_before: t(10),
        });
    given(history.clone())
        .when(start("build", 2, 10))
        .then_error(DeploymentError::AttemptNotScheduled {
            step: "build".into(),
            attempt: 2,
        });
    given(history)
        .when(start("nope", 1, 10))
        .then_error(DeploymentError::UnknownStep("nope".into()));
    // A started attempt cannot start again (a redelivered job).
    given(running_lint()).when(start("lint", 1, 5)).then_error(
        DeploymentError::AttemptNotScheduled {
            step: "lint".into(),
            attempt: 1,
        },
    );
}

#[test]
fn a_success_is_recorded_once() {
    given(running_lint())
        .when(success("lint", 1))
        .then([succeeded("lint", 1)]);
    let mut done = running_lint();
    done.push(succeeded("lint", 1));
    given(done)
        .when(success("lint", 1))
        .then_error(DeploymentError::AttemptNotRunning {
            step: "lint".into(),
            attempt: 1,
        });
}

#[test]
fn the_state_keeps_what_the_last_succeeded_attempt_ran_with() {
    let mut history = vec![requested(), scheduled("build", 1, 10)];
    history.extend(
        given(history.clone())
            .when(start("build", 1, 10))
            .expect("started"),
    );
    let Some(E::StepStarted { fingerprint, .. }) = history.last().cloned() else {
        panic!("a start: {history:?}");
    };
    let running = given(history.clone());
    assert_eq!(
        running.state().steps["build"].started_fingerprint,
        fingerprint
    );
    assert_eq!(
        running.state().steps["build"].fingerprint,
        None,
        "none succeeded yet"
    );

    history.push(succeeded("build", 1));
    assert!(fingerprint.is_some());
    assert_eq!(
        given(history).state().steps["build"].fingerprint,
        fingerprint
    );
}

#[test]
fn an_attempt_recorded_before_fingerprints_leaves_what_the_step_ran_with_unknown() {
    let history = [
        requested(),
        scheduled("build", 1, 10),
        started("build", 1),
        succeeded("build", 1),
    ];
    assert_eq!(given(history).state().steps["build"].fingerprint, None);
}
