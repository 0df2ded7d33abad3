//! Moving a deployment on: schedule what is ready, abandon at a passed deadline, end.

use overture_events::{DeploymentEvent, Timestamp};

use super::{DeploymentState, Phase};

pub(super) fn advance(state: &DeploymentState, now: Timestamp) -> Vec<DeploymentEvent> {
    match &state.phase {
        Phase::Running => {
            if state.work_is_over() {
                return ending(state, DeploymentEvent::DeploymentSucceeded {});
            }
            // Pending steps whose needs all succeeded, kept up to date as events are applied.
            state
                .steps
                .ready(false)
                .map(|(name, s)| DeploymentEvent::StepScheduled {
                    step: name.clone(),
                    attempt: s.first_attempt,
                    not_before: now,
                })
                .collect()
        }
        Phase::Failing { reason, deadline } => {
            let mut events: Vec<DeploymentEvent> = match deadline {
                Some(deadline) if now >= *deadline => state
                    .running_steps()
                    .map(|(name, s)| DeploymentEvent::StepAbandoned {
                        step: name.clone(),
                        attempt: s.attempt,
                        reason: "still running when the failure grace period ended".into(),
                    })
                    .collect(),
                _ => vec![],
            };
            let nothing_runs = !events.is_empty() || state.running_steps().next().is_none();
            if nothing_runs {
                events.extend(ending(
                    state,
                    DeploymentEvent::DeploymentFailed {
                        reason: reason.clone(),
                    },
                ));
            }
            events
        }
        Phase::Cancelling {
            requested_by,
            reason,
        } => {
            if state.work_is_over() {
                ending(
                    state,
                    DeploymentEvent::DeploymentCancelled {
                        reason: reason.clone(),
                        requested_by: requested_by.clone(),
                    },
                )
            } else {
                vec![]
            }
        }
        Phase::NotRequested | Phase::Finished(_) => vec![],
    }
}

/// The deployment's `end`, once its work is over: after its secrets are purged. A deployment
/// that sealed nothing, and so opened no bastion, has nothing to purge: its purge is recorded
/// with its end, in the commit that ends its work, instead of in a commit of its own after the
/// orchestrator has deleted nothing.
pub(super) fn ending(state: &DeploymentState, end: DeploymentEvent) -> Vec<DeploymentEvent> {
    let watching = matches!(end, DeploymentEvent::DeploymentSucceeded {})
        && state.keeps_watching()
        && state.seal.is_some();
    if state.secrets_purged || (watching && state.bastion_access.is_none()) {
        vec![end]
    } else if state.seal.is_none() && state.bastion_access.is_none() {
        vec![DeploymentEvent::SecretsPurged {}, end]
    } else {
        vec![]
    }
}
