//! The projector function: fold new events of the log into the read models.
//!
//! [`project_stream`] is the projector proper, as DynamoDB Streams (or the embedded engine's
//! feed) drive it: one deployment's new records at a time, in revision order, possibly replayed,
//! possibly after a gap. It loads that deployment's view header and only the steps the records
//! name ([`steps_of`]), folds in only the revisions it needs next
//! ([`overture_domain::projection::project`]), reads any missing ones from the log
//! ([`ReadStream`]) so nothing is skipped, and saves the header and the steps the records
//! changed, conditional on the revision it was loaded at, with the tenant summary's change as
//! atomic deltas, in one write ([`DeploymentViews`]): a record costs the same however many steps
//! the deployment has. A projector that lost the race to another reloads and folds again.
//! The contract every [`DeploymentViews`] store keeps is in [`contract`] (feature `contract`).
//! On AWS, [`on_stream_records`] ([`stream`]) is the trigger: it groups a DynamoDB stream batch
//! by deployment, folds each with [`project_stream`], and reports the deployments to deliver
//! again (partial batch failures).
//!
//! [`rebuild`] and [`catch_up`] fold the log's global order at once, on a store that has one
//! (SQLite): `overture replay`. [`catch_up`] reads it from the read models' checkpoint, in
//! batches, each decoded only as far as the views need ([`ReadLog::read_changes`]); for each
//! batch it loads the headers and steps the batch touches, folds the events in
//! ([`ReadModels::apply_change`], the same pure fold), and stores the headers and changed steps
//! together with the new checkpoint in one write, while the next batch is read.
//! [`check`] folds the whole log afresh and compares.
//!
//! The tenants' service registry ([`overture_domain::registry`]) is folded in the same pass:
//! each save and each batch writes what the folded records set in it with the views, under the
//! same condition, so a record's registration is written once, and a rebuild rebuilds it.

use std::collections::{BTreeMap, BTreeSet};

use async_trait::async_trait;
use overture_domain::projection::{
    project, steps_of, Change, DeploymentView, Folding, ProjectionError, ReadModels, TenantDelta,
    TenantView, Touched,
};
use overture_domain::registry::Registry;
use overture_events::{DeploymentId, Envelope, LogEntry};
use overture_kit::{LogError, ReadStream};

#[cfg(feature = "contract")]
pub mod contract;
pub mod stream;

pub use stream::on_stream_records;

/// Where each deployment's view and each tenant's summary are kept, written one deployment at a
/// time: a header (everything but the steps) and each step apart, so that saving a record's
/// change writes what it changed and nothing else.
#[async_trait]
pub trait DeploymentViews: Send + Sync {
    /// The deployment's whole view, if one is stored.
    async fn view(&self, deployment: DeploymentId) -> Result<Option<DeploymentView>, ViewError>;
    /// The deployment's view with only the named steps (those of them it has), if one is
    /// stored: what folding records that name those steps needs.
    async fn view_of_steps(
        &self,
        deployment: DeploymentId,
        steps: &BTreeSet<String>,
    ) -> Result<Option<DeploymentView>, ViewError>;
    /// Stores `view`'s header and its steps named in `steps` (every step of a new view), if the
    /// stored view is still at `loaded_at` (`None`: no view stored), adds `delta` to its
    /// tenant's summary, and writes what `registry` sets in the tenant's service registry
    /// (puts its instances and interests, deletes its removed instances), all or nothing.
    /// Steps not named stay as they are stored, whether or not `view` holds them.
    async fn save(
        &self,
        view: &DeploymentView,
        loaded_at: Option<u64>,
        delta: &TenantDelta,
        steps: &BTreeSet<String>,
        registry: &Registry,
    ) -> Result<(), ViewError>;
    /// The tenant's summary, if it has one.
    async fn tenant(&self, tenant: &str) -> Result<Option<TenantView>, ViewError>;
}

/// Why a view could not be loaded or saved.
#[derive(Debug, thiserror::Error)]
pub enum ViewError {
    /// Another projector saved the view first; load it again and fold again.
    #[error("deployment {deployment}'s view is no longer at revision {loaded_at:?}: another projector saved it")]
    Conflict {
        /// The deployment.
        deployment: DeploymentId,
        /// The revision the view was loaded at.
        loaded_at: Option<u64>,
    },
    /// The view is larger than the store keeps in one item; trying again will not help.
    #[error(
        "deployment {deployment}'s view takes {bytes} bytes, more than the store keeps ({limit})"
    )]
    TooLarge {
        /// The deployment.
        deployment: DeploymentId,
        /// The view's size, encoded.
        bytes: usize,
        /// The store's limit.
        limit: usize,
    },
    /// A stored view is not one this build can read; trying again will not help.
    #[error("a stored read model is not readable: {0}")]
    Corrupt(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The store could not be reached or failed; trying again later may help.
    #[error("the read-model store failed: {0}")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl ViewError {
    /// Whether trying the same call again later may succeed.
    pub const fn is_retryable(&self) -> bool {
        !matches!(self, ViewError::Corrupt(_) | ViewError::TooLarge { .. })
    }
}

/// Why one stream's records could not be projected.
#[derive(Debug, thiserror::Error)]
pub enum StreamProjectionError {
    /// Loading or saving the view failed.
    #[error(transparent)]
    Views(#[from] ViewError),
    /// Reading missing records from the log failed.
    #[error(transparent)]
    Log(#[from] LogError),
    /// A record could not be folded; trying again will not help.
    #[error("deployment {deployment}: {source}")]
    Projection {
        /// The deployment.
        deployment: DeploymentId,
        /// What was wrong with the record.
        source: ProjectionError,
    },
    /// A record before the delivered ones is not in the log yet: nothing was saved, and
    /// delivering the records again once it is there folds them all.
    #[error("deployment {deployment}: revision {missing} is not in the log yet")]
    Gap {
        /// The deployment.
        deployment: DeploymentId,
        /// The revision the view needs next.
        missing: u64,
    },
    /// The view was saved, but the deployments that need a service it changed could not be
    /// woken: delivering the records again wakes them (the fold itself changes nothing).
    #[error(transparent)]
    Wake(crate::stream::WakeError),
    /// Other projectors kept saving first, round after round.
    #[error(
        "deployment {deployment}: other projectors saved its view first {rounds} times in a row"
    )]
    Contended {
        /// The deployment.
        deployment: DeploymentId,
        /// How many times it reloaded.
        rounds: u32,
    },
}

impl StreamProjectionError {
    /// Whether delivering the records again later may succeed (Lambda's "Retryable").
    pub fn is_retryable(&self) -> bool {
        match self {
            StreamProjectionError::Views(error) => error.is_retryable(),
            StreamProjectionError::Log(error) => error.is_retryable(),
            StreamProjectionError::Projection { .. } => false,
            StreamProjectionError::Wake(error) => error.is_retryable(),
            StreamProjectionError::Gap { .. } | StreamProjectionError::Contended { .. } => true,
        }
    }

    /// The stable error type Lambda reports: "Retryable" or "NonRetryable".
    pub fn error_type(&self) -> &'static str {
        overture_kit::batch::error_type(self.is_retryable())
    }
}

/// How many times [`project_stream`] reloads after losing a race before it gives up.
pub const MAX_ROUNDS: u32 = 20;

/// Folds one deployment's new `records` (in revision order; replays and gaps allowed) into its
/// view and its tenant's summary. Returns how many records the stored view gained. Records after
/// one the log does not hold yet change nothing ([`StreamProjectionError::Gap`], retryable).
#[tracing::instrument(name = "project", level = "info", skip_all, fields(%deployment, records = records.len(), from = records.first().map(|r| r.revision), to = records.last().map(|r| r.revision)))]
pub async fn project_stream(
    deployment: DeploymentId,
    records: &[Envelope],
    log: &dyn ReadStream,
    views: &dyn DeploymentViews,
) -> Result<usize, StreamProjectionError> {
    let invalid = |source| StreamProjectionError::Projection { deployment, source };
    let mut steps = steps_of(records);
    for _ in 0..MAX_ROUNDS {
        let view = views.view_of_steps(deployment, &steps).await?;
        let loaded_at = view.as_ref().map(|v| v.revision);
        let mut projected = project(view, records).map_err(invalid)?;
        if projected.gap {
            // The records between the view and what was delivered are in the log (a stream
            // delivers only what the log holds): fold them from there rather than skip them.
            let missing = log.read_stream(deployment, projected.next).await?;
            let named = steps_of(&missing);
            if !named.is_subset(&steps) {
                // They change steps that were not loaded: load those too, and fold again.
                steps.extend(named);
                continue;
            }
            let mut more = project(projected.view, &missing).map_err(invalid)?;
            more.applied += projected.applied;
            more.delta = sum(&projected.delta, &more.delta);
            more.steps.extend(projected.steps);
            // The missing records come after those folded first: their registry writes win.
            projected.registry.merge(std::mem::take(&mut more.registry));
            more.registry = projected.registry;
            projected = more;
            let delivered_up_to = records.iter().map(|r| r.revision + 1).max().unwrap_or(0);
            if projected.next < delivered_up_to {
                // Saving what could be folded would be correct too, but the records after the
                // gap were delivered now and may never be again: have them delivered again.
                return Err(StreamProjectionError::Gap {
                    deployment,
                    missing: projected.next,
                });
            }
        }
        let Some(view) = projected.view.filter(|_| projected.applied > 0) else {
            return Ok(0);
        };
        match views
            .save(
                &view,
                loaded_at,
                &projected.delta,
                &projected.steps,
                &projected.registry,
            )
            .await
        {
            Ok(()) => return Ok(projected.applied),
            Err(ViewError::Conflict { .. }) => continue,
            Err(error) => return Err(error.into()),
        }
    }
    Err(StreamProjectionError::Contended {
        deployment,
        rounds: MAX_ROUNDS,
    })
}

fn sum(a: &TenantDelta, b: &TenantDelta) -> TenantDelta {
    TenantDelta {
        running: a.running + b.running,
        succeeded: a.succeeded + b.succeeded,
        failed: a.failed + b.failed,
        cancelled: a.cancelled + b.cancelled,
        total: a.total + b.total,
        requested_at: a.requested_at.max(b.requested_at),
    }
}

/// One entry of the log decoded only as far as the read models need.
#[derive(Clone, Debug, PartialEq)]
pub struct ChangeEntry {
    /// Its position in the log.
    pub position: u64,
    /// What it changes.
    pub folding: Folding,
}

impl ChangeEntry {
    /// Decodes an entry read whole.
    pub fn from_entry(entry: &LogEntry) -> Result<Self, ProjectorError> {
        let envelope = &entry.envelope;
        let invalid = |source| ProjectorError::Projection {
            position: entry.position,
            source,
        };
        let deployment = DeploymentId::from_stream(&envelope.stream)
            .map_err(|e| invalid(ProjectionError::from(e)))?;
        let event = overture_events::DeploymentEvent::from_parts(
            &envelope.event_type,
            envelope.data.clone(),
        )
        .map_err(|e| invalid(ProjectionError::from(e)))?;
        Ok(Self {
            position: entry.position,
            folding: Folding {
                deployment,
                revision: envelope.revision,
                at: envelope.metadata.recorded_at,
                change: Change::from(event),
            },
        })
    }
}

/// Reads the log in its global order.
#[async_trait]
pub trait ReadLog: Send + Sync {
    /// Up to `limit` entries after `position`.
    async fn read_all(&self, after: u64, limit: usize) -> Result<Vec<LogEntry>, StoreError>;

    /// Up to `limit` entries after `position`, decoded only as far as the read models need. A
    /// log that can read less than whole entries answers faster than this, which reads them
    /// whole.
    async fn read_changes(
        &self,
        after: u64,
        limit: usize,
    ) -> Result<Vec<ChangeEntry>, ProjectorError> {
        let entries = self.read_all(after, limit).await?;
        entries.iter().map(ChangeEntry::from_entry).collect()
    }
}

/// Where the read models and their checkpoint are kept.
#[async_trait]
pub trait ReadModelStore: Send + Sync {
    /// The position of the last entry folded in.
    async fn checkpoint(&self) -> Result<u64, StoreError>;
    /// The stored views of these deployments, each with only the steps named for it (a header
    /// and those steps), and the summaries of these tenants and of those deployments' tenants
    /// (those that exist).
    async fn load(
        &self,
        deployments: &BTreeMap<DeploymentId, BTreeSet<String>>,
        tenants: &BTreeSet<String>,
    ) -> Result<ReadModels, StoreError>;
    /// Stores the headers of these views, their steps named in `touched`, their tenants'
    /// summaries, what `models.registry` sets in the service registry (its instances and
    /// interests put, its removed instances deleted) and the new checkpoint, all or nothing.
    /// Steps not named stay as they are. (`load` leaves the registry empty: its writes are
    /// keyed in full, so a batch needs nothing of it loaded.)
    async fn save(
        &self,
        models: &ReadModels,
        touched: &Touched,
        checkpoint: u64,
    ) -> Result<(), StoreError>;
    /// Every stored view, whole, and the whole service registry.
    async fn load_all(&self) -> Result<ReadModels, StoreError>;
    /// Deletes every view and the service registry, and resets the checkpoint.
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

/// How many entries one batch folds: enough that each batch's commit and round of loading the
/// views it touches serve many entries, few enough that a batch's entries, views and rows stay
/// small in memory (and in SQLite's page cache). On the replay bench, batches of 10,000 took
/// about a quarter less CPU than batches of 50,000, and smaller ones no less.
pub const BATCH: usize = 10_000;

/// Folds every entry after the checkpoint into the read models; returns how many were folded.
pub async fn catch_up(
    log: &dyn ReadLog,
    store: &dyn ReadModelStore,
    batch: usize,
) -> Result<u64, ProjectorError> {
    let checkpoint = store.checkpoint().await?;
    let mut folded = 0;
    let mut entries = log.read_changes(checkpoint, batch).await?;
    loop {
        let Some(last) = entries.last().map(|e| e.position) else {
            return Ok(folded);
        };
        let count = entries.len() as u64;
        // The next batch is read while this one is folded and stored: on SQLite they are two
        // connections, so reading and writing take a core each.
        let (next, stored) = futures_util::future::join(
            log.read_changes(last, batch),
            fold_and_store(store, entries, last),
        )
        .await;
        stored?;
        folded += count;
        entries = next?;
    }
}

/// Loads what `entries` change, folds them in, and stores the result with the checkpoint.
async fn fold_and_store(
    store: &dyn ReadModelStore,
    entries: Vec<ChangeEntry>,
    checkpoint: u64,
) -> Result<(), ProjectorError> {
    // Headers first, with no steps: only the deployments the store already holds need the
    // steps the batch names loaded, and in a rebuild that is none but those cut by a batch's end.
    let mut headers: BTreeMap<DeploymentId, BTreeSet<String>> = BTreeMap::new();
    let mut tenants = BTreeSet::new();
    for entry in &entries {
        headers.entry(entry.folding.deployment).or_default();
        if let Change::Requested { tenant, .. } = &entry.folding.change {
            tenants.insert(tenant.clone());
        }
    }
    let mut models = store.load(&headers, &tenants).await?;
    let mut wanted: BTreeMap<DeploymentId, BTreeSet<String>> = BTreeMap::new();
    for entry in &entries {
        let steps = entry.folding.change.steps();
        if !steps.is_empty() && models.deployments.contains_key(&entry.folding.deployment) {
            let named = wanted.entry(entry.folding.deployment).or_default();
            named.extend(steps.iter().cloned());
        }
    }
    if !wanted.is_empty() {
        let mut stored = store.load(&wanted, &BTreeSet::new()).await?;
        for id in wanted.keys() {
            match stored.deployments.remove(id) {
                Some(view) => models.deployments.insert(*id, view),
                None => models.deployments.remove(id),
            };
        }
    }
    let mut touched = Touched::new();
    for entry in entries {
        models.apply_change(entry.folding, &mut touched);
    }
    store.save(&models, &touched, checkpoint).await?;
    Ok(())
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
        for entry in &entries {
            fresh
                .apply(&entry.envelope)
                .map_err(|source| ProjectorError::Projection {
                    position: entry.position,
                    source,
                })?;
        }
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
    let registries = fresh.registry.tenants();
    for tenant in registries.union(&stored.registry.tenants()) {
        let interests = |registry: &Registry| {
            registry
                .interests
                .iter()
                .filter(|(key, _)| key.tenant == *tenant)
                .map(|(key, watched)| (key.clone(), *watched))
                .collect::<Vec<_>>()
        };
        if fresh.registry.service_instances(tenant) != stored.registry.service_instances(tenant)
            || interests(&fresh.registry) != interests(&stored.registry)
        {
            differences.push(format!("service registry of tenant {tenant}"));
        }
    }
    Ok(differences)
}
