//! The service registry's read port: what the engine asks of the tenants' registry, which the
//! projector keeps ([`overture_domain::registry`] is its fold), answered the same by the
//! SQLite and the DynamoDB read models.

use async_trait::async_trait;
use overture_domain::services::RegisteredInstance;
use overture_events::DeploymentId;

/// Why the registry could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The store could not be reached or failed on its side: asking again later may help.
    #[error("the service registry could not be read: {0}")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// What is stored cannot be read back: asking again will not help.
    #[error("the service registry holds something unreadable: {0}")]
    Corrupt(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl RegistryError {
    /// Whether trying the same call again later may succeed.
    pub const fn is_retryable(&self) -> bool {
        matches!(self, RegistryError::Unavailable(_))
    }
}

/// Reads the tenants' service registry.
#[async_trait]
pub trait ReadServiceRegistry: Send + Sync {
    /// The tenant's registered instances, by service, then address, then port (then the
    /// deployment that registered them).
    async fn service_instances(
        &self,
        tenant: &str,
    ) -> Result<Vec<RegisteredInstance>, RegistryError>;

    /// The tenant's deployments that still care about `service`'s members
    /// ([`overture_domain::registry::still_interested`]): those with a step that requires or
    /// watches it that are running, and those that succeeded, watch it and are not being torn
    /// down. Sorted, without repeats. It may name a deployment that no longer cares (callers
    /// are idempotent); it never leaves out one that does.
    async fn interested_deployments(
        &self,
        tenant: &str,
        service: &str,
    ) -> Result<Vec<DeploymentId>, RegistryError>;
}
