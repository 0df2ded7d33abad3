//! Redriving a failed deployment: the steps that did not succeed run again.

use overture_events::DeploymentEvent;

use super::seal::credentials_sealed;
use super::{DeploymentState, SealedCredentials, StepStatus};

/// The events of a redrive: every step that did not succeed runs again, and what the user gave
/// again is sealed. Refusals are decided in [`Deployment::handle`].
pub(super) fn redrive(
    state: &DeploymentState,
    requested_by: String,
    sealed: Option<SealedCredentials>,
) -> Vec<DeploymentEvent> {
    let steps = state
        .steps
        .iter()
        .filter(|(_, s)| s.status != StepStatus::Succeeded)
        .map(|(name, _)| name.clone())
        .collect();
    std::iter::once(DeploymentEvent::DeploymentRedriven {
        requested_by,
        steps,
    })
    .chain(sealed.map(credentials_sealed))
    .collect()
}
