//! The Deployment aggregate: what a deployment may do next, decided from its events alone.
//!
//! [`Deployment::handle`] takes the current state and a command (time arrives inside it) and
//! returns the events to record, or why the command is refused. [`Deployment::apply`] folds an
//! event into the state. [`actions`] reads the state and says what the handlers must carry out
//! (run an attempt, wake at a deadline, purge the secrets); the aggregate itself never acts.
//!
//! Where things are: [`state`] (the fold's state), [`commands`], [`errors`], [`apply`] (the
//! fold), [`actions`], and one module per family of commands, each deciding its commands'
//! events: [`request`], [`advance`], [`attempt`] (start, success, network policy), [`failure`]
//! (failed, interrupted, dead-lettered, and the retry or failure that follows), [`cancel`],
//! [`redrive`], [`destroy`], [`services`], [`bastion`], [`host_keys`] and [`seal`]. [`card`] is
//! the event card: for every event, the commands that record it, what it sets off and what the
//! projection makes of it.
//! [`handle`](Deployment::handle) first checks that the deployment's phase admits the command,
//! then hands it to its family.

mod actions;
mod advance;
mod apply;
mod attempt;
mod bastion;
mod cancel;
pub mod card;
mod commands;
mod destroy;
mod errors;
mod failure;
mod host_keys;
mod redrive;
mod request;
mod seal;
mod services;
mod state;

pub use actions::{actions, actions_besides_attempts, attempt_action, Action};
use attempt::require_running;
pub use attempt::ATTEMPT_LEASE_MARGIN;
pub use commands::{DeploymentCommand, Interruption, SealedCredentials};
pub use errors::DeploymentError;
pub use failure::later;
use overture_events::DeploymentEvent;
pub use state::{
    BastionAccess, DeploymentState, Destroy, Outcome, Phase, PinnedHost, StepState, StepStatus,
    Steps,
};

/// The aggregate; its state is [`DeploymentState`].
#[derive(Clone, Copy, Debug)]
pub struct Deployment;

impl Deployment {
    /// Decides the events a command leads to, or why it is refused.
    pub fn handle(
        state: &DeploymentState,
        command: DeploymentCommand,
    ) -> Result<Vec<DeploymentEvent>, DeploymentError> {
        use DeploymentCommand as C;
        if !admits(state, &command)? {
            return Ok(vec![]);
        }
        match command {
            C::Request {
                tenant,
                requested_by,
                trigger,
                source,
                blueprint,
                blueprint_hash,
                params,
                cloud,
                sealed,
                triggered_by,
                name,
            } => request::request(request::Request {
                tenant,
                requested_by,
                trigger,
                source,
                blueprint,
                blueprint_hash,
                params,
                cloud,
                sealed,
                triggered_by,
                name,
            }),
            C::Advance { now } => Ok(advance::advance(state, now)),
            C::ObserveServices { now, others } => {
                Ok(services::observe_services(state, now, &others))
            }
            C::RegisterServices {
                step,
                attempt,
                instances,
            } => services::register_services(state, step, attempt, instances),
            C::Cancel {
                requested_by,
                reason,
            } => Ok(cancel::cancel(state, requested_by, reason)),
            C::StartAttempt {
                step,
                attempt,
                sandbox,
                now,
            } => attempt::start(state, step, attempt, sandbox, now),
            C::RecordSuccess {
                step,
                attempt,
                outputs,
                duration_ms,
            } => attempt::succeed(state, step, attempt, outputs, duration_ms),
            C::InterruptAttempt {
                step,
                attempt,
                why,
                now,
            } => failure::interrupt(state, step, attempt, why, now),
            C::RecordDeadLetter {
                step,
                attempt,
                receives,
                now,
            } => failure::dead_lettered(state, step, attempt, receives, now),
            C::RecordFailure {
                step,
                attempt,
                error_class,
                exit_code,
                message,
                duration_ms,
                now,
            } => failure::record(
                state,
                step,
                attempt,
                error_class,
                exit_code,
                message,
                duration_ms,
                now,
            ),
            C::RecordNetworkPolicy {
                step,
                attempt,
                allowed,
            } => attempt::network_policy(state, step, attempt, allowed),
            C::RecordAccessGranted(access) => bastion::granted(state, access),
            C::RecordAccessRevoked { rule, kept_for } => {
                Ok(bastion::revoked(state, rule, kept_for))
            }
            C::PinHostKeys(pins) => Ok(host_keys::pin_host_keys(state, pins)),
            C::RecordSecretsPurged => seal::purged(state),
            C::RequestDestroy => destroy::request_destroy(state),
            C::Redrive {
                requested_by,
                sealed,
            } => Ok(redrive::redrive(state, requested_by, sealed)),
            C::RecordStepDestroyed { step, duration_ms } => {
                destroy::step_destroyed(state, step, duration_ms)
            }
            C::RecordDestroyFailure {
                step,
                exit_code,
                message,
                duration_ms,
            } => destroy::destroy_failed(state, step, exit_code, message, duration_ms),
        }
    }

    /// Folds a whole history into a state.
    pub fn replay(events: impl IntoIterator<Item = DeploymentEvent>) -> DeploymentState {
        events
            .into_iter()
            .fold(DeploymentState::default(), Self::apply)
    }
}

/// Whether the deployment's phase admits the command: `Ok(false)` when it is no news (the
/// command records nothing), the refusal when the phase refuses it.
fn admits(state: &DeploymentState, command: &DeploymentCommand) -> Result<bool, DeploymentError> {
    use DeploymentCommand as C;
    match (&state.phase, &command) {
        (Phase::NotRequested, C::Request { .. }) => {}
        (_, C::Request { .. }) => return Err(DeploymentError::AlreadyRequested),
        (Phase::NotRequested, _) => return Err(DeploymentError::NotRequested),
        (Phase::Finished(_), C::Advance { .. }) => return Ok(false),
        // Every attempt of an ended deployment has its outcome: a dead letter is no news.
        (Phase::Finished(_), C::RecordDeadLetter { .. }) => return Ok(false),
        // Two handlers may carry out the same closing action (the feed and a timer): the
        // one that comes second finds it done, and the deployment ended, which is no error.
        (Phase::Finished(_), C::RecordSecretsPurged) if state.secrets_purged => return Ok(false),
        // A deployment that watched services kept its seal; it goes once it stops watching.
        (Phase::Finished(_), C::RecordSecretsPurged) => {}
        // A succeeded deployment keeps watching the services its steps watch.
        (Phase::Finished(_), C::ObserveServices { .. }) => {}
        (Phase::Finished(_), C::RecordAccessRevoked { .. }) if state.bastion_access.is_none() => {
            return Ok(false)
        }
        // Keys learned by an attempt that ended with the deployment are of no more use.
        (Phase::Finished(_), C::PinHostKeys(_)) => return Ok(false),
        (Phase::Finished(_), C::Redrive { .. }) if state.destroy.is_some() => {
            return Err(DeploymentError::RedriveDestroyed)
        }
        (Phase::Finished(Outcome::Failed), C::Redrive { .. }) => {}
        (Phase::Finished(Outcome::Succeeded), C::Redrive { .. }) => {
            return Err(DeploymentError::RedriveSucceeded)
        }
        (Phase::Finished(Outcome::Cancelled), C::Redrive { .. }) => {
            return Err(DeploymentError::RedriveCancelled)
        }
        (_, C::Redrive { .. }) => return Err(DeploymentError::RedriveWhileRunning),
        (
            Phase::Finished(_),
            C::RequestDestroy | C::RecordStepDestroyed { .. } | C::RecordDestroyFailure { .. },
        ) => {}
        (_, C::RequestDestroy | C::RecordStepDestroyed { .. } | C::RecordDestroyFailure { .. }) => {
            return Err(DeploymentError::StillRunning)
        }
        (Phase::Finished(_), _) => return Err(DeploymentError::AlreadyFinished),
        _ => {}
    }
    Ok(true)
}

#[cfg(feature = "esrs")]
impl esrs::Aggregate for Deployment {
    const NAME: &'static str = "deployment";
    type State = DeploymentState;
    type Command = DeploymentCommand;
    type Event = DeploymentEvent;
    type Error = DeploymentError;

    fn handle_command(
        state: &Self::State,
        command: Self::Command,
    ) -> Result<Vec<Self::Event>, Self::Error> {
        Deployment::handle(state, command)
    }

    fn apply_event(state: Self::State, event: Self::Event) -> Self::State {
        Deployment::apply(state, event)
    }
}
