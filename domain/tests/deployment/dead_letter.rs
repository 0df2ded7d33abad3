//! An attempt whose job the queue gave up on fails as `interrupted`.

use super::shop::*;

fn dead_letter(step: &str, attempt: u32, receives: u32, now: i64) -> C {
    C::RecordDeadLetter {
        step: step.into(),
        attempt,
        receives,
        now: t(now),
    }
}

fn dead_lettered(step: &str, attempt: u32, receives: u32) -> Vec<E> {
    vec![
        E::StepJobDeadLettered {
            step: step.into(),
            attempt,
            receives,
        },
        E::StepAttemptFailed {
            step: step.into(),
            attempt,
            error_class: ErrorClass::Interrupted,
            exit_code: None,
            message: format!(
                "the attempt was interrupted: its job was delivered {receives} times without an \
                 outcome and moved to the dead-letter queue"
            ),
            duration_ms: 0,
        },
    ]
}

#[test]
fn a_dead_lettered_attempt_that_never_started_fails_as_interrupted_and_is_retried() {
    let mut then = dead_lettered("build", 1, 5);
    then.push(E::StepRetryScheduled {
        step: "build".into(),
        attempt: 1,
        next_attempt: 2,
        delay_ms: 0,
        not_before: t(30),
    });
    assert_eq!(
        given([requested(), scheduled("build", 1, 0)]).when(dead_letter("build", 1, 5, 30)),
        Ok(then)
    );
}

#[test]
fn a_dead_lettered_running_attempt_fails_only_once_its_lease_has_ended() {
    // unit started at t(0): its lease ends at t(660).
    assert_eq!(
        given(running_lint()).when(dead_letter("unit", 1, 5, 659)),
        Err(DeploymentError::LeaseNotExpired {
            step: "unit".into(),
            attempt: 1,
            until: t(660)
        }),
        "its runner may still hold the job and record the outcome"
    );
    let events = given(running_lint())
        .when(dead_letter("unit", 1, 5, 660))
        .expect("recorded");
    assert_eq!(events[..2], dead_lettered("unit", 1, 5)[..]);
    assert!(
        matches!(
            &events[2],
            E::StepRetryScheduled {
                next_attempt: 2,
                ..
            }
        ),
        "{events:?}"
    );
}

#[test]
fn the_third_dead_lettered_attempt_fails_the_step_as_the_interrupted_rule_says() {
    let history = vec![
        requested(),
        scheduled("build", 1, 0),
        attempt_failed("build", 1, ErrorClass::Interrupted),
        E::StepRetryScheduled {
            step: "build".into(),
            attempt: 1,
            next_attempt: 2,
            delay_ms: 0,
            not_before: t(1),
        },
        attempt_failed("build", 2, ErrorClass::Interrupted),
        E::StepRetryScheduled {
            step: "build".into(),
            attempt: 2,
            next_attempt: 3,
            delay_ms: 0,
            not_before: t(2),
        },
    ];
    let mut then = dead_lettered("build", 3, 5);
    then.push(E::StepFailed {
        step: "build".into(),
        attempts: 3,
        error_class: ErrorClass::Interrupted,
    });
    let given = given(history);
    assert_eq!(given.when(dead_letter("build", 3, 5, 3)), Ok(then));
}

#[test]
fn a_dead_letter_of_an_attempt_that_has_its_outcome_records_nothing() {
    assert_eq!(
        given(running_lint()).when(dead_letter("build", 1, 5, 700)),
        Ok(vec![]),
        "build succeeded"
    );
    let mut retried = running_lint();
    retried.push(attempt_failed("lint", 1, ErrorClass::StepFailed));
    retried.push(E::StepRetryScheduled {
        step: "lint".into(),
        attempt: 1,
        next_attempt: 2,
        delay_ms: 5_000,
        not_before: t(10),
    });
    assert_eq!(
        given(retried).when(dead_letter("lint", 1, 5, 700)),
        Ok(vec![]),
        "attempt 1 was superseded"
    );
    assert_eq!(
        given(failed_at_build()).when(dead_letter("build", 1, 5, 700)),
        Ok(vec![]),
        "the deployment ended"
    );
}
