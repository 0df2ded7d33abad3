//! The ports [`run_attempt`](crate::run_attempt) acts through besides the log and the sandbox:
//! the seal, the kept step state, the bastion's access, the job's lease, and their error.

use async_trait::async_trait;
use overture_domain::deployment::BastionAccess;
use overture_domain::secret::SecretValues;
use overture_events::{CloudAccount, DeploymentId, Timestamp};
use overture_kit::payload::StorePayloads;
use overture_kit::{Clock, DeploymentLog};

use crate::{logs, step, RunSandboxed};

/// Opens a deployment's sealed secrets.
#[async_trait]
pub trait OpenSeal: Send + Sync {
    /// The secret values sealed for this deployment.
    async fn open(
        &self,
        deployment: DeploymentId,
        tenant: &str,
        seal: &str,
    ) -> Result<SecretValues, PortError>;
}

/// Keeps what a step's attempts hand on to the next attempt and to `destroy` (a Terraform
/// state), sealed to the deployment, outside every sandbox.
#[async_trait]
pub trait KeepStepState: Send + Sync {
    /// What the step's last attempt kept, if anything.
    async fn load(
        &self,
        deployment: DeploymentId,
        tenant: &str,
        step: &str,
    ) -> Result<Option<Vec<u8>>, PortError>;
    /// Keeps `state` for the step, replacing what was kept.
    async fn save(
        &self,
        deployment: DeploymentId,
        tenant: &str,
        step: &str,
        state: &[u8],
    ) -> Result<(), PortError>;
}

/// Opens a deployment's bastion for the engine, acting with the user's token: adds a rule to the
/// bastion's security group admitting the engine's own address to its SSH port.
#[async_trait]
pub trait GrantAccess: Send + Sync {
    /// Adds the rule (or finds the identical one already there) and says what it admits.
    async fn grant(
        &self,
        deployment: DeploymentId,
        cloud: &CloudAccount,
        bastion: &step::SshAddress,
        security_group: &str,
    ) -> Result<BastionAccess, GrantError>;

    /// Whether the engine's rule `access` is still on the bastion's security group: a step
    /// that could not get through the bastion asks, to tell a deleted rule from failing servers.
    async fn still_granted(
        &self,
        deployment: DeploymentId,
        cloud: &CloudAccount,
        access: &BastionAccess,
    ) -> Result<bool, GrantError>;
}

/// Why the bastion could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum GrantError {
    /// The cloud API answered 502/503 or could not be reached: worth retrying.
    #[error("the cloud could not open the bastion: {0}")]
    Backend(String),
    /// Anything else: a refused token, an unknown security group.
    #[error("the bastion could not be opened: {0}")]
    Refused(String),
}

/// Keeps the job's lease while the attempt runs, so no other runner takes it.
#[async_trait]
pub trait KeepAlive: Send + Sync {
    /// Renews the lease; an error means the job is no longer ours. `attempt_lease` is when the
    /// attempt's own lease ends (`StepStarted.lease_until`: its timeout and a margin): should
    /// the runner die, the job is best back then, when the attempt can be found interrupted.
    async fn keep_alive(&self, attempt_lease: Option<Timestamp>) -> Result<(), PortError>;
}

/// A port failed, saying whether trying again can help; never carries a secret.
#[derive(Debug, thiserror::Error)]
pub enum PortError {
    /// The store, service or machine behind the port failed in a way that may pass (unreachable,
    /// throttled, out of room): trying again later may succeed.
    #[error("{0}")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The port refused, and will refuse the same call again (a seal that does not open for this
    /// tenant, a lease another runner holds now, no right to the store).
    #[error("{0}")]
    Refused(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl PortError {
    /// A failure that may pass.
    pub fn unavailable(error: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        PortError::Unavailable(error.into())
    }

    /// A refusal that trying again will not change.
    pub fn refused(error: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        PortError::Refused(error.into())
    }

    /// Whether trying the same call again later may succeed.
    pub const fn is_retryable(&self) -> bool {
        matches!(self, PortError::Unavailable(_))
    }
}

/// The ports [`run_attempt`] uses.
pub struct RunnerPorts<'a> {
    /// The deployments.
    pub log: &'a dyn DeploymentLog,
    /// The sandbox.
    pub sandbox: &'a dyn RunSandboxed,
    /// The sealed secrets.
    pub seals: &'a dyn OpenSeal,
    /// What steps keep between attempts.
    pub kept: &'a dyn KeepStepState,
    /// The bastions.
    pub access: &'a dyn GrantAccess,
    /// Every attempt's output.
    pub logs: &'a dyn logs::AttemptLogs,
    /// The time.
    pub clock: &'a dyn Clock,
    /// The blueprint's files, by hash.
    pub payloads: &'a dyn StorePayloads,
    /// How much of the host's loopback the engine's operator lets steps reach.
    pub loopback: overture_domain::egress::LoopbackEgress,
}
