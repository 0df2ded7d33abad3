//! The seal: purged once no step can run, before the deployment ends.

use super::shop::*;

#[test]
fn a_failed_deployment_purges_its_secrets_before_it_ends() {
    let mut history = failing_with_lint_in_grace();
    history.push(succeeded("lint", 1));
    let before_purge = given(history.clone());
    assert_eq!(actions(before_purge.state()), vec![Action::PurgeSecrets]);
    assert_eq!(
        before_purge.when(C::Advance { now: t(50) }),
        Ok(vec![]),
        "it does not end before the purge"
    );
    given(history.clone())
        .when(C::RecordSecretsPurged)
        .then([E::SecretsPurged {}]);
    history.push(E::SecretsPurged {});
    given(history)
        .when(C::Advance { now: t(51) })
        .then([E::DeploymentFailed {
            reason: "step `unit` failed after 1 attempt(s) (step-failed)".into(),
        }]);
}

#[test]
fn secrets_are_not_purged_while_steps_may_run() {
    given(running_lint())
        .when(C::RecordSecretsPurged)
        .then_error(DeploymentError::StepsStillRunning);
}

#[test]
fn a_deployment_whose_steps_all_succeeded_purges_then_succeeds() {
    let mut history = running_lint();
    history.extend([
        succeeded("unit", 1),
        succeeded("lint", 1),
        scheduled("package", 1, 3),
        started("package", 1),
        succeeded("package", 1),
    ]);
    let given_done = given(history.clone());
    assert_eq!(actions(given_done.state()), vec![Action::PurgeSecrets]);
    given_done.when(C::Advance { now: t(4) }).then_nothing();
    history.push(E::SecretsPurged {});
    given(history.clone())
        .when(C::Advance { now: t(5) })
        .then([E::DeploymentSucceeded {}]);
    history.push(E::DeploymentSucceeded {});
    let finished = given(history);
    assert!(finished.state().is_finished());
    assert!(
        actions(finished.state()).is_empty(),
        "a finished deployment calls for nothing"
    );
}

#[test]
fn a_deployment_that_sealed_nothing_records_its_purge_with_its_end() {
    let mut history = with_nothing_sealed(running_lint());
    history.extend([
        succeeded("unit", 1),
        succeeded("lint", 1),
        scheduled("package", 1, 3),
        started("package", 1),
    ]);
    history.push(succeeded("package", 1));
    // The advance the last outcome is committed with ends it: there is nothing to delete.
    given(history.clone())
        .when(C::Advance { now: t(4) })
        .then([E::SecretsPurged {}, E::DeploymentSucceeded {}]);
    assert_eq!(
        actions(given(history).state()),
        vec![Action::PurgeSecrets],
        "until an advance records it, the orchestrator's purge ends it as before"
    );
}

#[test]
fn a_closing_action_recorded_again_after_the_end_is_harmless() {
    let mut history = failed_at_build();
    assert!(given(history.clone()).state().is_finished());
    assert_eq!(
        given(history.clone()).when(C::RecordSecretsPurged),
        Ok(vec![]),
        "a second handler purging finds it done"
    );
    given(history.clone())
        .when(C::RecordAccessRevoked {
            rule: "r1".into(),
            kept_for: vec![],
        })
        .then_nothing();
    history.truncate(history.len() - 1);
    assert!(!given(history).state().is_finished());
}
