//! The query port on the embedded engine's data directory: the SQLite read models and log, and
//! the attempt logs' files. The views are as fresh as the last fold; the `overture` program
//! folds what is new before it asks.

use async_trait::async_trait;
use overture_domain::projection::{DeploymentView, TenantView};
use overture_domain::services::RegisteredInstance;
use overture_events::{DeploymentId, Envelope};
use overture_kit::query::{AttemptLog, DeploymentFilter, QueryDeployments, QueryError};
use overture_kit::registry::ReadServiceRegistry;
use overture_projector::StoreError;
use overture_runner::logs::LogName;

use crate::logs::LogFiles;
use crate::sqlite::{EventLog, ListFilter, LogError, SqliteReadModels};

/// Queries answered from one data directory.
#[derive(Clone, Debug)]
pub struct EmbeddedQueries {
    read_models: SqliteReadModels,
    log: EventLog,
    logs: LogFiles,
}

impl EmbeddedQueries {
    /// Queries on these read models, this log and these attempt logs.
    pub fn new(read_models: SqliteReadModels, log: EventLog, logs: LogFiles) -> Self {
        Self {
            read_models,
            log,
            logs,
        }
    }
}

/// SQLite is a file on this machine: a failure to read it is not mended by waiting.
fn from_store(error: StoreError) -> QueryError {
    QueryError::Corrupt(Box::new(error))
}

fn from_log(error: LogError) -> QueryError {
    QueryError::Corrupt(Box::new(error))
}

#[async_trait]
impl QueryDeployments for EmbeddedQueries {
    async fn deployment(&self, id: DeploymentId) -> Result<Option<DeploymentView>, QueryError> {
        self.read_models.deployment(id).await.map_err(from_store)
    }

    async fn list(&self, filter: &DeploymentFilter) -> Result<Vec<DeploymentView>, QueryError> {
        self.read_models
            .list(ListFilter {
                tenant: filter.tenant.clone(),
                status: filter.status.map(|s| s.as_str().to_owned()),
            })
            .await
            .map_err(from_store)
    }

    async fn tenants(&self) -> Result<Vec<TenantView>, QueryError> {
        self.read_models.tenants().await.map_err(from_store)
    }

    async fn events(&self, id: DeploymentId) -> Result<Vec<Envelope>, QueryError> {
        self.log
            .read_stream(&id.stream(), 0)
            .await
            .map_err(from_log)
    }

    async fn attempt_log(
        &self,
        id: DeploymentId,
        step: &str,
        log: AttemptLog,
    ) -> Result<Option<Vec<u8>>, QueryError> {
        let name = match log {
            AttemptLog::Attempt(attempt) => LogName::Attempt(attempt),
            AttemptLog::Destroy => LogName::Destroy,
        };
        match std::fs::read(self.logs.path(id, step, name)) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(QueryError::Unavailable(Box::new(error))),
        }
    }

    async fn service_instances(&self, tenant: &str) -> Result<Vec<RegisteredInstance>, QueryError> {
        Ok(self.read_models.service_instances(tenant).await?)
    }

    /// In one tenant, from the names the log claims with each request: the holder as the
    /// log has it, not as far as the read models have folded.
    async fn named(
        &self,
        tenant: Option<&str>,
        name: &str,
    ) -> Result<Vec<DeploymentView>, QueryError> {
        let Some(tenant) = tenant else {
            let filter = DeploymentFilter::default();
            let mut views = self.list(&filter).await?;
            views.retain(|view| view.name.as_deref() == Some(name) && !view.is_destroyed());
            return Ok(views);
        };
        let Some(stream) = self.log.named(tenant, name).await.map_err(from_log)? else {
            return Ok(vec![]);
        };
        let id = DeploymentId::from_stream(&stream)
            .map_err(|error| QueryError::Corrupt(Box::new(error)))?;
        Ok(self.deployment(id).await?.into_iter().collect())
    }
}
