//! The engine's rule on the bastion: opened once for a running step, closed when the work is over.

use super::shop::*;

#[test]
fn the_bastion_is_opened_once_for_a_running_step_and_shared() {
    given(running_lint())
        .when(C::RecordAccessGranted(access("r1")))
        .then([granted("r1")]);
    let mut history = running_lint();
    history.push(granted("r1"));
    assert_eq!(
        given(history).when(C::RecordAccessGranted(access("r2"))),
        Err(DeploymentError::AccessAlreadyGranted("r1".into())),
        "a second step finds it open"
    );
    let mut nothing_runs = running_lint();
    nothing_runs.extend([succeeded("unit", 1), succeeded("lint", 1)]);
    assert_eq!(
        given(nothing_runs).when(C::RecordAccessGranted(access("r1"))),
        Err(DeploymentError::NoStepRunning),
        "no earlier than needed: only for a step that runs"
    );
}

#[test]
fn a_lease_closed_while_others_hold_the_rule_records_for_whom_it_was_kept() {
    let mut history = failing_with_lint_in_grace();
    history.insert(history.len() - 2, granted("r1"));
    history.push(succeeded("lint", 1));
    let others = vec![overture_events::DeploymentId::from_uuid(
        uuid::Uuid::from_u128(7),
    )];
    given(history.clone())
        .when(C::RecordAccessRevoked {
            rule: "r1".into(),
            kept_for: others.clone(),
        })
        .then([E::BastionAccessRevoked {
            rule: "r1".into(),
            kept_for: others.clone(),
        }]);
    history.push(E::BastionAccessRevoked {
        rule: "r1".into(),
        kept_for: others,
    });
    assert_eq!(
        actions(given(history).state()),
        vec![Action::PurgeSecrets],
        "its own lease is closed: the deployment goes on to purge its secrets"
    );
}

#[test]
fn when_the_work_is_over_the_bastion_is_closed_before_the_secrets_are_purged() {
    let mut history = failing_with_lint_in_grace();
    history.insert(history.len() - 2, granted("r1"));
    history.push(succeeded("lint", 1));
    let open = given(history.clone());
    assert_eq!(
        actions(open.state()),
        vec![Action::RevokeAccess(access("r1"))]
    );
    assert_eq!(
        open.when(C::RecordSecretsPurged),
        Err(DeploymentError::StepsStillRunning),
        "the purge waits: closing the bastion needs the token"
    );
    given(history.clone())
        .when(C::RecordAccessRevoked {
            rule: "r1".into(),
            kept_for: vec![],
        })
        .then([E::BastionAccessRevoked {
            rule: "r1".into(),
            kept_for: vec![],
        }]);
    history.push(E::BastionAccessRevoked {
        rule: "r1".into(),
        kept_for: vec![],
    });
    let closed = given(history.clone());
    assert_eq!(actions(closed.state()), vec![Action::PurgeSecrets]);
    assert_eq!(
        closed.when(C::RecordAccessRevoked {
            rule: "r1".into(),
            kept_for: vec![],
        }),
        Ok(vec![]),
        "revoking again records nothing"
    );
}

#[test]
fn the_bastion_stays_open_while_a_step_still_runs() {
    let mut history = running_lint();
    history.push(granted("r1"));
    assert!(
        !actions(given(history).state())
            .iter()
            .any(|action| matches!(action, Action::RevokeAccess(_))),
        "lint still runs"
    );
}

#[test]
fn a_rule_opened_by_an_attempt_abandoned_meanwhile_is_recorded_so_it_gets_closed() {
    let mut history = running_lint();
    history.extend([
        cancellation_requested(),
        abandoned_by_cancel("unit", 1),
        abandoned_by_cancel("lint", 1),
    ]);
    given(history.clone())
        .when(C::RecordAccessGranted(access("r1")))
        .then([granted("r1")]);
    history.push(granted("r1"));
    assert_eq!(
        actions(given(history).state()),
        vec![Action::RevokeAccess(access("r1"))]
    );
}
