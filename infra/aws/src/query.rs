//! The query port on DynamoDB: the views from the read-model tables (a deployment's with what
//! the events table recorded since the projector folded it), the audit trail from the events
//! table, every read strongly consistent; and attempts' output from the runner's S3
//! attempt logs (`logs/<deployment>/<step>/<attempt>.log` in the payloads bucket); the
//! service registry from the read models' registry partitions.

use async_trait::async_trait;
use overture_domain::projection::{project, DeploymentView, TenantView};
use overture_domain::services::RegisteredInstance;
use overture_events::{DeploymentId, Envelope};
use overture_kit::query::{AttemptLog, DeploymentFilter, QueryDeployments, QueryError};
use overture_kit::registry::ReadServiceRegistry;
use overture_kit::{LogError, ReadStream};
use overture_projector::{DeploymentViews, ViewError};

use crate::dynamodb::DynamoDeployments;
use crate::logs::{LogsError, S3AttemptLogs};
use crate::read_models::DynamoReadModels;

/// Queries answered from the read-model tables and the events table.
#[derive(Clone)]
pub struct DynamoQueries {
    views: DynamoReadModels,
    log: DynamoDeployments,
    outputs: Option<S3AttemptLogs>,
}

impl DynamoQueries {
    /// Queries on these read models, this log and, when the bucket is known, these attempt
    /// logs.
    pub fn new(
        views: DynamoReadModels,
        log: DynamoDeployments,
        outputs: Option<S3AttemptLogs>,
    ) -> Self {
        Self {
            views,
            log,
            outputs,
        }
    }
}

fn from_logs(error: LogsError) -> QueryError {
    if error.is_retryable() {
        QueryError::Unavailable(Box::new(error))
    } else {
        QueryError::Corrupt(Box::new(error))
    }
}

fn from_view(error: ViewError) -> QueryError {
    match error {
        ViewError::Unavailable(error) => QueryError::Unavailable(error),
        other => QueryError::Corrupt(Box::new(other)),
    }
}

fn from_log(error: LogError) -> QueryError {
    if error.is_retryable() {
        QueryError::Unavailable(Box::new(error))
    } else {
        QueryError::Corrupt(Box::new(error))
    }
}

#[async_trait]
impl QueryDeployments for DynamoQueries {
    async fn deployment(&self, id: DeploymentId) -> Result<Option<DeploymentView>, QueryError> {
        let view = self.views.view(id).await.map_err(from_view)?;
        // The projector folds a record in a moment after it is appended; what the log holds
        // beyond the view is folded in here, so a deployment just recorded, cancelled or
        // redriven answers as the log stands (the API answers its writes with the view).
        let next = view.as_ref().map_or(0, |v| v.revision + 1);
        let newer = self.log.read_stream(id, next).await.map_err(from_log)?;
        if newer.is_empty() {
            return Ok(view);
        }
        let projected = project(view, &newer).map_err(|e| QueryError::Corrupt(Box::new(e)))?;
        Ok(projected.view)
    }

    async fn list(&self, filter: &DeploymentFilter) -> Result<Vec<DeploymentView>, QueryError> {
        let mut views = self
            .views
            .deployments(filter.tenant.as_deref())
            .await
            .map_err(from_view)?;
        views.retain(|view| filter.admits(view));
        Ok(views)
    }

    async fn tenants(&self) -> Result<Vec<TenantView>, QueryError> {
        self.views.tenants().await.map_err(from_view)
    }

    async fn events(&self, id: DeploymentId) -> Result<Vec<Envelope>, QueryError> {
        self.log.read_stream(id, 0).await.map_err(from_log)
    }

    async fn attempt_log(
        &self,
        id: DeploymentId,
        step: &str,
        which: AttemptLog,
    ) -> Result<Option<Vec<u8>>, QueryError> {
        let outputs = self.outputs.as_ref().ok_or(QueryError::NotAvailable(
            "the attempts' output is in the payloads bucket: set OVERTURE_PAYLOADS_BUCKET \
             (`make local-aws` writes it to .overture/local-aws.env)",
        ))?;
        outputs.read(id, step, which).await.map_err(from_logs)
    }

    async fn service_instances(&self, tenant: &str) -> Result<Vec<RegisteredInstance>, QueryError> {
        Ok(self.views.service_instances(tenant).await?)
    }
}
