//! Advancing: what is scheduled, which attempts are actions, and an ended deployment.

use super::shop::*;

#[test]
fn advancing_schedules_only_steps_whose_needs_succeeded() {
    given([requested()])
        .when(C::Advance { now: t(0) })
        .then([scheduled("build", 1, 0)]);
    given([
        requested(),
        scheduled("build", 1, 0),
        started("build", 1),
        succeeded("build", 1),
    ])
    .when(C::Advance { now: t(1) })
    .then([scheduled("unit", 1, 1), scheduled("lint", 1, 1)]);
    // Nothing new while work is under way: advancing twice records nothing twice.
    given(running_lint())
        .when(C::Advance { now: t(2) })
        .then_nothing();
}

#[test]
fn scheduled_attempts_are_actions_until_they_start() {
    let given = given([requested(), scheduled("build", 1, 7)]);
    assert_eq!(
        actions(given.state()),
        vec![Action::RunAttempt {
            step: "build".into(),
            attempt: 1,
            not_before: t(7)
        }]
    );
}

#[test]
fn a_finished_deployment_refuses_step_commands_but_advancing_is_harmless() {
    let history = failed_at_build();
    given(history.clone())
        .when(C::Advance { now: t(9) })
        .then_nothing();
    given(history)
        .when(success("build", 1))
        .then_error(DeploymentError::AlreadyFinished);
}
