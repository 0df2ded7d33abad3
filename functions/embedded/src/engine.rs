//! The engine: every adapter of the embedded mode opened on one data directory, and the
//! functions' commands carried out on it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use overture_domain::deployment::Interruption;
use overture_domain::projection::DeploymentView;
use overture_domain::services::RegisteredInstance;
use overture_domain::{DeploymentCommand, DeploymentError, DeploymentState};
use overture_events::DeploymentId;
use overture_infra::keystore::LocalKeyStore;
use overture_infra::logs::LogFiles;
use overture_infra::payloads::DirPayloads;
use overture_infra::session::SessionTokens;
use overture_infra::sqlite::{Database, EventLog, JobQueue, SqliteDeployments, SqliteReadModels};
use overture_kit::SystemClock;
use overture_kit::{execute, Cause, Clock, DeploymentLog};
use overture_openstack::CloudAccess;
use overture_orchestrator::{
    orchestrate, OrchestratorPorts, RegistryDirectory, ServiceDirectory, Since, WorkError,
};
use overture_runner::destroy::{DestroyOutcome, DestroyPorts, DestroyRefused, DestroyRequest};
use overture_runner::LoopbackEgress;
use overture_sandbox::Bubblewrap;
use overture_submit::{submit, Submission, SubmitError, SubmitPorts};
use uuid::Uuid;

use crate::error::EngineError;

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
    pub(crate) keys: LocalKeyStore,
    /// The users' cloud tokens this process was given, by deployment.
    pub custody: Arc<SessionTokens>,
    pub(crate) access: CloudAccess,
    /// Every attempt's output.
    pub logs: LogFiles,
    /// The blueprints' files, by content hash (`payloads/` in the data directory).
    pub payloads: DirPayloads,
    pub(crate) sandbox: Bubblewrap,
    pub(crate) clock: Arc<SystemClock>,
    /// How much of the host's loopback its steps may reach.
    pub(crate) loopback: LoopbackEgress,
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
        let program = std::env::current_exe().map_err(EngineError::EngineProgram)?;
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
            sandbox: Bubblewrap::new(data_dir.join("sandboxes")).with_engine_program(program),
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
        let loaded = self.deployments.load(deployment).await?;
        let revision = loaded
            .revision
            .ok_or(EngineError::NoEvents { deployment })?;
        let stored = self.read_models.deployment(deployment).await?;
        if let Some(view) = stored.as_ref().filter(|view| view.revision >= revision) {
            return Ok((loaded.state, view.clone()));
        }
        let from = stored.as_ref().map_or(0, |view| view.revision + 1);
        let records = self.log.read_stream(&deployment.stream(), from).await?;
        overture_projector::project_stream(
            deployment,
            &records,
            &self.deployments,
            &self.read_models,
        )
        .await?;
        let folded = overture_domain::projection::project(stored, &records)?
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
        Ok(self.deployments.load(deployment).await?.state)
    }

    /// Deployments whose stream holds no ending yet.
    pub async fn unfinished(&self) -> Result<Vec<DeploymentId>, EngineError> {
        let mut unfinished = Vec::new();
        for stream in self.log.stream_names().await? {
            let Ok(id) = DeploymentId::from_stream(&stream) else {
                continue;
            };
            if !self.state(id).await?.is_finished() {
                unfinished.push(id);
            }
        }
        Ok(unfinished)
    }

    /// Checks that this machine has what every step's sandbox needs (see
    /// [`Bubblewrap::preflight`]): call it before recording or running anything, so that a
    /// missing tool is one refusal naming its package rather than every attempt failing.
    pub fn preflight(&self) -> Result<(), EngineError> {
        self.sandbox.preflight().map_err(EngineError::Unready)
    }

    /// Makes every job leased by a dead engine available again, and kills and deletes the
    /// sandboxes it left behind (their processes, cgroups and workspaces), saying so in a log
    /// line. Only call this while holding the engine lock exclusively.
    pub async fn recover(&self) -> Result<u64, EngineError> {
        let released = self.queue.release_in_flight(self.clock.now()).await?;
        let mut cleared = self
            .sandbox
            .kill_leftovers()
            .map_err(EngineError::Sandboxes)?;
        // A Terraform run killed half-way wrote down resources its kept state does not know;
        // keeping them spares the next attempt from making them again.
        let states = self
            .sandbox
            .leftover_files(Path::new(overture_runner::terraform::STATE_FILE))
            .map_err(EngineError::Sandboxes)?;
        for (sandbox, state) in states {
            let kept = overture_runner::terraform::keep_leftover_state(
                &sandbox,
                &state,
                &self.deployments,
                &self.keys,
            )
            .await?;
            if kept {
                tracing::info!(%sandbox, "kept the Terraform state a stopped run left");
            }
        }
        cleared.workspaces = self
            .sandbox
            .remove_leftovers()
            .map_err(EngineError::Sandboxes)?;
        if !cleared.is_empty() {
            tracing::warn!(%cleared, "cleared the sandboxes a stopped engine left");
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
            .await?;
            // Refused only when its outcome was recorded meanwhile, which is just as good.
            if let Err(refused) = recorded {
                tracing::debug!(%deployment, step, %refused, "not interrupted");
            }
        }
        self.close_unrecorded_leases(deployment, &state).await;
        Ok(())
    }

    /// Closes the bastion leases of the deployment that no recorded grant names: an attempt
    /// stopped between opening its lease and recording `BastionAccessGranted` left one, which
    /// its re-run would otherwise find open (and the deployment's end closes anyway). A failure
    /// is only logged: the deployment's end tries again.
    async fn close_unrecorded_leases(&self, deployment: DeploymentId, state: &DeploymentState) {
        use overture_orchestrator::RevokeAccess;
        let (Some(cloud), false) = (&state.cloud, state.running_steps().next().is_none()) else {
            return;
        };
        let recorded = state.bastion_access.as_ref();
        match self
            .access
            .revoke_unrecorded(deployment, cloud, recorded)
            .await
        {
            Ok(0) => {}
            Ok(closed) => {
                tracing::info!(%deployment, closed, "closed the bastion leases of interrupted attempts")
            }
            Err(error) => {
                tracing::warn!(%deployment, %error, "could not close the bastion leases of interrupted attempts; the deployment's end will")
            }
        }
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
            .map_err(EngineError::from)
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
        .await?
        .map(|executed| executed.state))
    }

    pub(crate) fn orchestrator_ports(&self) -> OrchestratorPorts<'_> {
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
            .map_err(EngineError::from)
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
