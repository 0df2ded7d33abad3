//! The embedded engine: every function wired in one process, on one data directory.
//!
//! The log feeds the functions in-process: after anything is appended, [`Engine::drive`] reads
//! the new entries, has the orchestrator move each touched deployment on and the projector fold
//! each touched deployment's entries into its view ([`Engine::project`]), then hands due jobs
//! from the durable queue to the runner (at most `parallelism` at a time). Waits are never
//! sleeps that hold state: a retry's wait is a job's due time and a grace period's deadline is a
//! timer job, both in the SQLite file, so a restarted process picks them up.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::future::try_join_all;
use overture_domain::deployment::Interruption;
use overture_domain::projection::DeploymentView;
use overture_domain::services::RegisteredInstance;
use overture_domain::{DeploymentCommand, DeploymentError, DeploymentState};
use overture_events::{CloudAccount, DeploymentId, Envelope, LogEntry, Timestamp};
use overture_infra::keystore::LocalKeyStore;
use overture_infra::logs::LogFiles;
use overture_infra::payloads::DirPayloads;
use overture_infra::session::SessionTokens;
use overture_infra::sqlite::{
    Database, EventLog, HandedJob, Handoff, Job, JobQueue, Receipt, ReceivedJob, SqliteDeployments,
    SqliteReadModels,
};
use overture_kit::SystemClock;
use overture_kit::{execute, Cause, Clock, DeploymentLog};
use overture_openstack::CloudAccess;
use overture_orchestrator::{
    orchestrate, OrchestratorPorts, RegistryDirectory, ServiceDirectory, Since, WorkError,
};
use overture_runner::destroy::{DestroyOutcome, DestroyPorts, DestroyRefused, DestroyRequest};
use overture_runner::{
    run_attempt, AttemptReport, KeepAlive, LoopbackEgress, PortError, RunnerPorts,
};
use overture_sandbox::Bubblewrap;
use overture_submit::{submit, Submission, SubmitError, SubmitPorts};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use uuid::Uuid;

/// How long a received job stays invisible to other engines without a heartbeat.
const LEASE: Duration = Duration::from_secs(30);
/// How often the engine looks at the log even when nothing woke it (other processes append too).
const POLL: Duration = Duration::from_millis(500);
/// How many log entries one feed read takes.
const FEED_BATCH: usize = 2_000;
/// How long a busy drive may keep what it has fed from the read models (and finished jobs in
/// the queue): folding them in is one write for many steps instead of several per step.
const PROJECT_LAG: Duration = Duration::from_millis(25);
/// How long a drive waits for news before it folds what it has fed into the read models.
const PROJECT_IDLE: Duration = Duration::from_millis(2);

/// The engine failed (as opposed to a deployment failing).
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// Opening the data directory failed.
    #[error("cannot use data directory {dir}: {reason}")]
    DataDir { dir: String, reason: String },
    /// A function or store failed.
    #[error("{0}")]
    Function(String),
    /// A deployment's view did not reach the end of its stream after folding the stream in.
    #[error("the view of deployment {deployment} stays behind revision {revision} of its stream")]
    ViewBehind {
        deployment: DeploymentId,
        revision: u64,
    },
}

fn function_error(error: impl std::fmt::Display) -> EngineError {
    EngineError::Function(error.to_string())
}

/// Sees a driven deployment's progress.
pub trait Watch {
    /// A new log entry of the driven deployments, in log order.
    fn entry(&mut self, entry: &LogEntry);
    /// Called at least every half second with the target deployment's state.
    fn tick(&mut self, state: &DeploymentState);
}

/// Watches nothing.
pub struct Unwatched;

impl Watch for Unwatched {
    fn entry(&mut self, _: &LogEntry) {}
    fn tick(&mut self, _: &DeploymentState) {}
}

/// The deployments a drive runs until they have ended.
#[derive(Clone, Copy)]
pub enum Scope<'a> {
    /// One deployment.
    One(DeploymentId),
    /// Every deployment unfinished when the drive starts.
    Every,
    /// The deployments that join while it runs, until no more can.
    Joined(&'a Joining),
}

/// Deployments joining a running drive ([`Scope::Joined`]): each is driven from when it joins
/// until it ends, and is then handed back through the channel [`Joining::new`] returns.
pub struct Joining {
    joined: std::sync::Mutex<(Vec<DeploymentId>, bool)>,
    ended: tokio::sync::mpsc::UnboundedSender<DeploymentId>,
    appended: Arc<tokio::sync::Notify>,
}

impl Joining {
    /// A set for a drive on `engine`, open to new deployments, and where its ended ones come out.
    pub fn new(engine: &Engine) -> (Self, tokio::sync::mpsc::UnboundedReceiver<DeploymentId>) {
        let (ended, receiver) = tokio::sync::mpsc::unbounded_channel();
        let joining = Self {
            joined: std::sync::Mutex::new((Vec::new(), true)),
            ended,
            appended: engine.log.appended(),
        };
        (joining, receiver)
    }

    /// Adds a recorded deployment to the drive.
    pub fn join(&self, id: DeploymentId) {
        self.lock().0.push(id);
        // The drive may be waiting for news: this is some.
        self.appended.notify_waiters();
    }

    /// No deployment will join any more: the drive ends once those it has end.
    pub fn close(&self) {
        self.lock().1 = false;
        self.appended.notify_waiters();
    }

    /// The deployments that joined since the last call, and whether more may.
    fn take(&self) -> (Vec<DeploymentId>, bool) {
        let mut joined = self.lock();
        (std::mem::take(&mut joined.0), joined.1)
    }

    fn ended(&self, id: DeploymentId) {
        // The receiver may have stopped listening; the deployment has ended all the same.
        let _ = self.ended.send(id);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (Vec<DeploymentId>, bool)> {
        self.joined
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Log entries a drive has read, by deployment.
#[derive(Default)]
struct Fed {
    /// Each deployment's records, in log order.
    streams: BTreeMap<DeploymentId, Vec<Envelope>>,
    /// The position of the last entry read, if any was.
    through: Option<u64>,
}

impl Fed {
    /// Adds entries read after these.
    fn extend(&mut self, later: Fed) {
        for (id, mut records) in later.streams {
            self.streams.entry(id).or_default().append(&mut records);
        }
        self.through = later.through.or(self.through);
    }
}

/// What a drive has fed the orchestrator but not yet folded into the read models, and the
/// jobs it has finished but not yet deleted from the queue.
struct Unfolded {
    /// The feed position the entries follow.
    from: u64,
    /// The entries.
    fed: Fed,
    /// When the oldest of them was read.
    since: Option<std::time::Instant>,
    /// Receipts of the finished jobs, filled by the workers.
    finished: Arc<std::sync::Mutex<Vec<Receipt>>>,
}

impl Unfolded {
    fn new(from: u64) -> Self {
        Self {
            from,
            fed: Fed::default(),
            since: None,
            finished: Arc::default(),
        }
    }

    fn add(&mut self, fed: Fed) {
        if fed.through.is_some() {
            self.since.get_or_insert_with(std::time::Instant::now);
            self.fed.extend(fed);
        }
    }

    fn finished_jobs(&self) -> Vec<Receipt> {
        std::mem::take(
            &mut *self
                .finished
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    fn is_empty(&self) -> bool {
        self.since.is_none()
            && self
                .finished
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .is_empty()
    }
}

/// The users' tokens a drive was given, with the cloud account each is for.
#[derive(Default)]
struct Lendable(Vec<(CloudAccount, overture_domain::secret::SecretString)>);

impl Lendable {
    /// Notes the tokens the process holds for these deployments.
    fn note(&mut self, custody: &SessionTokens, states: &[(DeploymentId, DeploymentState)]) {
        for (id, state) in states {
            if let (Some(account), Some(token)) = (&state.cloud, custody.token(*id)) {
                self.0.push((account.clone(), token));
            }
        }
    }

    /// The tokens given for the same user of the same project of the same cloud.
    fn tokens_of<'a>(
        &'a self,
        account: &'a CloudAccount,
    ) -> impl Iterator<Item = &'a overture_domain::secret::SecretString> {
        self.0
            .iter()
            .filter(move |(given, _)| {
                given.auth_url == account.auth_url
                    && given.project_id == account.project_id
                    && given.user == account.user
            })
            .map(|(_, token)| token)
    }
}

/// Log entries by deployment, in log order within each; entries of other streams are left out.
fn by_deployment(entries: Vec<LogEntry>) -> BTreeMap<DeploymentId, Vec<Envelope>> {
    let mut streams: BTreeMap<DeploymentId, Vec<Envelope>> = BTreeMap::new();
    for entry in entries {
        if let Ok(id) = DeploymentId::from_stream(&entry.envelope.stream) {
            streams.entry(id).or_default().push(entry.envelope);
        }
    }
    streams
}

/// Every adapter of the embedded mode, opened on one data directory.
pub struct Engine {
    /// The data directory.
    pub data_dir: PathBuf,
    /// The append-only log.
    pub log: EventLog,
    /// Deployments on the log (the functions' port).
    pub deployments: SqliteDeployments,
    /// Step jobs and timers.
    pub queue: JobQueue,
    /// The read models.
    pub read_models: SqliteReadModels,
    keys: LocalKeyStore,
    /// The users' cloud tokens this process was given, by deployment.
    pub custody: Arc<SessionTokens>,
    access: CloudAccess,
    /// Every attempt's output.
    pub logs: LogFiles,
    /// The blueprints' files, by content hash (`payloads/` in the data directory).
    pub payloads: DirPayloads,
    sandbox: Bubblewrap,
    clock: Arc<SystemClock>,
    /// How much of the host's loopback its steps may reach.
    loopback: LoopbackEgress,
}

impl Engine {
    /// The query port on this data directory, as fresh as the last fold ([`Engine::project`]).
    pub fn queries(&self) -> overture_infra::query::EmbeddedQueries {
        overture_infra::query::EmbeddedQueries::new(
            self.read_models.clone(),
            self.log.clone(),
            self.logs.clone(),
        )
    }

    /// Opens (creating if needed) the data directory and its database, for the operator's own
    /// commands: their steps reach the host's loopback where their blueprints say
    /// ([`LoopbackEgress::Operator`]).
    pub async fn open(data_dir: &Path) -> Result<Arc<Self>, EngineError> {
        Self::open_with_loopback(data_dir, LoopbackEgress::Operator).await
    }

    /// Opens the data directory as [`Engine::open`] does, its steps reaching as much of the
    /// host's loopback as `loopback` allows (`overture serve` runs tenants' steps).
    pub async fn open_with_loopback(
        data_dir: &Path,
        loopback: LoopbackEgress,
    ) -> Result<Arc<Self>, EngineError> {
        let dir_error = |reason: String| EngineError::DataDir {
            dir: data_dir.display().to_string(),
            reason,
        };
        // Every tenant's data is in it: the engine's user's alone, an older directory's too.
        overture_infra::data_dir::make_private(data_dir).map_err(|e| dir_error(e.to_string()))?;
        let db = Database::open(data_dir.join("overture.db"))
            .await
            .map_err(|e| dir_error(e.to_string()))?;
        let log = EventLog::new(db.clone());
        let clock = Arc::new(SystemClock);
        let custody = Arc::new(SessionTokens::new());
        Ok(Arc::new(Self {
            data_dir: data_dir.to_path_buf(),
            deployments: SqliteDeployments::new(log.clone(), clock.clone()),
            log,
            queue: JobQueue::new(db.clone()),
            access: CloudAccess::new(
                custody.clone(),
                Arc::new(overture_infra::sqlite::SqliteLeases::new(db.clone())),
            ),
            read_models: SqliteReadModels::new(db),
            keys: LocalKeyStore::new(data_dir, custody.clone()),
            custody,
            logs: LogFiles::new(data_dir.join("logs")),
            payloads: DirPayloads::new(data_dir.join("payloads")),
            sandbox: Bubblewrap::new(data_dir.join("sandboxes"))
                .with_engine_program(std::env::current_exe().map_err(function_error)?),
            clock,
            loopback,
        }))
    }

    /// Validates, seals and records a deployment.
    pub async fn submit(&self, submission: Submission) -> Result<DeploymentId, SubmitError> {
        submit(
            submission,
            &SubmitPorts {
                log: &self.deployments,
                seals: &self.keys,
                payloads: &self.payloads,
                clock: self.clock.as_ref(),
            },
        )
        .await
    }

    /// Checks, seals and records the redrive of a failed deployment.
    pub async fn redrive(
        &self,
        request: overture_submit::again::Redrive,
    ) -> Result<(), SubmitError> {
        overture_submit::again::redrive(request, &self.submit_ports()).await
    }

    /// Seals and records a new deployment of a recorded request.
    pub async fn redeploy(
        &self,
        request: overture_submit::again::Redeploy,
    ) -> Result<DeploymentId, SubmitError> {
        overture_submit::again::redeploy(request, &self.submit_ports()).await
    }

    /// Where this engine seals and records what users submit.
    pub fn submit_ports(&self) -> SubmitPorts<'_> {
        SubmitPorts {
            log: &self.deployments,
            seals: &self.keys,
            payloads: &self.payloads,
            clock: self.clock.as_ref(),
        }
    }

    /// Folds new log entries into the read models, stream by stream, as DynamoDB Streams feed
    /// the projector on AWS: each touched deployment's new entries go to
    /// [`overture_projector::project_stream`], which applies only the revisions its view needs
    /// next. The feed position only says where to read from: processes that feed the same
    /// entries twice, or race, change nothing. Returns how many records the views gained.
    pub async fn project(&self) -> Result<u64, EngineError> {
        let mut position = self
            .read_models
            .feed_position()
            .await
            .map_err(function_error)?;
        let mut gained = 0;
        loop {
            let entries = self
                .log
                .read_all(position, FEED_BATCH)
                .await
                .map_err(function_error)?;
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
        let position = self
            .read_models
            .feed_position()
            .await
            .map_err(function_error)?;
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
            .await
            .map_err(function_error)?
            .into_iter()
            .map(|applied| applied as u64)
            .sum();
        self.read_models
            .advance_feed_position(through)
            .await
            .map_err(function_error)?;
        Ok(gained)
    }

    /// A deployment's state as its stream holds it now, and its view with every record up to
    /// that state folded in: what a process that drove the deployment to its end prints.
    ///
    /// The stored view is no promise of that: the shared feed ([`Engine::project`]) says only
    /// how far any process has handed the log to the projector, and a rebuild rewrites views.
    /// So the deployment's own records after the stored view are read from its stream, folded
    /// into the view printed, and handed to the projector so the stored view gets there too.
    pub async fn settled(
        &self,
        deployment: DeploymentId,
    ) -> Result<(DeploymentState, DeploymentView), EngineError> {
        let loaded = self
            .deployments
            .load(deployment)
            .await
            .map_err(function_error)?;
        let revision = loaded.revision.ok_or_else(|| {
            function_error(format!("deployment {deployment} has no recorded events"))
        })?;
        let stored = self
            .read_models
            .deployment(deployment)
            .await
            .map_err(function_error)?;
        if let Some(view) = stored.as_ref().filter(|view| view.revision >= revision) {
            return Ok((loaded.state, view.clone()));
        }
        let from = stored.as_ref().map_or(0, |view| view.revision + 1);
        let records = self
            .log
            .read_stream(&deployment.stream(), from)
            .await
            .map_err(function_error)?;
        overture_projector::project_stream(
            deployment,
            &records,
            &self.deployments,
            &self.read_models,
        )
        .await
        .map_err(function_error)?;
        let folded = overture_domain::projection::project(stored, &records)
            .map_err(function_error)?
            .view
            .filter(|view| view.revision >= revision)
            .ok_or(EngineError::ViewBehind {
                deployment,
                revision,
            })?;
        Ok((loaded.state, folded))
    }

    /// A deployment's current state, folded from the log.
    pub async fn state(&self, deployment: DeploymentId) -> Result<DeploymentState, EngineError> {
        Ok(self
            .deployments
            .load(deployment)
            .await
            .map_err(function_error)?
            .state)
    }

    /// Deployments whose stream holds no ending yet.
    pub async fn unfinished(&self) -> Result<Vec<DeploymentId>, EngineError> {
        let mut unfinished = Vec::new();
        for stream in self.log.stream_names().await.map_err(function_error)? {
            let Ok(id) = DeploymentId::from_stream(&stream) else {
                continue;
            };
            if !self.state(id).await?.is_finished() {
                unfinished.push(id);
            }
        }
        Ok(unfinished)
    }

    /// Makes every job leased by a dead engine available again, and kills and deletes the
    /// sandboxes it left behind.
    /// Only call this while holding the engine lock exclusively.
    pub async fn recover(&self) -> Result<u64, EngineError> {
        let released = self
            .queue
            .release_in_flight(self.clock.now())
            .await
            .map_err(function_error)?;
        let killed = self.sandbox.kill_leftovers().map_err(function_error)?;
        if killed > 0 {
            tracing::info!(
                killed,
                "killed processes of sandboxes left behind by a stopped engine"
            );
        }
        // A Terraform run killed half-way wrote down resources its kept state does not know;
        // keeping them spares the next attempt from making them again.
        let states = self
            .sandbox
            .leftover_files(Path::new(overture_runner::terraform::STATE_FILE))
            .map_err(function_error)?;
        for (sandbox, state) in states {
            let kept = overture_runner::terraform::keep_leftover_state(
                &sandbox,
                &state,
                &self.deployments,
                &self.keys,
            )
            .await
            .map_err(function_error)?;
            if kept {
                tracing::info!(%sandbox, "kept the Terraform state a stopped run left");
            }
        }
        self.sandbox.unmount_leftovers().map_err(function_error)?;
        let sandboxes = self.data_dir.join("sandboxes");
        if sandboxes.exists() {
            std::fs::remove_dir_all(&sandboxes).map_err(function_error)?;
        }
        Ok(released)
    }

    /// Records every attempt of the deployment that is still running as interrupted: the engine
    /// that ran it has stopped. Only call this while holding the engine lock exclusively, when no
    /// live engine can be running them.
    pub async fn interrupt_running(&self, deployment: DeploymentId) -> Result<(), EngineError> {
        let state = self.state(deployment).await?;
        let cause = Cause::new("resume", deployment, Uuid::now_v7());
        for (step, current) in state.running_steps() {
            let command = DeploymentCommand::InterruptAttempt {
                step: step.clone(),
                attempt: current.attempt,
                why: Interruption::EngineStopped,
                now: self.clock.now(),
            };
            let recorded = execute(&self.deployments, deployment, "", &cause, |_| {
                command.clone()
            })
            .await
            .map_err(function_error)?;
            // Refused only when its outcome was recorded meanwhile, which is just as good.
            if let Err(refused) = recorded {
                tracing::debug!(%deployment, step, %refused, "not interrupted");
            }
        }
        Ok(())
    }

    /// Tears a finished deployment down: `terraform destroy` for each Terraform step that ran
    /// (see [`overture_runner::destroy`]). Only call this while holding the engine lock, so
    /// `resume` cannot take the sandbox away.
    pub async fn destroy(
        &self,
        request: &DestroyRequest<'_>,
    ) -> Result<Result<DestroyOutcome, DestroyRefused>, EngineError> {
        let ports = DestroyPorts {
            log: &self.deployments,
            sandbox: &self.sandbox,
            kept: &self.keys,
            logs: &self.logs,
            payloads: &self.payloads,
        };
        overture_runner::destroy::destroy(request, &ports)
            .await
            .map_err(function_error)
    }

    /// Records a user's cancel of a deployment: its running and waiting attempts are abandoned
    /// at once. Whoever drives the deployment then closes its bastion, purges its secrets and
    /// records its end.
    pub async fn cancel(
        &self,
        deployment: DeploymentId,
        requested_by: &str,
        reason: &str,
    ) -> Result<Result<DeploymentState, DeploymentError>, EngineError> {
        let cause = Cause::new(requested_by, deployment, Uuid::now_v7());
        let command = DeploymentCommand::Cancel {
            requested_by: requested_by.to_owned(),
            reason: reason.to_owned(),
        };
        Ok(execute(&self.deployments, deployment, "", &cause, |_| {
            command.clone()
        })
        .await
        .map_err(function_error)?
        .map(|executed| executed.state))
    }

    fn orchestrator_ports(&self) -> OrchestratorPorts<'_> {
        OrchestratorPorts {
            log: &self.deployments,
            work: &self.queue,
            secrets: &self.keys,
            access: &self.access,
            services: self,
            clock: self.clock.as_ref(),
        }
    }

    /// Moves one deployment on; `since` says what happened to it (see [`Since`]).
    pub async fn orchestrate(
        &self,
        deployment: DeploymentId,
        cause: Uuid,
        since: Since<'_>,
    ) -> Result<DeploymentState, EngineError> {
        orchestrate(deployment, cause, since, &self.orchestrator_ports())
            .await
            .map_err(function_error)
    }

    /// Runs deployments until `target` has ended (or, with `None`, until every deployment has).
    /// `progress` sees every new log entry of the driven deployments, in order.
    pub async fn drive(
        self: &Arc<Self>,
        target: Option<DeploymentId>,
        parallelism: usize,
        watch: &mut (dyn Watch + Send),
        from_position: u64,
    ) -> Result<(), EngineError> {
        let scope = match target {
            Some(id) => Scope::One(id),
            None => Scope::Every,
        };
        self.drive_scope(scope, parallelism, watch, from_position)
            .await
    }

    /// Runs the deployments of `scope` until each has ended. `watch` sees every new log entry
    /// of the driven deployments, in order.
    ///
    /// Each pass feeds the new log entries to the orchestrator, starts the attempts it queued
    /// (handed over as they are queued, see [`Handoff`]) and any other due jobs, then folds the
    /// entries into the read models while those attempts run. Whether a driven deployment has
    /// ended is known from the state the orchestrator leaves it in: only new entries change it.
    pub async fn drive_scope(
        self: &Arc<Self>,
        scope: Scope<'_>,
        parallelism: usize,
        watch: &mut (dyn Watch + Send),
        from_position: u64,
    ) -> Result<(), EngineError> {
        let appended = self.log.appended();
        let workers = Arc::new(Semaphore::new(parallelism.max(1)));
        let handoff = Handoff::new(self.queue.clone(), Arc::clone(&workers), LEASE);
        let ports = OrchestratorPorts {
            work: &handoff,
            ..self.orchestrator_ports()
        };
        let mut running: JoinSet<()> = JoinSet::new();
        let mut position = from_position;
        // Deployments started later by other processes are theirs to drive.
        let mut driven: Vec<DeploymentId> = match scope {
            Scope::One(id) => vec![id],
            Scope::Every => self.unfinished().await?,
            Scope::Joined(_) => Vec::new(),
        };
        // The state of each driven deployment is loaded once; after that, the orchestrator
        // says what it is whenever new entries move it on.
        let mut states = Vec::with_capacity(driven.len());
        for id in &driven {
            states.push((*id, self.state(*id).await?));
        }
        // The users' tokens this drive was given, by cloud account: a deployment it wakes (a
        // watching step runs again) may run here only with a token of its own account that
        // opens its seal. Taken now, as a deployment's end lets go of its token.
        let mut lendable = Lendable::default();
        lendable.note(&self.custody, &states);
        let mut target: Option<DeploymentState> = None;
        let mut closed = !matches!(scope, Scope::Joined(_));
        let mut unfolded = Unfolded::new(position);

        loop {
            let notified = appended.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();

            if let Scope::Joined(joining) = scope {
                let (joined, more) = joining.take();
                closed = !more;
                // Their first records may have been fed before they joined: a recovery pass
                // queues whatever each waits for.
                let recovered = joined
                    .iter()
                    .map(|id| orchestrate(*id, Uuid::now_v7(), Since::Unknown, &ports));
                let recovered = try_join_all(recovered).await.map_err(function_error)?;
                driven.extend(&joined);
                let joined: Vec<(DeploymentId, DeploymentState)> =
                    joined.into_iter().zip(recovered).collect();
                lendable.note(&self.custody, &joined);
                states.extend(joined);
            }

            // Feed: every new entry moves its deployment on and reaches the read models.
            loop {
                let entries = self
                    .log
                    .read_all(position, FEED_BATCH)
                    .await
                    .map_err(function_error)?;
                let full = entries.len() == FEED_BATCH;
                let mut fed = Fed::default();
                // Each driven deployment's last record, the cause of what the orchestrator does.
                let mut causes: Vec<(DeploymentId, Uuid)> = Vec::new();
                for entry in entries {
                    position = entry.position;
                    fed.through = Some(entry.position);
                    let Ok(id) = DeploymentId::from_stream(&entry.envelope.stream) else {
                        continue;
                    };
                    if matches!(scope, Scope::Every) || driven.contains(&id) {
                        watch.entry(&entry);
                        match causes.iter_mut().find(|(seen, _)| *seen == id) {
                            Some(slot) => slot.1 = entry.envelope.id,
                            None => causes.push((id, entry.envelope.id)),
                        }
                    }
                    fed.streams.entry(id).or_default().push(entry.envelope);
                }
                // Side by side, so that the jobs they queue share the writer's commits.
                let moved = causes.iter().map(|(id, cause)| {
                    let records = fed.streams.get(id).map_or(&[][..], Vec::as_slice);
                    orchestrate(*id, *cause, Since::Records(records), &ports)
                });
                let moved = try_join_all(moved).await.map_err(function_error)?;
                // Deployments whose services changed are moved on now, and driven until they
                // end again, when they are not driven already: a watching step runs again.
                // (Driving every deployment, the drive gets their timers from the queue.)
                let woken = handoff.take_woken();
                if !matches!(scope, Scope::Every) {
                    for id in woken {
                        if driven.contains(&id) {
                            continue;
                        }
                        let state = orchestrate(id, Uuid::now_v7(), Since::Records(&[]), &ports)
                            .await
                            .map_err(function_error)?;
                        if !state.is_finished() && self.lend_a_token(id, &state, &lendable) {
                            driven.push(id);
                            states.push((id, state));
                        }
                    }
                }
                let handed = handoff.take();
                let started = !handed.is_empty();
                self.start(&mut running, handed, &unfolded);
                if started {
                    // The attempts get to their first commit before the drive's bookkeeping
                    // below: on one thread (`deploy`, `overture engine`) they would wait for
                    // its next wait, and their commits overlap it.
                    tokio::task::yield_now().await;
                }
                // The orchestrator loads a deployment's whole stream: it may have ended it, or
                // found it ended, on records appended after this read. They are read before
                // the deployment is let go, so that `watch` sees its every record.
                let ending = moved.iter().any(DeploymentState::is_finished);
                for ((id, _), state) in causes.into_iter().zip(moved) {
                    if let Some(known) = states.iter_mut().find(|(seen, _)| *seen == id) {
                        known.1 = state;
                    }
                }
                unfolded.add(fed);
                if !full && !ending {
                    break;
                }
                // A backlog is folded batch by batch, as it is read.
                self.fold_unfolded(&mut unfolded, position).await?;
            }

            states.retain(|(id, state)| {
                if let Scope::One(target_id) = scope {
                    if *id == target_id {
                        target = Some(state.clone());
                    }
                }
                let ended = state.is_finished();
                if let (true, Scope::Joined(joining)) = (ended, scope) {
                    joining.ended(*id);
                }
                !ended
            });
            driven.retain(|id| states.iter().any(|(known, _)| known == id));
            if let Some(state) = &target {
                watch.tick(state);
            }
            if driven.is_empty() && closed {
                // Attempts abandoned at the end notice within a heartbeat and kill their sandboxes.
                while running.join_next().await.is_some() {}
                self.fold_unfolded(&mut unfolded, position).await?;
                return Ok(());
            }

            // Hand other due jobs (retries, timers, jobs queued while every worker was busy) to
            // workers while there is room; only looking is a read, taking them a write.
            let only = (!matches!(scope, Scope::Every)).then_some(driven.as_slice());
            let mut next_wake = self.queue.next_wake(only).await.map_err(function_error)?;
            let room = workers.available_permits();
            if room > 0 && next_wake.is_some_and(|at| at <= self.clock.now()) {
                let jobs = self
                    .queue
                    .receive_up_to(room, self.clock.now(), LEASE, only)
                    .await
                    .map_err(function_error)?;
                let handed = jobs
                    .into_iter()
                    .map(|job| {
                        let permit = Arc::clone(&workers)
                            .try_acquire_owned()
                            .map_err(function_error)?;
                        Ok((job, permit))
                    })
                    .collect::<Result<Vec<_>, EngineError>>()?;
                self.start(&mut running, handed, &unfolded);
                next_wake = self.queue.next_wake(only).await.map_err(function_error)?;
            }

            // After starting the attempts, so that their commits overlap the views' writes.
            if unfolded
                .since
                .is_some_and(|since| since.elapsed() >= PROJECT_LAG)
            {
                self.fold_unfolded(&mut unfolded, position).await?;
            }

            // With every worker busy, a due job waits for one to finish rather than spinning.
            let mut sleep = match workers.available_permits() {
                0 => POLL,
                _ => next_wake
                    .map(|at| (at - self.clock.now()).to_std().unwrap_or(Duration::ZERO))
                    .unwrap_or(POLL)
                    .min(POLL),
            };
            // Workers that finished while others were free are reaped here.
            while running.try_join_next().is_some() {}
            let folding = !unfolded.is_empty();
            if folding {
                sleep = sleep.min(PROJECT_IDLE);
            }
            let quiet = tokio::select! {
                () = &mut notified => false,
                // A finished worker is news only to jobs waiting for a free one.
                Some(_) = running.join_next(), if workers.available_permits() == 0 => false,
                () = tokio::time::sleep(sleep) => true,
            };
            if quiet && folding {
                self.fold_unfolded(&mut unfolded, position).await?;
            }
        }
    }

    /// Whether this process can run the woken deployment `id`: it needs no token, holds its
    /// own, or was given a token of its cloud account that opens its seal, which it then lends
    /// it. Otherwise whoever holds its user's token runs it (`overture resume --token-file`).
    fn lend_a_token(&self, id: DeploymentId, state: &DeploymentState, lendable: &Lendable) -> bool {
        let Some(account) = &state.cloud else {
            return true;
        };
        if self.custody.token(id).is_some() {
            return true;
        }
        let opens = |token: &overture_domain::secret::SecretString| {
            state.seal.is_none()
                || self
                    .keys
                    .open_values(id, &state.tenant, Some(token))
                    .is_ok()
        };
        match lendable.tokens_of(account).find(|token| opens(token)) {
            Some(token) => {
                self.custody.remember(id, token.clone());
                true
            }
            None => {
                tracing::warn!(deployment = %id, "a watching step of this deployment runs again, but this process holds no token of its user that opens its seal; `overture resume --token-file` runs it");
                false
            }
        }
    }

    /// Runs each handed job on a worker task, which frees its worker's permit when done and
    /// leaves the job's receipt to `unfolded`, to be deleted with the next fold.
    fn start(
        self: &Arc<Self>,
        running: &mut JoinSet<()>,
        handed: Vec<HandedJob>,
        unfolded: &Unfolded,
    ) {
        for (job, permit) in handed {
            let engine = Arc::clone(self);
            let finished = Arc::clone(&unfolded.finished);
            running.spawn(async move {
                let receipt = job.receipt;
                let done = engine.handle_job(job).await;
                drop(permit);
                if done {
                    finished
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push(receipt);
                }
            });
        }
    }

    /// Folds what a drive has fed, up to `position`, into the read models, and deletes the jobs
    /// its workers have finished: one round of writes, which share the writer's commits.
    async fn fold_unfolded(
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

    /// Handles one received job; says whether it is finished, so its receipt may be deleted.
    async fn handle_job(self: Arc<Self>, job: ReceivedJob) -> bool {
        let receipt = job.receipt;
        let key = job.key.clone();
        let cause = Uuid::now_v7();
        // The queue's contract lets a job come before it is due (here: one `resume` released):
        // it waits the rest out hidden, and is never handled early.
        if job.due_at > self.clock.now() {
            if let Err(error) = self.queue.extend(&receipt, job.due_at).await {
                tracing::warn!(key, %error, "could not postpone a job that is not due");
            }
            return false;
        }
        let finished = match Job::from_body(job.body) {
            Err(error) => {
                tracing::error!(key, %error, "dropping a job that cannot be read");
                true
            }
            Ok(Job::Wake {
                deployment,
                cause: timer_cause,
            }) => match self
                .orchestrate(
                    deployment,
                    timer_cause.unwrap_or(cause),
                    Since::Records(&[]),
                )
                .await
            {
                Ok(_) => true,
                Err(error) => {
                    tracing::warn!(key, %error, "timer failed; it will be retried after its lease");
                    false
                }
            },
            Ok(Job::RunAttempt(attempt)) => {
                let lease = QueueLease {
                    queue: self.queue.clone(),
                    receipt,
                    clock: self.clock.clone(),
                };
                let ports = RunnerPorts {
                    log: &self.deployments,
                    sandbox: &self.sandbox,
                    seals: &self.keys,
                    kept: &self.keys,
                    access: &self.access,
                    logs: &self.logs,
                    clock: self.clock.as_ref(),
                    payloads: &self.payloads,
                    loopback: self.loopback,
                };
                match run_attempt(&attempt, &ports, &lease).await {
                    Ok(AttemptReport::NotYetDue(at) | AttemptReport::StillRunning(at)) => {
                        if let Err(error) = self.queue.extend(&receipt, at).await {
                            tracing::warn!(key, %error, "could not postpone a job that is not due");
                        }
                        false
                    }
                    Ok(report) => {
                        tracing::debug!(key, ?report, "attempt handled");
                        true
                    }
                    Err(error) => {
                        tracing::warn!(key, %error, "attempt could not be handled; it will be retried after its lease");
                        false
                    }
                }
            }
        };
        finished
    }
}

/// The engine is the tenants' service registry as the orchestrator needs it: the read models,
/// brought up to the log's end before each read, so a registration appended a moment ago (by
/// this process or another) counts, whether or not a drive has folded it yet.
#[async_trait]
impl ServiceDirectory for Engine {
    async fn instances(&self, tenant: &str) -> Result<Vec<RegisteredInstance>, WorkError> {
        self.project().await.map_err(WorkError::unavailable)?;
        RegistryDirectory(self.read_models.clone())
            .instances(tenant)
            .await
    }

    async fn interested(
        &self,
        tenant: &str,
        service: &str,
    ) -> Result<Vec<DeploymentId>, WorkError> {
        self.project().await.map_err(WorkError::unavailable)?;
        RegistryDirectory(self.read_models.clone())
            .interested(tenant, service)
            .await
    }
}

/// Keeps a received job's lease alive while its attempt runs.
struct QueueLease {
    queue: JobQueue,
    receipt: Receipt,
    clock: Arc<SystemClock>,
}

#[async_trait]
impl KeepAlive for QueueLease {
    // The engine's own lease is short and renewed every heartbeat: a dead engine's job is
    // found by `resume`, which holds every engine's lock, not by waiting for the attempt's.
    async fn keep_alive(&self, _: Option<Timestamp>) -> Result<(), PortError> {
        let until = self.clock.now() + chrono::TimeDelta::from_std(LEASE).unwrap_or_default();
        self.queue.extend(&self.receipt, until).await.map_err(|e| {
            if e.is_retryable() {
                PortError::unavailable(e)
            } else {
                PortError::refused(e)
            }
        })
    }
}
