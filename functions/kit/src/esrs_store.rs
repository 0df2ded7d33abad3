//! Any deployment log (SQLite, DynamoDB) as an `esrs` event store, so code written against
//! `esrs` (its `AggregateManager`, its handlers) runs on the same log as the engine.
//!
//! esrs numbers an aggregate's events from 1 and the log's revisions start at 0: sequence
//! number n is revision n - 1. esrs does not carry metadata, so the store is made for one cause
//! ([`EsrsDeploymentStore::new`]) and stamps it on what it persists. The engine itself loads
//! through the log's [`DeploymentLog`], whose adapters keep a fold cache.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use esrs::store::{EventStore, EventStoreLockGuard, StoreEvent, UnlockOnDrop};
use esrs::AggregateState;
use overture_domain::Deployment;
use overture_events::{DeploymentEvent, DeploymentId};
use uuid::Uuid;

use crate::{Cause, DeploymentLog, LogError as PortLogError, ReadStream};

/// Why the esrs store failed.
#[derive(Debug, thiserror::Error)]
pub enum EsrsStoreError {
    /// The log refused or failed the call (a conflict is `PortLogError::Conflict`).
    #[error(transparent)]
    Log(#[from] PortLogError),
    /// A stored event does not match the schema.
    #[error(transparent)]
    Schema(#[from] overture_events::deployment::SchemaError),
    /// The log is append-only: deployments are never deleted.
    #[error("the event log is append-only; deployment {0} cannot be deleted")]
    AppendOnly(Uuid),
}

/// The deployments of a log behind `esrs::store::EventStore`.
#[derive(Clone)]
pub struct EsrsDeploymentStore<L> {
    deployments: L,
    tenant: String,
    cause: Cause,
    locks: Arc<Mutex<HashMap<Uuid, Arc<tokio::sync::Mutex<()>>>>>,
}

impl<L> EsrsDeploymentStore<L> {
    /// A store that appends for `tenant`, stamping `cause` on every event.
    pub fn new(deployments: L, tenant: impl Into<String>, cause: Cause) -> Self {
        Self {
            deployments,
            tenant: tenant.into(),
            cause,
            locks: Arc::default(),
        }
    }
}

struct HeldLock(#[allow(dead_code)] tokio::sync::OwnedMutexGuard<()>);
impl UnlockOnDrop for HeldLock {}

#[async_trait]
impl<L: DeploymentLog + ReadStream + Clone + 'static> EventStore for EsrsDeploymentStore<L> {
    type Aggregate = Deployment;
    type Error = EsrsStoreError;

    /// Serialises commands on one deployment within this process; across processes the
    /// conditional append is what keeps the stream consistent.
    async fn lock(&self, aggregate_id: Uuid) -> Result<EventStoreLockGuard, Self::Error> {
        let lock = {
            let mut locks = self
                .locks
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            Arc::clone(locks.entry(aggregate_id).or_default())
        };
        Ok(EventStoreLockGuard::new(HeldLock(lock.lock_owned().await)))
    }

    async fn by_aggregate_id(
        &self,
        aggregate_id: Uuid,
    ) -> Result<Vec<StoreEvent<DeploymentEvent>>, Self::Error> {
        let envelopes = self
            .deployments
            .read_stream(DeploymentId::from_uuid(aggregate_id), 0)
            .await?;
        envelopes
            .into_iter()
            .map(|envelope| {
                Ok(StoreEvent {
                    id: envelope.id,
                    aggregate_id,
                    payload: DeploymentEvent::from_parts(&envelope.event_type, envelope.data)?,
                    occurred_on: envelope.metadata.recorded_at,
                    sequence_number: i32::try_from(envelope.revision + 1).unwrap_or(i32::MAX),
                    version: None,
                })
            })
            .collect()
    }

    async fn persist(
        &self,
        aggregate_state: &mut AggregateState<<Deployment as esrs::Aggregate>::State>,
        events: Vec<DeploymentEvent>,
    ) -> Result<Vec<StoreEvent<DeploymentEvent>>, Self::Error> {
        let aggregate_id = *aggregate_state.id();
        let expected = u64::try_from(*aggregate_state.sequence_number())
            .ok()
            .and_then(|n| n.checked_sub(1));
        let deployment = DeploymentId::from_uuid(aggregate_id);
        self.deployments
            .append(
                deployment,
                &self.tenant,
                expected,
                events.clone(),
                &self.cause,
            )
            .await?;
        let occurred_on = chrono::Utc::now();
        Ok(events
            .into_iter()
            .map(|payload| StoreEvent {
                id: Uuid::now_v7(),
                aggregate_id,
                payload,
                occurred_on,
                sequence_number: aggregate_state.next_sequence_number(),
                version: None,
            })
            .collect())
    }

    /// Nothing to do: functions read events from the log itself, in its global order.
    async fn publish(&self, _store_events: &[StoreEvent<DeploymentEvent>]) {}

    async fn delete(&self, aggregate_id: Uuid) -> Result<(), Self::Error> {
        Err(EsrsStoreError::AppendOnly(aggregate_id))
    }
}
