//! A deployment log held in memory: the in-process stand-in for the SQLite and DynamoDB logs in
//! handlers' own tests. It keeps the same contract ([`crate::contract`]), chains included, so a
//! handler tested on it behaves the same on the real stores. [`FixedClock`] is the time those tests give.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use overture_domain::Deployment;
use overture_events::chain::{self, GENESIS};
use overture_events::{DeploymentEvent, DeploymentId, Envelope, Metadata, Timestamp};
use uuid::Uuid;

use crate::{Cause, Clock, DeploymentLog, Loaded, LogError, ReadStream};

/// Streams of envelopes in memory; clones share them, as two clients of one store would.
#[derive(Clone, Debug, Default)]
pub struct MemoryLog {
    streams: Arc<Mutex<HashMap<DeploymentId, Vec<Envelope>>>>,
    recorded_at: Timestamp,
    appends: Arc<AtomicUsize>,
}

impl MemoryLog {
    /// An empty log stamping every event with `recorded_at`: it reads no clock, so tests
    /// control time entirely.
    pub fn new(recorded_at: Timestamp) -> Self {
        Self {
            streams: Arc::default(),
            recorded_at,
            appends: Arc::default(),
        }
    }

    /// How many appends stored events: each is one commit (one disk sync) on a real store.
    pub fn appends(&self) -> usize {
        self.appends.load(Ordering::SeqCst)
    }

    /// A deployment's events as recorded, without their envelopes.
    pub fn events(&self, deployment: DeploymentId) -> Vec<DeploymentEvent> {
        self.envelopes(deployment)
            .into_iter()
            .filter_map(|e| DeploymentEvent::from_parts(&e.event_type, e.data).ok())
            .collect()
    }

    fn envelopes(&self, deployment: DeploymentId) -> Vec<Envelope> {
        self.streams
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&deployment)
            .cloned()
            .unwrap_or_default()
    }
}

#[async_trait]
impl DeploymentLog for MemoryLog {
    async fn load(&self, deployment: DeploymentId) -> Result<Loaded, LogError> {
        let envelopes = self.envelopes(deployment);
        let revision = envelopes.last().map(|e| e.revision);
        let state = Deployment::replay(self.events(deployment));
        Ok(Loaded { state, revision })
    }

    async fn append(
        &self,
        deployment: DeploymentId,
        tenant: &str,
        expected: Option<u64>,
        events: Vec<DeploymentEvent>,
        cause: &Cause,
    ) -> Result<(), LogError> {
        let mut streams = self.streams.lock().unwrap_or_else(PoisonError::into_inner);
        let stream = streams.entry(deployment).or_default();
        if stream.last().map(|e| e.revision) != expected {
            return Err(LogError::Conflict {
                deployment,
                expected,
            });
        }
        let metadata = Metadata {
            tenant: tenant.to_owned(),
            actor: cause.actor.clone(),
            correlation_id: cause.correlation_id,
            causation_id: cause.causation_id,
            recorded_at: self.recorded_at,
            previous: None,
            hash: None,
        };
        let first = expected.map_or(0, |last| last + 1);
        if !events.is_empty() {
            self.appends.fetch_add(1, Ordering::SeqCst);
        }
        let mut head = stream
            .last()
            .and_then(|e| e.metadata.hash.clone())
            .unwrap_or_else(|| GENESIS.to_owned());
        for (revision, event) in (first..).zip(events) {
            let mut envelope = Envelope {
                stream: deployment.stream(),
                revision,
                id: Uuid::now_v7(),
                event_type: event.event_type().to_owned(),
                data: event.data(),
                metadata: metadata.clone(),
            };
            head = chain::seal(&mut envelope, &head);
            stream.push(envelope);
        }
        Ok(())
    }
}

#[async_trait]
impl ReadStream for MemoryLog {
    async fn read_stream(
        &self,
        deployment: DeploymentId,
        from: u64,
    ) -> Result<Vec<Envelope>, LogError> {
        Ok(self
            .envelopes(deployment)
            .into_iter()
            .filter(|e| e.revision >= from)
            .collect())
    }
}

/// A clock stopped at one instant, so a handler's test says what time it decides at.
#[derive(Clone, Copy, Debug)]
pub struct FixedClock(pub Timestamp);

impl Clock for FixedClock {
    fn now(&self) -> Timestamp {
        self.0
    }
}
