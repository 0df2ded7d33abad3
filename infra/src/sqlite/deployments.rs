//! The deployment-log port ([`DeploymentLog`]) and the projector's log reader on the SQLite log.
//!
//! [`SqliteDeployments`] keeps each deployment's last fold ([`Folds`]) and reads only the events
//! after it, so loading is proportional to what is new.

use std::sync::Arc;

use async_trait::async_trait;
use overture_events::Envelope;
use overture_events::{DeploymentEvent, DeploymentId, LogEntry, Metadata};
use overture_kit::folds::Folds;
use overture_kit::{Cause, Clock, DeploymentLog, Loaded, LogError as PortLogError, ReadStream};
use overture_projector::{ReadLog, StoreError};
use uuid::Uuid;

use super::{EventLog, ExpectedRevision, LogError, NewEvent};

/// Deployments stored in the SQLite event log.
#[derive(Clone)]
pub struct SqliteDeployments {
    log: EventLog,
    clock: Arc<dyn Clock>,
    folds: Folds,
}

impl SqliteDeployments {
    /// Deployments in `log`; `clock` stamps `recorded_at` on appended events.
    pub fn new(log: EventLog, clock: Arc<dyn Clock>) -> Self {
        Self {
            log,
            clock,
            folds: Folds::default(),
        }
    }

    /// The log underneath.
    pub fn log(&self) -> &EventLog {
        &self.log
    }
}

fn unavailable(error: impl std::error::Error + Send + Sync + 'static) -> PortLogError {
    PortLogError::Unavailable(Box::new(error))
}

#[async_trait]
impl DeploymentLog for SqliteDeployments {
    async fn load(&self, deployment: DeploymentId) -> Result<Loaded, PortLogError> {
        let last = self.folds.last(deployment);
        let from = last.revision.map_or(0, |r| r + 1);
        let newer = self
            .log
            .read_stream(&deployment.stream(), from)
            .await
            .map_err(unavailable)?;
        self.folds
            .fold(deployment, last, newer)
            .map_err(unavailable)
    }

    async fn append(
        &self,
        deployment: DeploymentId,
        tenant: &str,
        expected: Option<u64>,
        events: Vec<DeploymentEvent>,
        cause: &Cause,
    ) -> Result<(), PortLogError> {
        let metadata = Metadata {
            tenant: tenant.to_owned(),
            actor: cause.actor.clone(),
            correlation_id: cause.correlation_id,
            causation_id: cause.causation_id,
            recorded_at: self.clock.now(),
        };
        let new_events = events
            .iter()
            .map(|event| NewEvent {
                id: Uuid::now_v7(),
                event_type: event.event_type().to_owned(),
                data: event.data(),
                metadata: metadata.clone(),
            })
            .collect();
        let expected_revision =
            expected.map_or(ExpectedRevision::NoStream, ExpectedRevision::Exact);
        match self
            .log
            .append(&deployment.stream(), expected_revision, new_events)
            .await
        {
            Ok(_) => Ok(()),
            Err(LogError::WrongExpectedRevision { .. }) => Err(PortLogError::Conflict {
                deployment,
                expected,
            }),
            Err(error) => Err(unavailable(error)),
        }
    }
}

#[async_trait]
impl ReadStream for SqliteDeployments {
    async fn read_stream(
        &self,
        deployment: DeploymentId,
        from: u64,
    ) -> Result<Vec<Envelope>, PortLogError> {
        self.log
            .read_stream(&deployment.stream(), from)
            .await
            .map_err(unavailable)
    }
}

#[async_trait]
impl ReadLog for EventLog {
    async fn read_all(&self, after: u64, limit: usize) -> Result<Vec<LogEntry>, StoreError> {
        EventLog::read_all(self, after, limit)
            .await
            .map_err(StoreError::new)
    }
}
