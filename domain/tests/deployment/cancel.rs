//! A user's cancel: every attempt abandoned at once, then the bastion closed, the secrets purged, the end.

use super::shop::*;

fn cancel() -> C {
    C::Cancel {
        requested_by: "ada".into(),
        reason: "wrong version".into(),
    }
}

#[test]
fn a_cancel_abandons_running_and_waiting_attempts_at_once_with_no_grace_period() {
    let mut history = running_lint();
    history.extend([
        attempt_failed("lint", 1, ErrorClass::StepFailed),
        E::StepRetryScheduled {
            step: "lint".into(),
            attempt: 1,
            next_attempt: 2,
            delay_ms: 5_000,
            not_before: t(6),
        },
    ]);
    assert_eq!(
        given(history).when(cancel()),
        Ok(vec![
            cancellation_requested(),
            abandoned_by_cancel("unit", 1),
            abandoned_by_cancel("lint", 2),
        ]),
        "unit was running, lint waited for its retry; package never starts"
    );
}

#[test]
fn a_cancelled_deployment_starts_nothing_and_closes_the_bastion_then_purges_then_ends() {
    let mut history = running_lint();
    history.push(granted("r1"));
    history.extend([
        cancellation_requested(),
        abandoned_by_cancel("unit", 1),
        abandoned_by_cancel("lint", 1),
    ]);
    let cancelling = given(history.clone());
    assert_eq!(
        actions(cancelling.state()),
        vec![Action::RevokeAccess(access("r1"))]
    );
    cancelling.when(C::Advance { now: t(9) }).then_nothing();
    given(history.clone())
        .when(start("package", 1, 9))
        .then_error(DeploymentError::AttemptNotScheduled {
            step: "package".into(),
            attempt: 1,
        });
    assert_eq!(
        given(history.clone()).when(success("unit", 1)),
        Err(DeploymentError::AttemptNotRunning {
            step: "unit".into(),
            attempt: 1
        }),
        "a sandbox that finishes as it is killed records nothing"
    );

    history.push(E::BastionAccessRevoked {
        rule: "r1".into(),
        kept_for: vec![],
    });
    assert_eq!(
        actions(given(history.clone()).state()),
        vec![Action::PurgeSecrets]
    );
    history.push(E::SecretsPurged {});
    given(history.clone())
        .when(C::Advance { now: t(10) })
        .then([E::DeploymentCancelled {
            reason: "wrong version".into(),
            requested_by: "ada".into(),
        }]);
}

#[test]
fn cancelling_twice_records_nothing_more_and_an_ended_deployment_refuses() {
    let mut history = running_lint();
    history.extend([
        cancellation_requested(),
        abandoned_by_cancel("unit", 1),
        abandoned_by_cancel("lint", 1),
    ]);
    given(history).when(cancel()).then_nothing();
    given(failed_at_build())
        .when(cancel())
        .then_error(DeploymentError::AlreadyFinished);
    given([])
        .when(cancel())
        .then_error(DeploymentError::NotRequested);
}

#[test]
fn a_cancelled_deployment_that_sealed_nothing_ends_at_the_next_advance() {
    let mut history = with_nothing_sealed(running_lint());
    history.extend([
        cancellation_requested(),
        abandoned_by_cancel("unit", 1),
        abandoned_by_cancel("lint", 1),
    ]);
    given(history).when(C::Advance { now: t(9) }).then([
        E::SecretsPurged {},
        E::DeploymentCancelled {
            reason: "wrong version".into(),
            requested_by: "ada".into(),
        },
    ]);
}

#[test]
fn a_failing_deployment_can_be_cancelled_before_its_grace_period_ends() {
    let history = failing_with_lint_in_grace();
    let events = given(history.clone()).when(cancel()).expect("cancelled");
    assert_eq!(events[0], cancellation_requested());
    assert!(
        events.contains(&abandoned_by_cancel("lint", 1)),
        "lint does not get the rest of its grace period: {events:?}"
    );
}
