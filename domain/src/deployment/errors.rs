//! Why a command is refused.

use overture_events::Timestamp;

/// Why a command was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DeploymentError {
    /// `Request` on a deployment that exists.
    #[error("the deployment was already requested")]
    AlreadyRequested,
    /// Any other command before `Request`.
    #[error("no such deployment")]
    NotRequested,
    /// `Request` of a blueprint or parameters the engine could not run (see
    /// [`crate::blueprint::recorded_problems`]): every door checks them first, so this only
    /// guards a door that forgot.
    #[error("the deployment cannot be run as requested:\n{0}")]
    Unrunnable(crate::blueprint::BlueprintError),
    /// The deployment has ended.
    #[error("the deployment has already ended")]
    AlreadyFinished,
    /// The step is not in the blueprint.
    #[error("the blueprint has no step `{0}`")]
    UnknownStep(String),
    /// This attempt is not waiting to start (already started, superseded, or abandoned).
    #[error("attempt {attempt} of step `{step}` is not waiting to start")]
    AttemptNotScheduled { step: String, attempt: u32 },
    /// The attempt's wait has not passed.
    #[error("attempt {attempt} of step `{step}` may not start before {not_before}")]
    NotYetDue {
        step: String,
        attempt: u32,
        not_before: Timestamp,
    },
    /// This attempt is not running, so its outcome cannot be recorded.
    #[error("attempt {attempt} of step `{step}` is not running")]
    AttemptNotRunning { step: String, attempt: u32 },
    /// The attempt's lease has not ended: for all anyone knows, it still runs.
    #[error(
        "attempt {attempt} of step `{step}` may still be running: its lease lasts until {until}"
    )]
    LeaseNotExpired {
        step: String,
        attempt: u32,
        until: Timestamp,
    },
    /// Secrets may be purged only once no step can run any more and the bastion is closed.
    #[error("the secrets cannot be purged while steps may still run or the bastion is open")]
    StepsStillRunning,
    /// The engine already holds a rule on the bastion; steps share it.
    #[error("the bastion is already open for this deployment (rule {0})")]
    AccessAlreadyGranted(String),
    /// The bastion is opened only for a step about to run.
    #[error("no step of the deployment is running, so the bastion is not opened")]
    NoStepRunning,
    /// A deployment is destroyed only once it has ended.
    #[error("the deployment is still running; destroy it once it has ended")]
    StillRunning,
    /// Everything the deployment made is gone already.
    #[error("the deployment has already been destroyed")]
    AlreadyDestroyed,
    /// The step is not the next one to destroy.
    #[error("step `{0}` is not the next one to destroy")]
    NotNextToDestroy(String),
    /// Only a step that provides a service registers instances, and only of that service.
    #[error("step `{step}` does not provide service `{service}`")]
    NotProvided { step: String, service: String },
    /// Only a deployment that has ended is redriven.
    #[error("the deployment is still running; redrive it once it has failed")]
    RedriveWhileRunning,
    /// A deployment that succeeded has nothing to carry on.
    #[error(
        "the deployment succeeded, so nothing is left to redrive; redeploy it to run it again"
    )]
    RedriveSucceeded,
    /// A user ended the deployment on purpose.
    #[error("the deployment was cancelled, so it is not redriven; redeploy it to run it again")]
    RedriveCancelled,
    /// Its resources were torn down (or are being): carrying it on would build on nothing.
    #[error("the deployment's resources were destroyed; redeploy it to run it again")]
    RedriveDestroyed,
}
