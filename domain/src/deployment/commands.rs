//! What can be asked of a deployment.

use std::collections::BTreeMap;

use overture_events::{BlueprintSnapshot, CloudAccount, ErrorClass, Timestamp, TriggeredBy};

use super::{BastionAccess, PinnedHost};
use crate::services::ServiceInstance;

/// What can be asked of a deployment. Every command that depends on time carries `now`.
// `Request` carries the whole blueprint, once per deployment: not worth a box.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum DeploymentCommand {
    /// Record a new deployment of a validated blueprint.
    Request {
        tenant: String,
        requested_by: String,
        trigger: String,
        source: String,
        blueprint: BlueprintSnapshot,
        blueprint_hash: String,
        params: BTreeMap<String, String>,
        /// The cloud account the user's token is for, when one was given.
        cloud: Option<CloudAccount>,
        /// What was sealed, when there is anything to seal.
        sealed: Option<SealedCredentials>,
        /// The trigger and event that asked, when a trigger did.
        triggered_by: Option<TriggeredBy>,
        /// The name the user gave the deployment, when one was given.
        name: Option<String>,
    },
    /// Move on: schedule steps whose needs succeeded, abandon at a passed deadline, finish.
    /// Steps that see services are left to [`DeploymentCommand::ObserveServices`].
    Advance { now: Timestamp },
    /// Look at the tenant's registry: the instances other deployments registered (this one's
    /// are in its state). Steps whose needs succeeded start once the services they require
    /// have enough members, or wait for them; a wait past its deadline fails the step as
    /// `service-timeout`; a succeeded step whose watched service changed runs again.
    ObserveServices {
        now: Timestamp,
        others: Vec<ServiceInstance>,
    },
    /// The hosts of a running attempt's step answered the check of the service it provides.
    RegisterServices {
        step: String,
        attempt: u32,
        instances: Vec<ServiceInstance>,
    },
    /// A user cancels the deployment: running and waiting attempts are abandoned at once.
    Cancel {
        requested_by: String,
        reason: String,
    },
    /// An attempt is starting in a sandbox.
    StartAttempt {
        step: String,
        attempt: u32,
        sandbox: String,
        now: Timestamp,
    },
    /// An attempt succeeded.
    RecordSuccess {
        step: String,
        attempt: u32,
        outputs: BTreeMap<String, String>,
        duration_ms: u64,
    },
    /// A running attempt was cut short by something other than the step (class
    /// `interrupted`); the retry policy decides what follows.
    InterruptAttempt {
        step: String,
        attempt: u32,
        why: Interruption,
        now: Timestamp,
    },
    /// The queue moved an attempt's job to its dead-letter queue after `receives` deliveries;
    /// the attempt fails as `interrupted` unless it already ended.
    RecordDeadLetter {
        step: String,
        attempt: u32,
        receives: u32,
        now: Timestamp,
    },
    /// An attempt failed; the retry policy decides what follows.
    RecordFailure {
        step: String,
        attempt: u32,
        error_class: ErrorClass,
        exit_code: Option<i32>,
        message: String,
        duration_ms: u64,
        now: Timestamp,
    },
    /// The engine opened the bastion for itself, for a step about to go through it.
    RecordAccessGranted(BastionAccess),
    /// The deployment's lease on the engine's rule on the bastion closed: the rule was deleted,
    /// or kept for the deployments in `kept_for`, which still hold it.
    RecordAccessRevoked {
        rule: String,
        kept_for: Vec<overture_events::DeploymentId>,
    },
    /// The engine learned servers' SSH host keys; hosts already pinned keep their keys.
    PinHostKeys(Vec<PinnedHost>),
    /// The sealed secrets were deleted.
    RecordSecretsPurged,
    /// A user carries a failed deployment on from its failed and abandoned steps; what the
    /// user gave again (secrets, token) is sealed anew.
    Redrive {
        requested_by: String,
        /// What was sealed, when there is anything to seal.
        sealed: Option<SealedCredentials>,
    },
    /// A user asks for the deployment's resources to be destroyed (or to carry on doing so).
    RequestDestroy,
    /// A step's resources were destroyed.
    RecordStepDestroyed { step: String, duration_ms: u64 },
    /// Destroying a step's resources failed.
    RecordDestroyFailure {
        step: String,
        exit_code: Option<i32>,
        message: String,
        duration_ms: u64,
    },
    /// A running attempt's sandbox reaches only these destinations.
    RecordNetworkPolicy {
        step: String,
        attempt: u32,
        allowed: Vec<String>,
    },
}

impl DeploymentCommand {
    /// The command's name, as the event card ([`super::card`]) names it.
    pub const fn name(&self) -> &'static str {
        match self {
            Self::Request { .. } => "Request",
            Self::Advance { .. } => "Advance",
            Self::ObserveServices { .. } => "ObserveServices",
            Self::RegisterServices { .. } => "RegisterServices",
            Self::Cancel { .. } => "Cancel",
            Self::StartAttempt { .. } => "StartAttempt",
            Self::RecordSuccess { .. } => "RecordSuccess",
            Self::InterruptAttempt { .. } => "InterruptAttempt",
            Self::RecordDeadLetter { .. } => "RecordDeadLetter",
            Self::RecordFailure { .. } => "RecordFailure",
            Self::RecordAccessGranted(_) => "RecordAccessGranted",
            Self::RecordAccessRevoked { .. } => "RecordAccessRevoked",
            Self::PinHostKeys(_) => "PinHostKeys",
            Self::RecordSecretsPurged => "RecordSecretsPurged",
            Self::Redrive { .. } => "Redrive",
            Self::RequestDestroy => "RequestDestroy",
            Self::RecordStepDestroyed { .. } => "RecordStepDestroyed",
            Self::RecordDestroyFailure { .. } => "RecordDestroyFailure",
            Self::RecordNetworkPolicy { .. } => "RecordNetworkPolicy",
        }
    }
}

/// How an attempt came to be cut short, not by anything the step did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Interruption {
    /// Its lease ended and nobody recorded how it went: its runner is gone.
    LeaseExpired,
    /// The engine that ran it is known to have stopped (`resume` holds every engine's lock).
    EngineStopped,
    /// Its runner lost the job (another took it over) and stopped the attempt.
    RunnerLostJob,
}

impl Interruption {
    /// What the failed attempt's message says.
    pub const fn message(&self) -> &'static str {
        match self {
            Interruption::LeaseExpired => {
                "the attempt was interrupted: its runner was not heard from before its lease ended"
            }
            Interruption::EngineStopped => {
                "the attempt was interrupted: the engine stopped while it ran"
            }
            Interruption::RunnerLostJob => {
                "the attempt was interrupted: its runner lost the job and stopped it"
            }
        }
    }
}

/// What was sealed for a new deployment: references only.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SealedCredentials {
    /// Where the sealed values are kept.
    pub seal: String,
    /// The names of the user's sealed secrets.
    pub secrets: Vec<String>,
    /// The public half of the deployment's SSH key, whose private half is sealed too.
    pub ssh_public_key: Option<String>,
    /// Whether the user's cloud token is sealed too.
    pub token: bool,
}
