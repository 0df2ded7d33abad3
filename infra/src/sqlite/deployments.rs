//! The deployment-log port ([`DeploymentLog`]) and the projector's log reader on the SQLite log.
//!
//! Folding a deployment's whole stream for every command would cost O(events) per command and
//! O(events²) per deployment. [`SqliteDeployments`] keeps each deployment's last folded state and
//! reads only the events after it, so loading is proportional to what is new. The log stays the
//! only source of truth: the cache is refreshed from it on every load, so other processes'
//! appends are seen.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use overture_domain::Deployment;
use overture_events::Envelope;
use overture_events::{DeploymentEvent, DeploymentId, LogEntry, Metadata};
use overture_kit::{Cause, Clock, DeploymentLog, Loaded, LogError as PortLogError, ReadStream};
use overture_projector::{ReadLog, StoreError};
use uuid::Uuid;

use super::{EventLog, ExpectedRevision, LogError, NewEvent};

/// Deployments stored in the SQLite event log.
#[derive(Clone)]
pub struct SqliteDeployments {
    log: EventLog,
    clock: Arc<dyn Clock>,
    folded: Arc<Mutex<HashMap<DeploymentId, Loaded>>>,
}

impl SqliteDeployments {
    /// Deployments in `log`; `clock` stamps `recorded_at` on appended events.
    pub fn new(log: EventLog, clock: Arc<dyn Clock>) -> Self {
        Self {
            log,
            clock,
            folded: Arc::default(),
        }
    }

    /// The log underneath.
    pub fn log(&self) -> &EventLog {
        &self.log
    }

    fn cached(&self, deployment: DeploymentId) -> Loaded {
        self.folded
            .lock()
            .map(|cache| cache.get(&deployment).cloned())
            .ok()
            .flatten()
            .unwrap_or_default()
    }
}

fn unavailable(error: impl std::error::Error + Send + Sync + 'static) -> PortLogError {
    PortLogError::Unavailable(Box::new(error))
}

#[async_trait]
impl DeploymentLog for SqliteDeployments {
    async fn load(&self, deployment: DeploymentId) -> Result<Loaded, PortLogError> {
        let mut loaded = self.cached(deployment);
        let from = loaded.revision.map_or(0, |r| r + 1);
        let envelopes = self
            .log
            .read_stream(&deployment.stream(), from)
            .await
            .map_err(unavailable)?;
        if envelopes.is_empty() {
            return Ok(loaded);
        }
        for envelope in envelopes {
            let event = DeploymentEvent::from_parts(&envelope.event_type, envelope.data)
                .map_err(unavailable)?;
            loaded.state = Deployment::apply(loaded.state, event);
            loaded.revision = Some(envelope.revision);
        }
        if let Ok(mut cache) = self.folded.lock() {
            // Keep the newest fold if another task got further meanwhile.
            let newer = cache
                .get(&deployment)
                .is_some_and(|c| c.revision >= loaded.revision);
            if !newer {
                cache.insert(deployment, loaded.clone());
            }
        }
        Ok(loaded)
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
