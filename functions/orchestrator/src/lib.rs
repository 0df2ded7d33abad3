//! The orchestrator function: after anything happens to a deployment, move it on.
//!
//! [`orchestrate`] advances the aggregate (schedule ready steps, abandon at a passed deadline,
//! finish), then carries out the actions its state calls for: queue an attempt for a runner, set
//! a durable timer for a grace period's deadline, close the engine's access to the bastion once
//! no step can run any more, and then purge the secrets. Every action is idempotent, so handling
//! the same event twice is harmless.
//!
//! **Once per decision.** The queue delivers at least once and need not de-duplicate
//! ([`QueueWork`]), so an attempt or a deadline is queued only when an event decided it: a
//! `StepScheduled` or `StepRetryScheduled` (an attempt waits), a `FailureGracePeriodStarted` (a
//! deadline), among the records the caller saw appended ([`Since::Records`]) or the events
//! `orchestrate` appends itself. The events that decided are in the log before their jobs are
//! queued, so a crash in between loses jobs, never decisions: a recovery pass with
//! [`Since::Unknown`] (`overture resume`) queues every waiting attempt and deadline again.
//!
//! **Services.** A deployment whose steps require or watch services looks at the tenant's
//! registry ([`ServiceDirectory`]) after each advance, so that waiting steps start once their
//! services have enough members and watching steps run again when theirs change. When a
//! deployment's records register or deregister an instance, every other deployment of the
//! tenant that requires or watches the service is woken (a timer due now), to look again.
//!
//! What each event decides for the orchestrator to do is its [`subscription`], one match from
//! event to [`Reaction`].
//!
//! [`queued`] carries [`QueueWork`] out on queues of the port `overture_kit::queue`. On AWS the
//! triggers are [`stream`] (the events table's stream), [`timer`] (the timers queue) and
//! [`dead_letters`] (the jobs' dead-letter queue).

pub mod queued;
pub mod subscription;

pub mod dead_letters;
pub mod stream;
pub mod timer;

pub use dead_letters::on_dead_letters;
pub use stream::on_stream_records;
pub use subscription::{subscription, Reaction};
pub use timer::on_timer_messages;

use async_trait::async_trait;
use overture_domain::deployment::BastionAccess;
use overture_domain::deployment::{actions, actions_besides_attempts, attempt_action};
use overture_domain::services::RegisteredInstance;
use overture_domain::{Action, DeploymentCommand, DeploymentError, DeploymentState};
use overture_events::{CloudAccount, DeploymentEvent, DeploymentId, Envelope, Timestamp};
use overture_kit::{execute, execute_all, Cause, Clock, DeploymentLog, LogError};

/// The name the orchestrator appends events under.
pub const ACTOR: &str = overture_kit::ORCHESTRATOR_ACTOR;

/// Queues work for later: attempts for the runners, and timers.
///
/// The queue behind it keeps the contract of `overture_kit::queue` (that of an SQS standard
/// queue): a job is delivered at least once, in no particular order, and not before it is due.
/// It may de-duplicate (the SQLite queue does, by key) but need not, so a caller queues each
/// decision once ([`orchestrate`] does), and every consumer is idempotent on (deployment, step,
/// attempt): the runner refuses to start an attempt twice, and a timer only advances.
#[async_trait]
pub trait QueueWork: Send + Sync {
    /// Queue these attempts to run once their `not_before` has passed. `cause` (the event the
    /// orchestrator was moving the deployment on for) travels with each job, so the runner's
    /// events name it as their causation.
    async fn run_attempts(
        &self,
        deployment: DeploymentId,
        attempts: &[WaitingAttempt],
        cause: uuid::Uuid,
    ) -> Result<(), WorkError>;
    /// Have the orchestrator called for this deployment at `at`, with `cause`.
    async fn wake_at(
        &self,
        deployment: DeploymentId,
        at: Timestamp,
        cause: uuid::Uuid,
    ) -> Result<(), WorkError>;
}

/// The tenant's registry of services, as moving deployments on needs it. It must show every
/// record appended before the call: a wait decided on an older view could miss the instance
/// whose registration woke it.
#[async_trait]
pub trait ServiceDirectory: Send + Sync {
    /// Every instance registered for the tenant, by any of its deployments.
    async fn instances(&self, tenant: &str) -> Result<Vec<RegisteredInstance>, WorkError>;
    /// The tenant's deployments that may wait for or watch the service: each is woken when
    /// the service's members change (a few too many is harmless).
    async fn interested(&self, tenant: &str, service: &str)
        -> Result<Vec<DeploymentId>, WorkError>;
}

/// The registry's read model as a directory, only as fresh as the store. On AWS the projector
/// folds the registry from the same stream that triggers the orchestrator, so the wake the
/// orchestrator sends may be looked at before the registration is folded; the projector wakes
/// the same deployments again once it has folded it (`overture_projector::stream`). The
/// embedded engine folds the log before it reads (its `ServiceDirectory`).
pub struct RegistryDirectory<R>(pub R);

/// A registry read that failed, as the orchestrator's ports say it.
pub fn registry_error(error: overture_kit::registry::RegistryError) -> WorkError {
    if error.is_retryable() {
        WorkError::unavailable(error)
    } else {
        WorkError::refused(error)
    }
}

#[async_trait]
impl<R: overture_kit::registry::ReadServiceRegistry> ServiceDirectory for RegistryDirectory<R> {
    async fn instances(&self, tenant: &str) -> Result<Vec<RegisteredInstance>, WorkError> {
        self.0
            .service_instances(tenant)
            .await
            .map_err(registry_error)
    }

    async fn interested(
        &self,
        tenant: &str,
        service: &str,
    ) -> Result<Vec<DeploymentId>, WorkError> {
        self.0
            .interested_deployments(tenant, service)
            .await
            .map_err(registry_error)
    }
}

/// An attempt waiting to start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WaitingAttempt {
    /// The step.
    pub step: String,
    /// The 1-based attempt.
    pub attempt: u32,
    /// When it may start.
    pub not_before: Timestamp,
}

/// Deletes a deployment's sealed secrets.
#[async_trait]
pub trait PurgeSecrets: Send + Sync {
    /// Deletes them; purging what is already gone succeeds.
    async fn purge(&self, deployment: DeploymentId) -> Result<(), WorkError>;
}

/// Closes the engine's access to a deployment's bastion, acting with the user's token.
#[async_trait]
pub trait RevokeAccess: Send + Sync {
    /// Closes the deployment's lease on the engine's rule, and deletes the rule when no other
    /// deployment holds it any more (deleting a rule that is already gone succeeds); says which.
    async fn revoke(
        &self,
        deployment: DeploymentId,
        cloud: &CloudAccount,
        access: &BastionAccess,
    ) -> Result<Revocation, WorkError>;

    /// Closes every lease the deployment holds on a rule other than the one `recorded` names
    /// (its recorded grant, when it has one), deleting each rule whose last lease it was: a lease
    /// opened just before a crash, before `BastionAccessGranted` was recorded, is closed so.
    /// Returns how many it closed; with none held, it needs neither the token nor the cloud.
    async fn revoke_unrecorded(
        &self,
        deployment: DeploymentId,
        cloud: &CloudAccount,
        recorded: Option<&BastionAccess>,
    ) -> Result<usize, WorkError>;
}

pub use overture_kit::leases::Revocation;

/// How long before a failed revocation is tried again.
pub const REVOKE_RETRY: std::time::Duration = std::time::Duration::from_secs(10);

/// A port failed to carry out an action.
#[derive(Debug, thiserror::Error)]
pub enum WorkError {
    /// The store, the queue or the cloud failed in a way that may pass: carrying the action out
    /// again later may succeed.
    #[error("{0}")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The action cannot be carried out as things stand (no token to act with, a token the
    /// cloud refuses): only a person can change that.
    #[error("{0}")]
    Refused(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl OrchestratorError {
    /// Whether moving the deployment on again later may succeed: not when the aggregate
    /// refused (no such deployment), nor when a store refused for good.
    pub fn is_retryable(&self) -> bool {
        match self {
            OrchestratorError::Log(error) => error.is_retryable(),
            OrchestratorError::Work { source, .. } => source.is_retryable(),
            OrchestratorError::Refused { .. } => false,
        }
    }
}

impl WorkError {
    /// A failure that may pass.
    pub fn unavailable(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self::Unavailable(Box::new(error))
    }

    /// A failure that will not pass by itself.
    pub fn refused(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self::Refused(Box::new(error))
    }

    /// Whether carrying the action out again later may succeed.
    pub const fn is_retryable(&self) -> bool {
        matches!(self, Self::Unavailable(_))
    }
}

/// The deployment records no cloud account, so nothing can act in its cloud.
#[derive(Debug, thiserror::Error)]
#[error("deployment {0} has no cloud account to close its bastion with")]
pub struct NoCloudAccount(pub DeploymentId);

/// The ports [`orchestrate`] uses.
pub struct OrchestratorPorts<'a> {
    /// The deployments.
    pub log: &'a dyn DeploymentLog,
    /// The job and timer queue.
    pub work: &'a dyn QueueWork,
    /// The sealed secrets.
    pub secrets: &'a dyn PurgeSecrets,
    /// The bastions.
    pub access: &'a dyn RevokeAccess,
    /// The tenant's registry of services.
    pub services: &'a dyn ServiceDirectory,
    /// The time.
    pub clock: &'a dyn Clock,
}

/// Why a deployment could not be moved on.
#[derive(Debug, thiserror::Error)]
pub enum OrchestratorError {
    /// The log failed.
    #[error(transparent)]
    Log(#[from] LogError),
    /// Queuing or purging failed.
    #[error("deployment {deployment}: {source}")]
    Work {
        deployment: DeploymentId,
        source: WorkError,
    },
    /// The aggregate refused (for example, the deployment does not exist).
    #[error("deployment {deployment}: {source}")]
    Refused {
        deployment: DeploymentId,
        source: DeploymentError,
    },
}

/// What the caller knows of what happened to a deployment since it was last moved on.
#[derive(Clone, Copy, Debug)]
pub enum Since<'a> {
    /// These records were appended (a feed's entries, a stream's records; none for a timer):
    /// only the attempts and deadlines they decided are queued. Records the orchestrator
    /// appended itself are skipped, as it queued their decisions when it appended them.
    Records(&'a [Envelope]),
    /// The caller has just appended these events itself, under [`ACTOR`] (so no stream
    /// trigger queues what they decided, as for the orchestrator's own): what they decided is
    /// queued now.
    Appended(&'a [DeploymentEvent]),
    /// Not known (a resume after a crash, a deployment no engine drives): every waiting attempt
    /// and deadline is queued again.
    Unknown,
}

/// Which attempts and deadlines some events decided.
#[derive(Debug, Default)]
struct Decided {
    attempts: Vec<(String, u32)>,
    deadlines: Vec<Timestamp>,
    /// Services whose members the events changed.
    services: std::collections::BTreeSet<String>,
}

impl Decided {
    fn note(&mut self, events: &[DeploymentEvent]) {
        for reaction in events.iter().filter_map(subscription) {
            self.react(reaction);
        }
    }

    fn react(&mut self, reaction: Reaction) {
        match reaction {
            Reaction::QueueAttempt { step, attempt } => self.attempts.push((step, attempt)),
            Reaction::WakeAt(deadline) => self.deadlines.push(deadline),
            Reaction::WakeInterested { service } => {
                self.services.insert(service);
            }
        }
    }

    /// Notes what others' records decided, and the registrations of every record; `false`
    /// when one of others' records cannot be read, and so what was decided is not known.
    fn note_records(&mut self, deployment: DeploymentId, records: &[Envelope]) -> bool {
        let mut known = true;
        for record in records {
            let own = record.metadata.actor == ACTOR;
            match DeploymentEvent::from_parts(&record.event_type, record.data.clone()) {
                Ok(event) => {
                    let reaction = subscription(&event).filter(|r| !own || r.for_any_recorder());
                    if let Some(reaction) = reaction {
                        self.react(reaction);
                    }
                }
                // What its own records decided was queued when it appended them.
                Err(_) if own => {}
                Err(error) => {
                    if known {
                        tracing::warn!(%deployment, revision = record.revision, %error, "a record cannot be read; queuing every waiting attempt");
                    }
                    known = false;
                }
            }
        }
        known
    }

    /// The actions to carry out: for attempts, only those decided (each once, and only while
    /// it still waits), unless `everything` is to be queued again. Looking up the decided
    /// attempts, rather than filtering every waiting one, keeps a pass's cost to what changed.
    fn actions(&self, state: &DeploymentState, everything: bool) -> Vec<Action> {
        if everything {
            return actions(state);
        }
        let mut seen = std::collections::HashSet::new();
        let mut decided: Vec<Action> = self
            .attempts
            .iter()
            .filter(|(step, attempt)| seen.insert((step.as_str(), *attempt)))
            .filter_map(|(step, attempt)| attempt_action(state, step, *attempt))
            .collect();
        decided.extend(actions_besides_attempts(state));
        decided
    }
}

/// Moves one deployment on as far as it can go now; returns its state afterwards. `since` says
/// which decisions are new, and so which jobs to queue (see the crate's header).
#[tracing::instrument(name = "orchestrate", level = "info", skip_all, fields(%deployment, %cause))]
pub async fn orchestrate(
    deployment: DeploymentId,
    cause: uuid::Uuid,
    since: Since<'_>,
    ports: &OrchestratorPorts<'_>,
) -> Result<DeploymentState, OrchestratorError> {
    let cause = Cause::new(ACTOR, deployment, cause);
    let refused = |source| OrchestratorError::Refused { deployment, source };
    let work = |source| OrchestratorError::Work { deployment, source };
    let mut decided = Decided::default();
    let mut everything = match since {
        Since::Unknown => true,
        Since::Records(records) => !decided.note_records(deployment, records),
        Since::Appended(events) => {
            decided.note(events);
            false
        }
    };
    loop {
        let now = ports.clock.now();
        let advanced = execute(ports.log, deployment, "", &cause, |_| {
            DeploymentCommand::Advance { now }
        })
        .await?
        .map_err(refused)?;
        decided.note(&advanced.events);
        let mut state = advanced.state;
        // Closing the bastion or purging lets the deployment go on: advance once more.
        let mut again = false;
        if state.looks_at_services() {
            let (observed, moved) = observe_services(deployment, &state, &cause, ports).await?;
            decided.note(&observed.events);
            again |= moved;
            state = observed.state;
        }
        let mut waiting = Vec::new();
        for action in decided.actions(&state, everything) {
            match action {
                Action::RunAttempt {
                    step,
                    attempt,
                    not_before,
                } => {
                    waiting.push(WaitingAttempt {
                        step,
                        attempt,
                        not_before,
                    });
                }
                Action::WakeAt(at) => {
                    if everything || decided.deadlines.contains(&at) {
                        ports
                            .work
                            .wake_at(deployment, at, cause.causation_id)
                            .await
                            .map_err(work)?;
                    }
                }
                Action::RevokeAccess(access) => {
                    again |= revoke(deployment, &state, &access, &cause, ports).await?;
                }
                Action::PurgeSecrets => {
                    // Closing a bastion needs the token the purge forgets.
                    if !revoke_unrecorded(deployment, &state, &cause, ports).await? {
                        continue;
                    }
                    ports.secrets.purge(deployment).await.map_err(work)?;
                    // The deployment's end, which waited for the purge, is the same commit.
                    let commands = [
                        DeploymentCommand::RecordSecretsPurged,
                        DeploymentCommand::Advance {
                            now: ports.clock.now(),
                        },
                    ];
                    execute_all(ports.log, deployment, "", &cause, |_| commands.to_vec())
                        .await?
                        .map_err(refused)?;
                    tracing::debug!(%deployment, "secrets purged");
                    again = true;
                }
            }
        }
        if !waiting.is_empty() {
            ports
                .work
                .run_attempts(deployment, &waiting, cause.causation_id)
                .await
                .map_err(work)?;
        }
        wake_the_interested(deployment, &state, &decided, &cause, ports).await?;
        // Queued once: a later pass of this loop must not queue them again.
        decided = Decided::default();
        everything = false;
        if !again {
            return Ok(state);
        }
    }
}

/// Has the deployment look at the tenant's registry; returns what it recorded, and whether that
/// calls for another advance (a step runs again, or a wait timed out).
async fn observe_services(
    deployment: DeploymentId,
    state: &DeploymentState,
    cause: &Cause,
    ports: &OrchestratorPorts<'_>,
) -> Result<(overture_kit::Executed, bool), OrchestratorError> {
    let refused = |source| OrchestratorError::Refused { deployment, source };
    let work = |source| OrchestratorError::Work { deployment, source };
    let others: Vec<_> = ports
        .services
        .instances(state.tenant_id())
        .await
        .map_err(work)?
        .into_iter()
        .filter(|registered| registered.deployment != deployment)
        .map(|registered| registered.instance)
        .collect();
    let now = ports.clock.now();
    let observed = execute(ports.log, deployment, "", cause, |_| {
        DeploymentCommand::ObserveServices {
            now,
            others: others.clone(),
        }
    })
    .await?
    .map_err(refused)?;
    let moved = observed.events.iter().any(|event| {
        matches!(
            event,
            DeploymentEvent::StepRerunRequested { .. } | DeploymentEvent::StepFailed { .. }
        )
    });
    Ok((observed, moved))
}

/// Wakes the tenant's other deployments that wait for or watch a service whose members the
/// deployment's events changed.
async fn wake_the_interested(
    deployment: DeploymentId,
    state: &DeploymentState,
    decided: &Decided,
    cause: &Cause,
    ports: &OrchestratorPorts<'_>,
) -> Result<(), OrchestratorError> {
    let work = |source| OrchestratorError::Work { deployment, source };
    let mut woken = std::collections::BTreeSet::new();
    for service in &decided.services {
        let interested = ports
            .services
            .interested(state.tenant_id(), service)
            .await
            .map_err(work)?;
        woken.extend(interested.into_iter().filter(|id| *id != deployment));
    }
    for other in woken {
        tracing::debug!(%deployment, %other, "services changed; waking a deployment that needs them");
        ports
            .work
            .wake_at(other, ports.clock.now(), cause.causation_id)
            .await
            .map_err(work)?;
    }
    Ok(())
}

/// Closes the leases the deployment holds that no recorded grant names, at its end; returns
/// whether that is done. A failure is tried again after [`REVOKE_RETRY`], the secrets kept
/// meanwhile, as for a recorded grant.
async fn revoke_unrecorded(
    deployment: DeploymentId,
    state: &DeploymentState,
    cause: &Cause,
    ports: &OrchestratorPorts<'_>,
) -> Result<bool, OrchestratorError> {
    let work = |source| OrchestratorError::Work { deployment, source };
    let Some(cloud) = &state.cloud else {
        // No cloud account, no grant: a deployment holds leases only through its token.
        return Ok(true);
    };
    let recorded = state.bastion_access.as_ref();
    match ports
        .access
        .revoke_unrecorded(deployment, cloud, recorded)
        .await
    {
        Ok(0) => Ok(true),
        Ok(closed) => {
            tracing::info!(%deployment, closed, "closed bastion leases no recorded grant named");
            Ok(true)
        }
        Err(error) => {
            tracing::warn!(%deployment, %error, "could not close the deployment's unrecorded bastion leases; trying again later");
            let later =
                ports.clock.now() + chrono::TimeDelta::from_std(REVOKE_RETRY).unwrap_or_default();
            ports
                .work
                .wake_at(deployment, later, cause.causation_id)
                .await
                .map_err(work)?;
            Ok(false)
        }
    }
}

/// Closes the deployment's lease on the engine's rule on the bastion (deleting the rule if it
/// held the last lease) and records it; returns whether it did. A failure
/// (the cloud down, the token refused) is retried after [`REVOKE_RETRY`] by a durable timer:
/// the secrets stay until the bastion is closed, because closing it needs the token.
async fn revoke(
    deployment: DeploymentId,
    state: &DeploymentState,
    access: &BastionAccess,
    cause: &Cause,
    ports: &OrchestratorPorts<'_>,
) -> Result<bool, OrchestratorError> {
    let refused = |source| OrchestratorError::Refused { deployment, source };
    let work = |source| OrchestratorError::Work { deployment, source };
    let revoked = match &state.cloud {
        Some(cloud) => ports.access.revoke(deployment, cloud, access).await,
        None => Err(WorkError::refused(NoCloudAccount(deployment))),
    };
    let kept_for = match revoked {
        Ok(Revocation::Deleted) => Vec::new(),
        Ok(Revocation::KeptFor(others)) => others,
        Err(error) => {
            tracing::warn!(%deployment, rule = access.rule, %error, "could not close the bastion; trying again later");
            let later =
                ports.clock.now() + chrono::TimeDelta::from_std(REVOKE_RETRY).unwrap_or_default();
            ports
                .work
                .wake_at(deployment, later, cause.causation_id)
                .await
                .map_err(work)?;
            return Ok(false);
        }
    };
    let rule = access.rule.clone();
    execute(ports.log, deployment, "", cause, |_| {
        DeploymentCommand::RecordAccessRevoked {
            rule: rule.clone(),
            kept_for: kept_for.clone(),
        }
    })
    .await?
    .map_err(refused)?;
    tracing::debug!(%deployment, rule = access.rule, "bastion closed");
    Ok(true)
}
