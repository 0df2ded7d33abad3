//! The API's ports on the embedded engine: every deployment joins one drive, as those of
//! `overture engine` do, so deployments started side by side share its commits and its feed;
//! a restarted server resumes the unfinished ones as `overture resume` does.
//!
//! A deployment made with a cloud token cannot be resumed without a token of its project (its
//! seal opens with nothing else, see [`crate::token`]): it waits, recorded as interrupted, until
//! a caller of that project whose token opens its seal makes a request, and carries on with
//! that caller's token. So does a deployment whose watching step another deployment's services
//! set off while this server holds no token of its user: its re-run waits, queued.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use overture_domain::egress::LoopbackEgress;
use overture_domain::projection::{DeploymentView, TenantView};
use overture_domain::DeploymentError;
use overture_events::{DeploymentId, Envelope};
use overture_kit::query::{AttemptLog, DeploymentFilter, QueryDeployments, QueryError};
use overture_orchestrator::Since;
use overture_submit::again::Redrive;
use overture_submit::Submission;

use crate::lock::{DriveLock, EngineLock};
use crate::Failure;
use overture_api::auth::Caller;
use overture_api::{RunDeployments, RunError};
use overture_embedded::{Engine, Joining, Scope};

/// How often a waiter looks at the log when nothing in this process appended.
const LOOK_EVERY: Duration = Duration::from_millis(500);

/// The embedded engine, driving the deployments submitted to this server.
pub struct Embedded {
    /// The engine.
    pub engine: Arc<Engine>,
    /// The deployments this server drives, in its one drive.
    driving: Arc<Driving>,
    /// Unfinished deployments made with a cloud token, waiting for a token of their project
    /// (by project id).
    waiting: Waiting,
    /// Shared with every `overture deploy` on the same data directory; `resume` waits for it.
    _lock: EngineLock,
    /// The deployments that were unfinished when the server started, resumed since.
    pub resumed: Vec<DeploymentId>,
}

fn engine_error(error: impl std::fmt::Display) -> RunError {
    RunError::Engine(error.to_string())
}

impl Embedded {
    /// Opens the data directory and resumes its unfinished deployments; their steps reach as
    /// much of the host's loopback as `loopback` allows.
    pub async fn start(
        data_dir: &std::path::Path,
        parallelism: usize,
        loopback: LoopbackEgress,
    ) -> Result<Self, Failure> {
        let engine = Engine::open_with_loopback(data_dir, loopback).await?;
        engine.preflight()?;
        let exclusive = EngineLock::take(data_dir, true).map_err(|e| {
            Failure::BadInput(format!(
                "{e}; stop it before starting `overture serve` on this data directory"
            ))
        })?;
        let unfinished = engine.unfinished().await?;
        engine.recover().await?;
        let mut ready = Vec::new();
        let mut waiting = Vec::new();
        for id in unfinished {
            engine.interrupt_running(id).await?;
            match engine.state(id).await?.cloud {
                Some(cloud) => waiting.push((id, cloud.project_id)),
                None => ready.push(id),
            }
        }
        drop(exclusive);
        let lock =
            EngineLock::take(data_dir, false).map_err(|e| Failure::BadInput(e.to_string()))?;
        engine.project().await?;
        if !ready.is_empty() || !waiting.is_empty() {
            eprintln!(
                "resuming {} unfinished deployment(s); {} more wait for a request with a token \
                 of their project",
                ready.len(),
                waiting.len()
            );
        }
        let resumed = ready
            .iter()
            .chain(waiting.iter().map(|(id, _)| id))
            .copied()
            .collect();
        let waiting = Waiting(Arc::new(Mutex::new(waiting)));
        let driving = Driving::start(&engine, parallelism, &waiting).await?;
        let embedded = Self {
            engine,
            driving,
            waiting,
            _lock: lock,
            resumed,
        };
        for id in ready {
            embedded.carry_on(id).await?;
        }
        Ok(embedded)
    }

    /// Stops driving, for a graceful exit: no deployment joins any more, the attempts running
    /// end and are recorded, and no other starts; the deployments are left unfinished, jobs and
    /// all, for `overture resume` or the next server to carry on.
    pub async fn stop(&self) {
        self.driving.joining.stop();
        let task = self
            .driving
            .task
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(task) = task {
            // A drive that failed said so when it ended.
            let _ = task.await;
        }
    }

    /// Moves a deployment on from where its log stands, and drives it.
    async fn carry_on(&self, id: DeploymentId) -> Result<(), Failure> {
        self.engine
            .orchestrate(id, uuid::Uuid::now_v7(), Since::Unknown)
            .await?;
        self.driving.join(&self.engine, id);
        Ok(())
    }
}

/// The server's one drive, and the drive lock of each deployment in it.
struct Driving {
    joining: Joining,
    locks: Mutex<HashMap<DeploymentId, DriveLock>>,
    /// The drive's task, awaited when the server stops.
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Driving {
    /// Starts the drive, from the log's head on, in a task that outlives every request.
    async fn start(
        engine: &Arc<Engine>,
        parallelism: usize,
        waiting: &Waiting,
    ) -> Result<Arc<Self>, Failure> {
        let from = engine
            .log
            .head_position()
            .await
            .map_err(anyhow::Error::from)?;
        let (joining, mut ended) = Joining::new(engine);
        let driving = Arc::new(Self {
            joining,
            locks: Mutex::new(HashMap::new()),
            task: Mutex::new(None),
        });
        let (engine, drives) = (Arc::clone(engine), Arc::clone(&driving));
        let mut watch = waiting.clone();
        let task = tokio::spawn(async move {
            let drive = engine.drive_scope(
                Scope::Joined(&drives.joining),
                parallelism,
                &mut watch,
                from,
            );
            tokio::pin!(drive);
            loop {
                tokio::select! {
                    driven = &mut drive => {
                        if let Err(error) = driven {
                            tracing::error!(%error, "driving the deployments failed; restart the server to resume them");
                        }
                        return;
                    }
                    Some(id) = ended.recv() => {
                        drives.locks.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&id);
                    }
                }
            }
        });
        *driving
            .task
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(task);
        Ok(driving)
    }

    /// Adds a recorded deployment to the drive, unless another process drives it (`overture
    /// cancel` carrying a cancel out).
    fn join(&self, engine: &Engine, id: DeploymentId) {
        match DriveLock::take(&engine.data_dir, id) {
            Ok(Some(lock)) => {
                self.locks
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .insert(id, lock);
                self.joining.join(id);
            }
            Ok(None) => {}
            Err(error) => tracing::error!(%id, %error, "cannot take the drive lock"),
        }
    }
}

#[async_trait]
impl RunDeployments for Embedded {
    async fn start(&self, submission: Submission) -> Result<DeploymentId, RunError> {
        let id = self.engine.submit(submission).await?;
        self.engine.project().await.map_err(engine_error)?;
        self.driving.join(&self.engine, id);
        Ok(id)
    }

    async fn redrive(&self, request: Redrive) -> Result<(), RunError> {
        let id = request.deployment;
        self.engine.redrive(request).await?;
        self.engine.project().await.map_err(engine_error)?;
        self.driving.join(&self.engine, id);
        Ok(())
    }

    async fn cancel(
        &self,
        id: DeploymentId,
        requested_by: &str,
        reason: &str,
    ) -> Result<Result<(), DeploymentError>, RunError> {
        let recorded = self
            .engine
            .cancel(id, requested_by, reason)
            .await
            .map_err(engine_error)?;
        self.engine.project().await.map_err(engine_error)?;
        Ok(recorded.map(|_| ()))
    }

    async fn changed(&self) {
        let appended = self.engine.log.appended();
        // Other processes append too, and their appends wake no one here.
        let _ = tokio::time::timeout(LOOK_EVERY, appended.notified()).await;
    }

    async fn caller_seen(&self, caller: &Caller) {
        let of_project: Vec<DeploymentId> = self
            .waiting
            .lock()
            .iter()
            .filter(|(_, project_id)| *project_id == caller.account.project_id)
            .map(|(id, _)| *id)
            .collect();
        let mut ready = Vec::new();
        for id in of_project {
            match self.engine.state(id).await {
                Ok(state) if self.engine.opens_seal(id, &state, &caller.token) => ready.push(id),
                Ok(_) => {}
                Err(error) => tracing::error!(%id, %error, "could not load the deployment"),
            }
        }
        // Another request of the project may have taken some meanwhile: each carries on once.
        let ready: Vec<DeploymentId> = {
            let mut waiting = self.waiting.lock();
            ready.retain(|id| waiting.iter().any(|(known, _)| known == id));
            waiting.retain(|(id, _)| !ready.contains(id));
            ready
        };
        for id in ready {
            self.engine.custody.remember(id, caller.token.clone());
            if let Err(error) = self.carry_on(id).await {
                tracing::error!(%id, %error, "could not resume the deployment");
            }
        }
    }
}

/// The deployments that wait for a token of their project (by project id): those unfinished
/// when the server started, and those whose watching step the drive set off without one.
#[derive(Clone)]
struct Waiting(Arc<Mutex<Vec<(DeploymentId, String)>>>);

impl Waiting {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(DeploymentId, String)>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl overture_embedded::Watch for Waiting {
    fn entry(&mut self, _: &overture_events::LogEntry) {}

    fn tick(&mut self, _: &overture_domain::DeploymentState) {}

    fn waits_for_a_token(&mut self, id: DeploymentId, state: &overture_domain::DeploymentState) {
        let Some(cloud) = &state.cloud else {
            return;
        };
        tracing::info!(deployment = %id, "a watching step of this deployment runs again once a caller of its project whose token opens its seal makes a request");
        let mut waiting = self.lock();
        if !waiting.iter().any(|(known, _)| *known == id) {
            waiting.push((id, cloud.project_id.clone()));
        }
    }
}

/// The embedded query port, folding what is new on the log into the read models before each
/// read, so an answer is never older than the log at the time of asking.
pub struct FreshQueries(pub Arc<Engine>);

impl FreshQueries {
    async fn fresh(&self) -> Result<overture_infra::query::EmbeddedQueries, QueryError> {
        self.0
            .project()
            .await
            .map_err(|e| QueryError::Unavailable(Box::new(e)))?;
        Ok(self.0.queries())
    }
}

#[async_trait]
impl QueryDeployments for FreshQueries {
    async fn deployment(&self, id: DeploymentId) -> Result<Option<DeploymentView>, QueryError> {
        self.fresh().await?.deployment(id).await
    }

    async fn list(&self, filter: &DeploymentFilter) -> Result<Vec<DeploymentView>, QueryError> {
        self.fresh().await?.list(filter).await
    }

    async fn tenants(&self) -> Result<Vec<TenantView>, QueryError> {
        self.fresh().await?.tenants().await
    }

    async fn events(&self, id: DeploymentId) -> Result<Vec<Envelope>, QueryError> {
        self.0.queries().events(id).await
    }

    async fn attempt_log(
        &self,
        id: DeploymentId,
        step: &str,
        log: AttemptLog,
    ) -> Result<Option<Vec<u8>>, QueryError> {
        self.0.queries().attempt_log(id, step, log).await
    }

    async fn service_instances(
        &self,
        tenant: &str,
    ) -> Result<Vec<overture_domain::services::RegisteredInstance>, QueryError> {
        self.fresh().await?.service_instances(tenant).await
    }

    async fn named(
        &self,
        tenant: Option<&str>,
        name: &str,
    ) -> Result<Vec<DeploymentView>, QueryError> {
        self.fresh().await?.named(tenant, name).await
    }
}
