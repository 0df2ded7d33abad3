//! A user's cancel: every running or waiting attempt is abandoned at once.

use overture_events::DeploymentEvent;

use super::{DeploymentState, Phase};

/// The events of a user's cancel: every running or waiting attempt is abandoned at once, with
/// no grace period (the user asked). Cancelling again changes nothing.
pub(super) fn cancel(
    state: &DeploymentState,
    requested_by: String,
    reason: String,
) -> Vec<DeploymentEvent> {
    if matches!(state.phase, Phase::Cancelling { .. }) {
        return vec![];
    }
    let why = format!("cancelled by {requested_by}");
    let abandoned = state
        .steps
        .waiting_or_running()
        .into_iter()
        .map(|(name, s)| DeploymentEvent::StepAbandoned {
            step: name.clone(),
            attempt: s.attempt,
            reason: why.clone(),
        });
    std::iter::once(DeploymentEvent::CancellationRequested {
        requested_by,
        reason,
    })
    .chain(abandoned)
    .collect()
}
