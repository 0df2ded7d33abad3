//! The query port: what people read about deployments (`overture status`, `list`, `tenants`,
//! `events`, `grants`, `logs`, `services`), answered the same from the embedded engine's SQLite read
//! models and from DynamoDB, served by the HTTP API of `overture serve`, and answered by that API
//! for `overture --server URL`.
//!
//! The views are the projector's read models; the audit trail is the stream as recorded. Grants
//! are read from the deployments' views ([`QueryDeployments::list`]), which hold them.

use async_trait::async_trait;
use overture_domain::projection::{DeploymentStatus, DeploymentView, TenantView};
use overture_domain::services::RegisteredInstance;
use overture_events::{DeploymentId, Envelope};

/// Which deployments a list holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeploymentFilter {
    /// Only this tenant's deployments.
    pub tenant: Option<String>,
    /// Only deployments with this status.
    pub status: Option<DeploymentStatus>,
}

impl DeploymentFilter {
    /// Whether `view` passes the filter.
    pub fn admits(&self, view: &DeploymentView) -> bool {
        self.tenant.as_ref().is_none_or(|t| *t == view.tenant)
            && self.status.is_none_or(|s| s == view.status)
    }
}

/// One attempt's output, or the output of tearing a step down.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttemptLog {
    /// This attempt's (1-based).
    Attempt(u32),
    /// `overture destroy`'s for the step.
    Destroy,
}

/// Why a query could not be answered.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    /// The store could not be reached or failed on its side: asking again later may help.
    #[error("the read models could not be read: {0}")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// What is stored cannot be read back (a view or an event of an unknown shape).
    #[error("the read models hold something unreadable: {0}")]
    Corrupt(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// This backend does not answer this query (yet); the message says what instead.
    #[error("{0}")]
    NotAvailable(&'static str),
    /// The service answering the queries refused the caller (an HTTP API that does not accept
    /// its token): asking again the same way will not help; the message says why.
    #[error("{0}")]
    Refused(String),
}

impl QueryError {
    /// Whether trying the same call again later may succeed.
    pub const fn is_retryable(&self) -> bool {
        matches!(self, QueryError::Unavailable(_))
    }
}

/// What people read about deployments.
#[async_trait]
pub trait QueryDeployments: Send + Sync {
    /// One deployment's view; none when there is no such deployment.
    async fn deployment(&self, id: DeploymentId) -> Result<Option<DeploymentView>, QueryError>;

    /// Deployments passing `filter`, newest first (by start, then id).
    async fn list(&self, filter: &DeploymentFilter) -> Result<Vec<DeploymentView>, QueryError>;

    /// Every tenant's summary, by tenant name.
    async fn tenants(&self) -> Result<Vec<TenantView>, QueryError>;

    /// A deployment's events as recorded, in order; none when there is no such deployment.
    async fn events(&self, id: DeploymentId) -> Result<Vec<Envelope>, QueryError>;

    /// The output the runner kept of a step's attempt (secrets masked); none when it has none.
    async fn attempt_log(
        &self,
        id: DeploymentId,
        step: &str,
        log: AttemptLog,
    ) -> Result<Option<Vec<u8>>, QueryError>;

    /// The deployments named `name` that are not destroyed, of `tenant` (of every tenant the
    /// caller sees, when none), by id; at most one per tenant, as the log keeps names unique
    /// among a tenant's deployments that are not destroyed.
    async fn named(
        &self,
        tenant: Option<&str>,
        name: &str,
    ) -> Result<Vec<DeploymentView>, QueryError> {
        let filter = DeploymentFilter {
            tenant: tenant.map(str::to_owned),
            status: None,
        };
        let mut views = self.list(&filter).await?;
        views.retain(|view| view.name.as_deref() == Some(name) && !view.is_destroyed());
        Ok(views)
    }

    /// The tenant's service registry: its registered instances, by service, then address,
    /// then port (`overture services`).
    async fn service_instances(&self, tenant: &str) -> Result<Vec<RegisteredInstance>, QueryError> {
        let _ = tenant;
        Err(QueryError::NotAvailable(
            "the service registry is read from the data directory or from AWS, not through this backend",
        ))
    }
}

impl From<crate::registry::RegistryError> for QueryError {
    fn from(error: crate::registry::RegistryError) -> Self {
        use crate::registry::RegistryError;
        match error {
            RegistryError::Unavailable(source) => QueryError::Unavailable(source),
            RegistryError::Corrupt(source) => QueryError::Corrupt(source),
        }
    }
}
