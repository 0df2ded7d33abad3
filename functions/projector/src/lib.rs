//! The projector function: fold new events of the log into the read models.
//!
//! [`catch_up`] reads the global order of the log from the read models' checkpoint, in batches;
//! for each batch it loads the views the batch touches, folds the events in
//! ([`ReadModels::apply`], idempotent on stream and revision), and stores the views together
//! with the new checkpoint in one write. [`check`] folds the whole log afresh and compares.

use std::collections::BTreeSet;

use async_trait::async_trait;
use overture_domain::projection::{ProjectionError, ReadModels};
use overture_events::{DeploymentId, LogEntry};

/// Reads the log in its global order.
#[async_trait]
pub trait ReadLog: Send + Sync {
    /// Up to `limit` entries after `position`.
    async fn read_all(&self, after: u64, limit: usize) -> Result<Vec<LogEntry>, StoreError>;
}

/// Where the read models and their checkpoint are kept.
#[async_trait]
pub trait ReadModelStore: Send + Sync {
    /// The position of the last entry folded in.
    async fn checkpoint(&self) -> Result<u64, StoreError>;
    /// The stored views of these deployments and tenants (those that exist).
    async fn load(
        &self,
        deployments: &BTreeSet<DeploymentId>,
        tenants: &BTreeSet<String>,
    ) -> Result<ReadModels, StoreError>;
    /// Stores these views and the new checkpoint, all or nothing.
    async fn save(&self, models: &ReadModels, checkpoint: u64) -> Result<(), StoreError>;
    /// Every stored view.
    async fn load_all(&self) -> Result<ReadModels, StoreError>;
    /// Deletes every view and resets the checkpoint.
    async fn clear(&self) -> Result<(), StoreError>;
}

/// A store or the log failed. Every such failure may pass (the projector is idempotent, so
/// folding again later is always safe); the error says what failed.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct StoreError(#[source] pub Box<dyn std::error::Error + Send + Sync>);

impl StoreError {
    /// Wraps what the store or the log said.
    pub fn new(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self(Box::new(error))
    }
}

/// Why the projector stopped.
#[derive(Debug, thiserror::Error)]
pub enum ProjectorError {
    /// Reading or writing failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// An entry could not be folded.
    #[error("log position {position}: {source}")]
    Projection {
        position: u64,
        source: ProjectionError,
    },
}

/// How many entries one batch folds.
pub const BATCH: usize = 5_000;

/// Folds every entry after the checkpoint into the read models; returns how many were folded.
pub async fn catch_up(
    log: &dyn ReadLog,
    store: &dyn ReadModelStore,
    batch: usize,
) -> Result<u64, ProjectorError> {
    let mut checkpoint = store.checkpoint().await?;
    let mut folded = 0;
    loop {
        let entries = log.read_all(checkpoint, batch).await?;
        let Some(last) = entries.last().map(|e| e.position) else {
            return Ok(folded);
        };
        let deployments: BTreeSet<DeploymentId> = entries
            .iter()
            .filter_map(|e| DeploymentId::from_stream(&e.envelope.stream).ok())
            .collect();
        let tenants: BTreeSet<String> = entries
            .iter()
            .map(|e| e.envelope.metadata.tenant.clone())
            .collect();
        let mut models = store.load(&deployments, &tenants).await?;
        fold(&mut models, &entries)?;
        store.save(&models, last).await?;
        folded += entries.len() as u64;
        checkpoint = last;
    }
}

/// Deletes the read models and folds the whole log again.
pub async fn rebuild(
    log: &dyn ReadLog,
    store: &dyn ReadModelStore,
    batch: usize,
) -> Result<u64, ProjectorError> {
    store.clear().await?;
    catch_up(log, store, batch).await
}

/// Folds the whole log in memory and compares with the stored read models.
/// Returns the ids and tenants whose stored views differ.
pub async fn check(
    log: &dyn ReadLog,
    store: &dyn ReadModelStore,
    batch: usize,
) -> Result<Vec<String>, ProjectorError> {
    let mut fresh = ReadModels::default();
    let mut after = 0;
    loop {
        let entries = log.read_all(after, batch).await?;
        let Some(last) = entries.last().map(|e| e.position) else {
            break;
        };
        fold(&mut fresh, &entries)?;
        after = last;
    }
    let stored = store.load_all().await?;
    let mut differences = Vec::new();
    let ids: BTreeSet<&DeploymentId> = fresh
        .deployments
        .keys()
        .chain(stored.deployments.keys())
        .collect();
    for id in ids {
        if fresh.deployments.get(id) != stored.deployments.get(id) {
            differences.push(format!("deployment {id}"));
        }
    }
    let tenants: BTreeSet<&String> = fresh.tenants.keys().chain(stored.tenants.keys()).collect();
    for tenant in tenants {
        if fresh.tenants.get(tenant) != stored.tenants.get(tenant) {
            differences.push(format!("tenant {tenant}"));
        }
    }
    Ok(differences)
}

fn fold(models: &mut ReadModels, entries: &[LogEntry]) -> Result<(), ProjectorError> {
    for entry in entries {
        models
            .apply(&entry.envelope)
            .map_err(|source| ProjectorError::Projection {
                position: entry.position,
                source,
            })?;
    }
    Ok(())
}
