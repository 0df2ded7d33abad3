//! An attempt cut short by something other than the step: an expired lease, a stopped engine, a lost job.

use super::shop::*;

fn interrupt(step: &str, attempt: u32, why: Interruption, now: i64) -> C {
    C::InterruptAttempt {
        step: step.into(),
        attempt,
        why,
        now: t(now),
    }
}

#[test]
fn an_interrupted_attempt_is_retried_twice_by_default_with_no_wait() {
    let history = running_lint();
    given(history)
        .when(C::RecordFailure {
            step: "unit".into(),
            attempt: 1,
            error_class: ErrorClass::Interrupted,
            exit_code: None,
            message: "the attempt was interrupted".into(),
            duration_ms: 0,
            now: t(3),
        })
        .then([
            E::StepAttemptFailed {
                step: "unit".into(),
                attempt: 1,
                error_class: ErrorClass::Interrupted,
                exit_code: None,
                message: "the attempt was interrupted".into(),
                duration_ms: 0,
            },
            E::StepRetryScheduled {
                step: "unit".into(),
                attempt: 1,
                next_attempt: 2,
                delay_ms: 0,
                not_before: t(3),
            },
        ]);
}

#[test]
fn a_running_attempt_is_interrupted_for_an_expired_lease_only_once_the_lease_has_ended() {
    // unit started at t(0): its lease ends at t(660).
    assert_eq!(
        given(running_lint()).when(interrupt("unit", 1, Interruption::LeaseExpired, 659)),
        Err(DeploymentError::LeaseNotExpired {
            step: "unit".into(),
            attempt: 1,
            until: t(660)
        }),
        "a second delivery of its job is no sign that it died"
    );
    let events = given(running_lint())
        .when(interrupt("unit", 1, Interruption::LeaseExpired, 660))
        .expect("interrupted");
    assert_eq!(
        events[0],
        E::StepAttemptFailed {
            step: "unit".into(),
            attempt: 1,
            error_class: ErrorClass::Interrupted,
            exit_code: None,
            message: Interruption::LeaseExpired.message().into(),
            duration_ms: 0,
        }
    );
    assert!(
        matches!(
            &events[1],
            E::StepRetryScheduled {
                next_attempt: 2,
                delay_ms: 0,
                ..
            }
        ),
        "{events:?}"
    );
}

#[test]
fn an_attempt_whose_engine_stopped_or_whose_runner_lost_the_job_is_interrupted_at_once() {
    for why in [Interruption::EngineStopped, Interruption::RunnerLostJob] {
        let events = given(running_lint())
            .when(interrupt("unit", 1, why, 5))
            .expect("interrupted");
        assert!(
            matches!(&events[0], E::StepAttemptFailed { error_class: ErrorClass::Interrupted, exit_code: None, message, .. } if message == why.message()),
            "{why:?}: {events:?}"
        );
    }
    assert_eq!(
        given(running_lint()).when(interrupt("build", 1, Interruption::EngineStopped, 5)),
        Err(DeploymentError::AttemptNotRunning {
            step: "build".into(),
            attempt: 1
        }),
        "an attempt that ended is not interrupted"
    );
}

#[test]
fn an_attempt_recorded_before_leases_existed_may_be_interrupted_at_once() {
    let mut history = running_lint();
    history.push(scheduled("package", 1, 2));
    history.push(E::StepStarted {
        step: "package".into(),
        attempt: 1,
        sandbox: "old".into(),
        lease_until: None,
        fingerprint: None,
    });
    assert!(given(history)
        .when(interrupt("package", 1, Interruption::LeaseExpired, 3))
        .is_ok());
}
