//! An attempt's failure: the retry table, the failure for good, the grace period.

use super::shop::*;

#[test]
fn a_failure_with_retries_left_schedules_the_next_attempt_after_the_wait() {
    given(running_lint())
        .when(failure("lint", 1, ErrorClass::StepFailed, 20))
        .then([
            attempt_failed("lint", 1, ErrorClass::StepFailed),
            E::StepRetryScheduled {
                step: "lint".into(),
                attempt: 1,
                next_attempt: 2,
                delay_ms: 5_000,
                not_before: t(25),
            },
        ]);
}

#[test]
fn a_retrying_step_is_retrying_and_its_next_attempt_is_an_action() {
    let mut history = running_lint();
    history.push(attempt_failed("lint", 1, ErrorClass::StepFailed));
    history.push(E::StepRetryScheduled {
        step: "lint".into(),
        attempt: 1,
        next_attempt: 2,
        delay_ms: 5_000,
        not_before: t(25),
    });
    let given = given(history);
    assert_eq!(given.state().steps["lint"].status, StepStatus::Retrying);
    assert_eq!(
        actions(given.state()),
        vec![Action::RunAttempt {
            step: "lint".into(),
            attempt: 2,
            not_before: t(25)
        }]
    );
    assert!(matches!(
        given.when(start("lint", 2, 24)),
        Err(DeploymentError::NotYetDue { .. })
    ));
}

#[test]
fn the_default_policy_fails_a_step_failed_at_once_and_starts_the_grace_period() {
    // unit has no override: step-failed is not retried. lint is still running.
    given(running_lint())
        .when(failure("unit", 1, ErrorClass::StepFailed, 30))
        .then([
            attempt_failed("unit", 1, ErrorClass::StepFailed),
            E::StepFailed {
                step: "unit".into(),
                attempts: 1,
                error_class: ErrorClass::StepFailed,
            },
            E::FailureGracePeriodStarted {
                failed_step: "unit".into(),
                deadline: t(90),
            },
        ]);
}

#[test]
fn the_retry_table_sets_how_many_attempts_each_class_gets() {
    // (class, attempts allowed by the default table)
    for (class, allowed) in [
        (ErrorClass::Terraform, 2),
        (ErrorClass::BackendUnreachable, 6),
        (ErrorClass::BootstrapTimeout, 1),
        (ErrorClass::HostUnreachable, 2),
        (ErrorClass::StepFailed, 1),
    ] {
        let mut history = vec![requested(), scheduled("build", 1, 0)];
        let mut attempt = 1;
        loop {
            history.push(started("build", attempt));
            let events = given(history.clone())
                .when(failure("build", attempt, class, 0))
                .expect("recorded");
            let gave_up = events.iter().any(|e| matches!(e, E::StepFailed { .. }));
            history.extend(events);
            if gave_up {
                break;
            }
            attempt += 1;
        }
        assert_eq!(attempt, allowed, "{class}");
    }
}

#[test]
fn a_failure_for_good_abandons_waiting_attempts_at_once() {
    let mut history = running_lint();
    history.push(attempt_failed("lint", 1, ErrorClass::StepFailed));
    history.push(E::StepRetryScheduled {
        step: "lint".into(),
        attempt: 1,
        next_attempt: 2,
        delay_ms: 5_000,
        not_before: t(25),
    });
    given(history)
        .when(failure("unit", 1, ErrorClass::StepFailed, 21))
        .then([
            attempt_failed("unit", 1, ErrorClass::StepFailed),
            E::StepFailed {
                step: "unit".into(),
                attempts: 1,
                error_class: ErrorClass::StepFailed,
            },
            E::StepAbandoned {
                step: "lint".into(),
                attempt: 2,
                reason: "not started because step `unit` failed".into(),
            },
        ]);
}

#[test]
fn within_the_grace_period_a_running_step_may_still_finish() {
    let given = given(failing_with_lint_in_grace());
    assert_eq!(actions(given.state()), vec![Action::WakeAt(t(90))]);
    given.when(success("lint", 1)).then([succeeded("lint", 1)]);
}

#[test]
fn while_failing_no_new_attempt_starts_and_failures_are_not_retried() {
    let given = given(failing_with_lint_in_grace());
    assert_eq!(
        given.when(C::Advance { now: t(40) }),
        Ok(vec![]),
        "nothing is scheduled before the deadline"
    );
    let given = self::given(failing_with_lint_in_grace());
    given
        .when(failure("lint", 1, ErrorClass::StepFailed, 40))
        .then([
            attempt_failed("lint", 1, ErrorClass::StepFailed),
            E::StepFailed {
                step: "lint".into(),
                attempts: 1,
                error_class: ErrorClass::StepFailed,
            },
        ]);
}

#[test]
fn at_the_deadline_running_steps_are_abandoned() {
    given(failing_with_lint_in_grace())
        .when(C::Advance { now: t(90) })
        .then([E::StepAbandoned {
            step: "lint".into(),
            attempt: 1,
            reason: "still running when the failure grace period ended".into(),
        }]);
}

#[test]
fn an_abandoned_attempt_can_no_longer_record_its_outcome() {
    let mut history = failing_with_lint_in_grace();
    history.push(E::StepAbandoned {
        step: "lint".into(),
        attempt: 1,
        reason: "late".into(),
    });
    given(history)
        .when(success("lint", 1))
        .then_error(DeploymentError::AttemptNotRunning {
            step: "lint".into(),
            attempt: 1,
        });
}

#[test]
fn a_failing_deployment_that_sealed_nothing_ends_when_its_last_attempt_is_abandoned() {
    let history = with_nothing_sealed(failing_with_lint_in_grace());
    given(history).when(C::Advance { now: t(90) }).then([
        E::StepAbandoned {
            step: "lint".into(),
            attempt: 1,
            reason: "still running when the failure grace period ended".into(),
        },
        E::SecretsPurged {},
        E::DeploymentFailed {
            reason: "step `unit` failed after 1 attempt(s) (step-failed)".into(),
        },
    ]);
}
