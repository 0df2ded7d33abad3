//! What the handlers must carry out for a deployment, read from its state alone.

use overture_events::Timestamp;

use super::{BastionAccess, DeploymentState, Phase, StepState};

/// What the handlers must carry out for a deployment, derived from its state alone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Run this attempt once `not_before` has passed.
    RunAttempt {
        step: String,
        attempt: u32,
        not_before: Timestamp,
    },
    /// Advance the deployment again at this instant (a grace period's deadline).
    WakeAt(Timestamp),
    /// Delete the engine's rule on the bastion, then record it.
    RevokeAccess(BastionAccess),
    /// Delete the sealed secrets, then record it.
    PurgeSecrets,
}

/// The actions a deployment's state calls for. Carrying one out twice must be harmless.
///
/// Its cost grows with the number of waiting attempts; a caller that knows which attempts were
/// just decided asks [`attempt_action`] for each and [`actions_besides_attempts`] instead.
pub fn actions(state: &DeploymentState) -> Vec<Action> {
    let mut actions: Vec<Action> = state
        .steps
        .waiting()
        .filter_map(|(name, s)| run_attempt(name, s))
        .collect();
    actions.extend(actions_besides_attempts(state));
    actions
}

/// The attempt's [`Action::RunAttempt`], if that attempt of the step waits to start.
pub fn attempt_action(state: &DeploymentState, step: &str, attempt: u32) -> Option<Action> {
    let (name, s) = state.steps.entry_named(step)?;
    (s.status.is_waiting() && s.attempt == attempt)
        .then(|| run_attempt(name, s))
        .flatten()
}

fn run_attempt(name: &str, s: &StepState) -> Option<Action> {
    s.not_before.map(|not_before| Action::RunAttempt {
        step: name.to_owned(),
        attempt: s.attempt,
        not_before,
    })
}

/// The actions other than running attempts, in the order [`actions`] gives them: waking at the
/// grace period's deadline, closing the bastion, purging the secrets.
pub fn actions_besides_attempts(state: &DeploymentState) -> Vec<Action> {
    let mut actions = Vec::new();
    if let Phase::Failing {
        deadline: Some(deadline),
        ..
    } = state.phase
    {
        if state.running_steps().next().is_some() {
            actions.push(Action::WakeAt(deadline));
        }
    }
    actions.extend(
        state
            .steps
            .awaiting()
            .filter_map(|(_, s)| s.awaiting.as_ref())
            .map(|(deadline, _)| Action::WakeAt(*deadline)),
    );
    // Closing the bastion comes first: it needs the user's token, which the purge deletes.
    if let Some(access) = state
        .bastion_access
        .as_ref()
        .filter(|_| state.work_is_over())
    {
        actions.push(Action::RevokeAccess(access.clone()));
    } else if state.may_purge() && !state.secrets_purged && !state.keeps_watching() {
        actions.push(Action::PurgeSecrets);
    }
    actions
}
