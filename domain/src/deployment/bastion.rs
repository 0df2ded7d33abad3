//! The engine's rule on the bastion: opened for a running step, shared, and closed once the
//! work is over.

use overture_events::DeploymentEvent;

use super::{BastionAccess, DeploymentError, DeploymentState, Phase};

/// The engine opened the bastion for itself.
pub(super) fn granted(
    state: &DeploymentState,
    access: BastionAccess,
) -> Result<Vec<DeploymentEvent>, DeploymentError> {
    if let Some(open) = &state.bastion_access {
        return Err(DeploymentError::AccessAlreadyGranted(open.rule.clone()));
    }
    // An attempt abandoned while it opened the bastion still records its rule, so
    // that the rule is closed with the others; only a deployment still running
    // refuses a rule no step needs.
    let late = matches!(
        state.phase,
        Phase::Failing { .. } | Phase::Cancelling { .. }
    ) && !state.secrets_purged;
    if state.running_steps().next().is_none() && !late {
        return Err(DeploymentError::NoStepRunning);
    }
    Ok(vec![DeploymentEvent::BastionAccessGranted {
        rule: access.rule,
        security_group: access.security_group,
        bastion: access.bastion,
        source: access.source,
        port: access.port,
    }])
}

/// The deployment's lease on the rule closed; a rule it does not hold is no news.
pub(super) fn revoked(
    state: &DeploymentState,
    rule: String,
    kept_for: Vec<overture_events::DeploymentId>,
) -> Vec<DeploymentEvent> {
    state
        .bastion_access
        .as_ref()
        .filter(|open| open.rule == rule)
        .map(|_| DeploymentEvent::BastionAccessRevoked { rule, kept_for })
        .into_iter()
        .collect()
}
