//! Folding the log into the read models: what a drive has fed and not yet folded, and the
//! shared feed position.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures_util::future::try_join_all;
use overture_events::{DeploymentId, Envelope, LogEntry};
use overture_infra::sqlite::Receipt;

use crate::error::EngineError;
use crate::{Engine, FEED_BATCH};

/// Log entries a drive has read, by deployment.
#[derive(Default)]
pub(crate) struct Fed {
    /// Each deployment's records, in log order.
    pub(crate) streams: BTreeMap<DeploymentId, Vec<Envelope>>,
    /// The position of the last entry read, if any was.
    pub(crate) through: Option<u64>,
}

impl Fed {
    /// Adds entries read after these.
    pub(crate) fn extend(&mut self, later: Fed) {
        for (id, mut records) in later.streams {
            self.streams.entry(id).or_default().append(&mut records);
        }
        self.through = later.through.or(self.through);
    }
}

/// What a drive has fed the orchestrator but not yet folded into the read models, and the
/// jobs it has finished but not yet deleted from the queue.
pub(crate) struct Unfolded {
    /// The feed position the entries follow.
    pub(crate) from: u64,
    /// The entries.
    pub(crate) fed: Fed,
    /// When the oldest of them was read.
    pub(crate) since: Option<std::time::Instant>,
    /// Receipts of the finished jobs, filled by the workers.
    pub(crate) finished: Arc<std::sync::Mutex<Vec<Receipt>>>,
}

impl Unfolded {
    pub(crate) fn new(from: u64) -> Self {
        Self {
            from,
            fed: Fed::default(),
            since: None,
            finished: Arc::default(),
        }
    }

    pub(crate) fn add(&mut self, fed: Fed) {
        if fed.through.is_some() {
            self.since.get_or_insert_with(std::time::Instant::now);
            self.fed.extend(fed);
        }
    }

    pub(crate) fn finished_jobs(&self) -> Vec<Receipt> {
        std::mem::take(
            &mut *self
                .finished
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.since.is_none()
            && self
                .finished
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .is_empty()
    }
}

/// Log entries by deployment, in log order within each; entries of other streams are left out.
pub(crate) fn by_deployment(entries: Vec<LogEntry>) -> BTreeMap<DeploymentId, Vec<Envelope>> {
    let mut streams: BTreeMap<DeploymentId, Vec<Envelope>> = BTreeMap::new();
    for entry in entries {
        if let Ok(id) = DeploymentId::from_stream(&entry.envelope.stream) {
            streams.entry(id).or_default().push(entry.envelope);
        }
    }
    streams
}

impl Engine {
    /// Folds new log entries into the read models, stream by stream, as DynamoDB Streams feed
    /// the projector on AWS: each touched deployment's new entries go to
    /// [`overture_projector::project_stream`], which applies only the revisions its view needs
    /// next. The feed position only says where to read from: processes that feed the same
    /// entries twice, or race, change nothing. Returns how many records the views gained.
    pub async fn project(&self) -> Result<u64, EngineError> {
        let mut position = self.read_models.feed_position().await?;
        let mut gained = 0;
        loop {
            let entries = self.log.read_all(position, FEED_BATCH).await?;
            let Some(last) = entries.last().map(|e| e.position) else {
                return Ok(gained);
            };
            gained += self.fold_fed(&by_deployment(entries), last).await?;
            position = last;
        }
    }

    /// [`Engine::project`], handed the entries a drive has just read after `from`, up to
    /// `through`: when the shared feed is at `from` they are folded as they are, without
    /// reading them again; otherwise the feed is read from where it is.
    async fn project_fed(&self, from: u64, fed: &Fed) -> Result<u64, EngineError> {
        let position = self.read_models.feed_position().await?;
        match (position == from, fed.through) {
            (true, None) => Ok(0),
            (true, Some(through)) => self.fold_fed(&fed.streams, through).await,
            (false, _) => self.project().await,
        }
    }

    /// Folds each deployment's records into its view, then moves the feed position to
    /// `through`, the last of them.
    async fn fold_fed(
        &self,
        streams: &BTreeMap<DeploymentId, Vec<Envelope>>,
        through: u64,
    ) -> Result<u64, EngineError> {
        // Side by side, so that their writes share the writer's commits.
        let projected = streams.iter().map(|(id, records)| {
            overture_projector::project_stream(*id, records, &self.deployments, &self.read_models)
        });
        let gained = try_join_all(projected)
            .await?
            .into_iter()
            .map(|applied| applied as u64)
            .sum();
        self.read_models.advance_feed_position(through).await?;
        Ok(gained)
    }

    /// Folds what a drive has fed, up to `position`, into the read models, and deletes the jobs
    /// its workers have finished: one round of writes, which share the writer's commits.
    pub(crate) async fn fold_unfolded(
        &self,
        unfolded: &mut Unfolded,
        position: u64,
    ) -> Result<(), EngineError> {
        let finished = unfolded.finished_jobs();
        let deleted = async {
            match finished.is_empty() {
                true => Ok(0),
                false => self.queue.ack_all(finished).await,
            }
        };
        let (projected, deleted) =
            tokio::join!(self.project_fed(unfolded.from, &unfolded.fed), deleted);
        // An undeleted job comes back after its lease, and its recorded outcome makes it a no-op.
        if let Err(error) = deleted {
            tracing::warn!(%error, "could not delete finished jobs");
        }
        projected?;
        unfolded.from = position;
        unfolded.fed = Fed::default();
        unfolded.since = None;
        Ok(())
    }
}
