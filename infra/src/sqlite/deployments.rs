//! The deployment-log port ([`DeploymentLog`]) and the projector's log reader on the SQLite log.
//!
//! [`SqliteDeployments`] keeps each deployment's last fold ([`Folds`]) and reads only the events
//! after it, so loading is proportional to what is new; and it lets the tasks of its process
//! take turns deciding on a deployment ([`Turns`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use overture_events::Envelope;
use overture_events::{DeploymentEvent, DeploymentId, LogEntry, Metadata};
use overture_kit::folds::Folds;
use overture_kit::{
    Cause, Clock, DeploymentLog, Loaded, LogError as PortLogError, ReadStream, Turn,
};
use overture_projector::{ReadLog, StoreError};
use uuid::Uuid;

use super::{EventLog, ExpectedRevision, LogError, NewEvent};

/// Deployments stored in the SQLite event log.
#[derive(Clone)]
pub struct SqliteDeployments {
    log: EventLog,
    clock: Arc<dyn Clock>,
    folds: Folds,
    turns: Turns,
}

/// One lock per deployment that tasks of this process are deciding on.
#[derive(Clone, Default)]
struct Turns {
    locks: Arc<Mutex<HashMap<DeploymentId, Arc<tokio::sync::Mutex<()>>>>>,
}

/// Locks kept while nobody holds them, at most, before the idle ones are dropped.
const IDLE_TURNS: usize = 1_024;
/// How long a task waits for a turn before it goes on without one.
const TURN_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

impl Turns {
    /// Waits for `deployment`'s turn; it is over when the returned guard is dropped.
    ///
    /// A turn is held for one load and one append, so a wait of [`TURN_WAIT`] means its holder
    /// is a future nobody polls (a task waiting on something else while it holds a turn): the
    /// caller then goes on without a turn, kept right by the revision check alone, rather than
    /// hang.
    async fn take(&self, deployment: DeploymentId) -> Option<Turn> {
        let lock = {
            let mut locks = self.locks.lock().unwrap_or_else(PoisonError::into_inner);
            if locks.len() > IDLE_TURNS {
                locks.retain(|_, lock| Arc::strong_count(lock) > 1);
            }
            Arc::clone(locks.entry(deployment).or_default())
        };
        match tokio::time::timeout(TURN_WAIT, lock.lock_owned()).await {
            Ok(turn) => Some(Box::new(turn)),
            Err(_) => {
                tracing::warn!(%deployment, "waited {TURN_WAIT:?} for a turn to decide on the deployment; going on without one");
                None
            }
        }
    }
}

impl SqliteDeployments {
    /// Deployments in `log`; `clock` stamps `recorded_at` on appended events.
    pub fn new(log: EventLog, clock: Arc<dyn Clock>) -> Self {
        Self {
            log,
            clock,
            folds: Folds::default(),
            turns: Turns::default(),
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

    async fn turn(&self, deployment: DeploymentId) -> Option<Turn> {
        self.turns.take(deployment).await
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
            previous: None,
            hash: None,
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
            Err(LogError::NameTaken {
                tenant,
                name,
                holder,
            }) => match DeploymentId::from_stream(&holder) {
                Ok(holder) => Err(PortLogError::NameTaken {
                    tenant,
                    name,
                    holder,
                }),
                Err(error) => Err(unavailable(error)),
            },
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
