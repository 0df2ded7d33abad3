//! The fold's state: where the deployment and each of its steps stand.

use std::collections::BTreeMap;
use std::sync::Arc;

use overture_events::{
    BlueprintSnapshot, CloudAccount, HostKeySource, InputFingerprint, PinnedHostKey,
    ServiceShortfall, StepSpec, Timestamp, TriggeredBy,
};
use serde::{Deserialize, Serialize};

use super::DeploymentError;
use crate::services::ServiceInstance;
pub use crate::steps::Steps;

/// Where a step stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum StepStatus {
    /// Waiting for the steps it needs.
    Pending,
    /// Its needs succeeded; waiting for the services it requires to have enough members.
    Awaiting,
    /// An attempt may start (once its `not_before` has passed).
    Scheduled,
    /// An attempt is running.
    Running,
    /// An attempt failed; another is scheduled after a wait.
    Retrying,
    /// Done.
    Succeeded,
    /// Failed for good.
    Failed,
    /// Given up on because the deployment is failing or cancelled.
    Abandoned,
}

impl StepStatus {
    /// The name used in status output.
    pub const fn as_str(&self) -> &'static str {
        match self {
            StepStatus::Pending => "pending",
            StepStatus::Awaiting => "awaiting",
            StepStatus::Scheduled => "scheduled",
            StepStatus::Running => "running",
            StepStatus::Retrying => "retrying",
            StepStatus::Succeeded => "succeeded",
            StepStatus::Failed => "failed",
            StepStatus::Abandoned => "abandoned",
        }
    }

    /// Whether an attempt is waiting to start.
    pub const fn is_waiting(&self) -> bool {
        matches!(self, StepStatus::Scheduled | StepStatus::Retrying)
    }
}

/// One step's state within the aggregate.
#[derive(Clone, Debug, PartialEq)]
pub struct StepState {
    /// Where it stands.
    pub status: StepStatus,
    /// The current (or last) attempt; 0 before the first.
    pub attempt: u32,
    /// When the waiting attempt may start.
    pub not_before: Option<Timestamp>,
    /// What the successful attempt produced.
    pub outputs: BTreeMap<String, String>,
    /// Until when the running attempt may go unheard from (see [`ATTEMPT_LEASE_MARGIN`]).
    pub lease_until: Option<Timestamp>,
    /// The number of the current run's first attempt: 1, or after a redrive the one after the
    /// step's last attempt. The retry policy counts attempts from it.
    pub first_attempt: u32,
    /// While it awaits services: when it fails as `service-timeout`, and what it waits for.
    pub awaiting: Option<(Timestamp, Vec<ServiceShortfall>)>,
    /// The members of each service its attempts see (`ServicesResolved`).
    pub services: BTreeMap<String, Vec<String>>,
    /// What its current (or last) attempt ran with; `None` when recorded before fingerprints.
    pub started_fingerprint: Option<InputFingerprint>,
    /// What its last succeeded attempt ran with; `None` when unknown (none succeeded, or it
    /// was recorded before fingerprints).
    pub fingerprint: Option<InputFingerprint>,
}

/// How a finished deployment ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every step succeeded.
    Succeeded,
    /// A step failed for good.
    Failed,
    /// A user cancelled it.
    Cancelled,
}

/// The deployment's phase.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Phase {
    /// Nothing recorded yet.
    #[default]
    NotRequested,
    /// Steps are being scheduled and run.
    Running,
    /// A step failed for good; running steps may finish until the deadline (if any).
    Failing {
        /// Why the deployment fails.
        reason: String,
        /// When still-running steps are abandoned.
        deadline: Option<Timestamp>,
    },
    /// A user cancelled it: nothing runs any more; the bastion is closed and the secrets purged
    /// before it ends.
    Cancelling {
        /// Who asked.
        requested_by: String,
        /// Why.
        reason: String,
    },
    /// Ended.
    Finished(Outcome),
}

/// Everything the aggregate knows about one deployment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DeploymentState {
    /// The owning tenant.
    pub tenant: String,
    /// The blueprint, once requested; shared by every clone of the state.
    pub blueprint: Option<Arc<BlueprintSnapshot>>,
    /// Parameter values.
    pub params: BTreeMap<String, String>,
    /// Every step, in blueprint order.
    pub steps: Steps,
    /// The phase.
    pub phase: Phase,
    /// Where the sealed secrets are, if any were sealed.
    pub seal: Option<String>,
    /// Whether the sealed secrets have been deleted.
    pub secrets_purged: bool,
    /// The public half of the deployment's SSH key, if it has one.
    pub ssh_public_key: Option<String>,
    /// The tearing down of the deployment's resources, once a user asked for it.
    pub destroy: Option<Destroy>,
    /// The cloud account the deployment acts for, when it was given a token.
    pub cloud: Option<CloudAccount>,
    /// The trigger and event that started it, when a trigger did.
    pub triggered_by: Option<TriggeredBy>,
    /// The engine's rule on the bastion, while it is open.
    pub bastion_access: Option<BastionAccess>,
    /// The SSH host keys pinned so far, by host as `known_hosts` names it.
    pub host_keys: BTreeMap<String, PinnedHost>,
    /// The service instances the deployment registered and has not deregistered.
    pub registrations: Vec<ServiceInstance>,
}

/// A server's pinned SSH host keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PinnedHost {
    /// The server: its name in the step that made it, or its address.
    pub server: String,
    /// The host as `known_hosts` names it: `host`, or `[host]:port` off port 22.
    pub host: String,
    /// How the keys were learned.
    pub learned: HostKeySource,
    /// The keys.
    pub keys: Vec<PinnedHostKey>,
}

/// The engine's temporary rule on a bastion's security group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BastionAccess {
    /// The rule's id in the cloud.
    pub rule: String,
    /// The bastion's security group.
    pub security_group: String,
    /// The bastion's address.
    pub bastion: String,
    /// The address admitted.
    pub source: String,
    /// The port admitted.
    pub port: u16,
}

/// Where tearing a deployment down stands.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Destroy {
    /// Steps whose resources are still to be destroyed, in the order they will be.
    pub remaining: Vec<String>,
    /// Whether the last try stopped at a failure (asking again carries on).
    pub failed: bool,
}

impl Destroy {
    /// Whether every resource is gone.
    pub fn is_done(&self) -> bool {
        self.remaining.is_empty() && !self.failed
    }
}

impl DeploymentState {
    /// The tenant the read models and the service registry key it on: its project's id
    /// ([`crate::tenancy::tenant_of`]). `tenant` stays as recorded, since seals are bound to it.
    pub fn tenant_id(&self) -> &str {
        crate::tenancy::tenant_of(&self.tenant, self.cloud.as_ref())
    }

    /// Whether the deployment has ended.
    pub fn is_finished(&self) -> bool {
        matches!(self.phase, Phase::Finished(_))
    }

    /// The step's state, or the command's error for an unknown step.
    pub fn step(&self, step: &str) -> Result<&StepState, DeploymentError> {
        self.steps
            .get(step)
            .ok_or_else(|| DeploymentError::UnknownStep(step.to_owned()))
    }

    /// Steps with an attempt running now, in blueprint order.
    pub fn running_steps(&self) -> impl Iterator<Item = (&String, &StepState)> {
        self.steps.running()
    }

    /// The blueprint's spec of the step.
    pub fn spec(&self, step: &str) -> Option<&StepSpec> {
        let blueprint = self.blueprint.as_ref()?;
        // A step's place among the states is its place in the blueprint.
        self.steps
            .position(step)
            .and_then(|at| blueprint.steps.get(at))
            .filter(|spec| spec.name == step)
            .or_else(|| blueprint.step(step))
    }

    /// Whether the secrets may go: no step can run any more and the bastion is closed.
    pub(super) fn may_purge(&self) -> bool {
        (self.work_is_over() || self.is_finished()) && self.bastion_access.is_none()
    }

    /// Whether a step watches services: the deployment then runs it again when they change.
    pub fn watches(&self) -> bool {
        self.steps.watch_services()
    }

    /// Whether the deployment keeps watching the services its steps watch: it has not failed,
    /// been cancelled or destroyed. Its seal is kept while it does, since running a step again
    /// needs its SSH key and the user's token.
    pub fn keeps_watching(&self) -> bool {
        self.watches()
            && self.destroy.is_none()
            && matches!(
                self.phase,
                Phase::Running | Phase::Finished(Outcome::Succeeded)
            )
    }

    /// Whether the deployment looks at the tenant's registry: a step of it waits for services
    /// or is about to be scheduled with their members in view, or it keeps watching.
    pub fn looks_at_services(&self) -> bool {
        if !self.steps.see_services() {
            return false;
        }
        match self.phase {
            Phase::Running => true,
            Phase::Finished(Outcome::Succeeded) => self.keeps_watching(),
            _ => false,
        }
    }

    /// Whether no more step work will happen: everything succeeded, or nothing runs while failing.
    pub(super) fn work_is_over(&self) -> bool {
        match self.phase {
            Phase::Running => self.steps.all_succeeded(),
            Phase::Failing { .. } | Phase::Cancelling { .. } => {
                self.running_steps().next().is_none()
            }
            Phase::NotRequested | Phase::Finished(_) => false,
        }
    }
}
