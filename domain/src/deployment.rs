//! The Deployment aggregate: what a deployment may do next, decided from its events alone.
//!
//! [`Deployment::handle`] takes the current state and a command (time arrives inside it) and
//! returns the events to record, or why the command is refused. [`Deployment::apply`] folds an
//! event into the state. [`actions`] reads the state and says what the handlers must carry out
//! (run an attempt, wake at a deadline, purge the secrets); the aggregate itself never acts.

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::TimeDelta;
use overture_events::{
    BlueprintSnapshot, CloudAccount, DeploymentEvent, ErrorClass, HostKeySource, PinnedHostKey,
    ServiceShortfall, StepSpec, Timestamp, TriggeredBy,
};
use serde::{Deserialize, Serialize};

use crate::retry::{self, RetryDecision};
use crate::services::{self, ServiceInstance};
pub use crate::steps::Steps;

/// The aggregate; its state is [`DeploymentState`].
#[derive(Clone, Copy, Debug)]
pub struct Deployment;

/// Where a step stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StepStatus {
    /// Waiting for the steps it needs.
    Pending,
    /// Its needs succeeded; waiting for the services it requires to have enough members.
    Awaiting,
    /// An attempt may start (once its `not_before` has passed).
    Scheduled,
    /// An attempt is running.
    Running,
    /// An attempt failed; another is scheduled after a wait.
    Retrying,
    /// Done.
    Succeeded,
    /// Failed for good.
    Failed,
    /// Given up on because the deployment is failing or cancelled.
    Abandoned,
}

impl StepStatus {
    /// The name used in status output.
    pub const fn as_str(&self) -> &'static str {
        match self {
            StepStatus::Pending => "pending",
            StepStatus::Awaiting => "awaiting",
            StepStatus::Scheduled => "scheduled",
            StepStatus::Running => "running",
            StepStatus::Retrying => "retrying",
            StepStatus::Succeeded => "succeeded",
            StepStatus::Failed => "failed",
            StepStatus::Abandoned => "abandoned",
        }
    }

    /// Whether an attempt is waiting to start.
    pub const fn is_waiting(&self) -> bool {
        matches!(self, StepStatus::Scheduled | StepStatus::Retrying)
    }
}

/// One step's state within the aggregate.
#[derive(Clone, Debug, PartialEq)]
pub struct StepState {
    /// Where it stands.
    pub status: StepStatus,
    /// The current (or last) attempt; 0 before the first.
    pub attempt: u32,
    /// When the waiting attempt may start.
    pub not_before: Option<Timestamp>,
    /// What the successful attempt produced.
    pub outputs: BTreeMap<String, String>,
    /// Until when the running attempt may go unheard from (see [`ATTEMPT_LEASE_MARGIN`]).
    pub lease_until: Option<Timestamp>,
    /// The number of the current run's first attempt: 1, or after a redrive the one after the
    /// step's last attempt. The retry policy counts attempts from it.
    pub first_attempt: u32,
    /// While it awaits services: when it fails as `service-timeout`, and what it waits for.
    pub awaiting: Option<(Timestamp, Vec<ServiceShortfall>)>,
    /// The members of each service its attempts see (`ServicesResolved`).
    pub services: BTreeMap<String, Vec<String>>,
}

/// How much longer than its timeout an attempt's lease lasts: the time its runner needs to kill
/// the sandbox and record the outcome. A running attempt whose lease has not ended is alive as
/// far as anyone can tell, so a second delivery of its job must leave it be.
pub const ATTEMPT_LEASE_MARGIN: TimeDelta = TimeDelta::minutes(1);

/// How an attempt came to be cut short, not by anything the step did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Interruption {
    /// Its lease ended and nobody recorded how it went: its runner is gone.
    LeaseExpired,
    /// The engine that ran it is known to have stopped (`resume` holds every engine's lock).
    EngineStopped,
    /// Its runner lost the job (another took it over) and stopped the attempt.
    RunnerLostJob,
}

impl Interruption {
    /// What the failed attempt's message says.
    pub const fn message(&self) -> &'static str {
        match self {
            Interruption::LeaseExpired => {
                "the attempt was interrupted: its runner was not heard from before its lease ended"
            }
            Interruption::EngineStopped => {
                "the attempt was interrupted: the engine stopped while it ran"
            }
            Interruption::RunnerLostJob => {
                "the attempt was interrupted: its runner lost the job and stopped it"
            }
        }
    }
}

/// How a finished deployment ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every step succeeded.
    Succeeded,
    /// A step failed for good.
    Failed,
    /// A user cancelled it.
    Cancelled,
}

/// The deployment's phase.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Phase {
    /// Nothing recorded yet.
    #[default]
    NotRequested,
    /// Steps are being scheduled and run.
    Running,
    /// A step failed for good; running steps may finish until the deadline (if any).
    Failing {
        /// Why the deployment fails.
        reason: String,
        /// When still-running steps are abandoned.
        deadline: Option<Timestamp>,
    },
    /// A user cancelled it: nothing runs any more; the bastion is closed and the secrets purged
    /// before it ends.
    Cancelling {
        /// Who asked.
        requested_by: String,
        /// Why.
        reason: String,
    },
    /// Ended.
    Finished(Outcome),
}

/// Everything the aggregate knows about one deployment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DeploymentState {
    /// The owning tenant.
    pub tenant: String,
    /// The blueprint, once requested; shared by every clone of the state.
    pub blueprint: Option<Arc<BlueprintSnapshot>>,
    /// Parameter values.
    pub params: BTreeMap<String, String>,
    /// Every step, in blueprint order.
    pub steps: Steps,
    /// The phase.
    pub phase: Phase,
    /// Where the sealed secrets are, if any were sealed.
    pub seal: Option<String>,
    /// Whether the sealed secrets have been deleted.
    pub secrets_purged: bool,
    /// The public half of the deployment's SSH key, if it has one.
    pub ssh_public_key: Option<String>,
    /// The tearing down of the deployment's resources, once a user asked for it.
    pub destroy: Option<Destroy>,
    /// The cloud account the deployment acts for, when it was given a token.
    pub cloud: Option<CloudAccount>,
    /// The trigger and event that started it, when a trigger did.
    pub triggered_by: Option<TriggeredBy>,
    /// The engine's rule on the bastion, while it is open.
    pub bastion_access: Option<BastionAccess>,
    /// The SSH host keys pinned so far, by host as `known_hosts` names it.
    pub host_keys: BTreeMap<String, PinnedHost>,
    /// The service instances the deployment registered and has not deregistered.
    pub registrations: Vec<ServiceInstance>,
}

/// A server's pinned SSH host keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PinnedHost {
    /// The server: its name in the step that made it, or its address.
    pub server: String,
    /// The host as `known_hosts` names it: `host`, or `[host]:port` off port 22.
    pub host: String,
    /// How the keys were learned.
    pub learned: HostKeySource,
    /// The keys.
    pub keys: Vec<PinnedHostKey>,
}

/// The engine's temporary rule on a bastion's security group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BastionAccess {
    /// The rule's id in the cloud.
    pub rule: String,
    /// The bastion's security group.
    pub security_group: String,
    /// The bastion's address.
    pub bastion: String,
    /// The address admitted.
    pub source: String,
    /// The port admitted.
    pub port: u16,
}

/// Where tearing a deployment down stands.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Destroy {
    /// Steps whose resources are still to be destroyed, in the order they will be.
    pub remaining: Vec<String>,
    /// Whether the last try stopped at a failure (asking again carries on).
    pub failed: bool,
}

impl Destroy {
    /// Whether every resource is gone.
    pub fn is_done(&self) -> bool {
        self.remaining.is_empty() && !self.failed
    }
}

/// The step kind whose resources outlive the deployment and are destroyed on request.
pub const DESTROYABLE_KIND: &str = "terraform";

/// What was sealed for a new deployment: references only.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SealedCredentials {
    /// Where the sealed values are kept.
    pub seal: String,
    /// The names of the user's sealed secrets.
    pub secrets: Vec<String>,
    /// The public half of the deployment's SSH key, whose private half is sealed too.
    pub ssh_public_key: Option<String>,
    /// Whether the user's cloud token is sealed too.
    pub token: bool,
}

impl DeploymentState {
    /// The tenant the read models and the service registry key it on: its project's id
    /// ([`crate::tenancy::tenant_of`]). `tenant` stays as recorded, since seals are bound to it.
    pub fn tenant_id(&self) -> &str {
        crate::tenancy::tenant_of(&self.tenant, self.cloud.as_ref())
    }

    /// Whether the deployment has ended.
    pub fn is_finished(&self) -> bool {
        matches!(self.phase, Phase::Finished(_))
    }

    /// The step's state, or the command's error for an unknown step.
    pub fn step(&self, step: &str) -> Result<&StepState, DeploymentError> {
        self.steps
            .get(step)
            .ok_or_else(|| DeploymentError::UnknownStep(step.to_owned()))
    }

    /// Steps with an attempt running now, in blueprint order.
    pub fn running_steps(&self) -> impl Iterator<Item = (&String, &StepState)> {
        self.steps.running()
    }

    /// The blueprint's spec of the step.
    pub fn spec(&self, step: &str) -> Option<&StepSpec> {
        let blueprint = self.blueprint.as_ref()?;
        // A step's place among the states is its place in the blueprint.
        self.steps
            .position(step)
            .and_then(|at| blueprint.steps.get(at))
            .filter(|spec| spec.name == step)
            .or_else(|| blueprint.step(step))
    }

    /// Whether the secrets may go: no step can run any more and the bastion is closed.
    fn may_purge(&self) -> bool {
        (self.work_is_over() || self.is_finished()) && self.bastion_access.is_none()
    }

    /// Whether a step watches services: the deployment then runs it again when they change.
    pub fn watches(&self) -> bool {
        self.steps.watch_services()
    }

    /// Whether the deployment keeps watching the services its steps watch: it has not failed,
    /// been cancelled or destroyed. Its seal is kept while it does, since running a step again
    /// needs its SSH key and the user's token.
    pub fn keeps_watching(&self) -> bool {
        self.watches()
            && self.destroy.is_none()
            && matches!(
                self.phase,
                Phase::Running | Phase::Finished(Outcome::Succeeded)
            )
    }

    /// Whether the deployment looks at the tenant's registry: a step of it waits for services
    /// or is about to be scheduled with their members in view, or it keeps watching.
    pub fn looks_at_services(&self) -> bool {
        if !self.steps.see_services() {
            return false;
        }
        match self.phase {
            Phase::Running => true,
            Phase::Finished(Outcome::Succeeded) => self.keeps_watching(),
            _ => false,
        }
    }

    /// Whether no more step work will happen: everything succeeded, or nothing runs while failing.
    fn work_is_over(&self) -> bool {
        match self.phase {
            Phase::Running => self.steps.all_succeeded(),
            Phase::Failing { .. } | Phase::Cancelling { .. } => {
                self.running_steps().next().is_none()
            }
            Phase::NotRequested | Phase::Finished(_) => false,
        }
    }
}

/// What can be asked of a deployment. Every command that depends on time carries `now`.
// `Request` carries the whole blueprint, once per deployment: not worth a box.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum DeploymentCommand {
    /// Record a new deployment of a validated blueprint.
    Request {
        tenant: String,
        requested_by: String,
        trigger: String,
        source: String,
        blueprint: BlueprintSnapshot,
        blueprint_hash: String,
        params: BTreeMap<String, String>,
        /// The cloud account the user's token is for, when one was given.
        cloud: Option<CloudAccount>,
        /// What was sealed, when there is anything to seal.
        sealed: Option<SealedCredentials>,
        /// The trigger and event that asked, when a trigger did.
        triggered_by: Option<TriggeredBy>,
    },
    /// Move on: schedule steps whose needs succeeded, abandon at a passed deadline, finish.
    /// Steps that see services are left to [`DeploymentCommand::ObserveServices`].
    Advance { now: Timestamp },
    /// Look at the tenant's registry: the instances other deployments registered (this one's
    /// are in its state). Steps whose needs succeeded start once the services they require
    /// have enough members, or wait for them; a wait past its deadline fails the step as
    /// `service-timeout`; a succeeded step whose watched service changed runs again.
    ObserveServices {
        now: Timestamp,
        others: Vec<ServiceInstance>,
    },
    /// The hosts of a running attempt's step answered the check of the service it provides.
    RegisterServices {
        step: String,
        attempt: u32,
        instances: Vec<ServiceInstance>,
    },
    /// A user cancels the deployment: running and waiting attempts are abandoned at once.
    Cancel {
        requested_by: String,
        reason: String,
    },
    /// An attempt is starting in a sandbox.
    StartAttempt {
        step: String,
        attempt: u32,
        sandbox: String,
        now: Timestamp,
    },
    /// An attempt succeeded.
    RecordSuccess {
        step: String,
        attempt: u32,
        outputs: BTreeMap<String, String>,
        duration_ms: u64,
    },
    /// A running attempt was cut short by something other than the step (class
    /// `interrupted`); the retry policy decides what follows.
    InterruptAttempt {
        step: String,
        attempt: u32,
        why: Interruption,
        now: Timestamp,
    },
    /// The queue moved an attempt's job to its dead-letter queue after `receives` deliveries;
    /// the attempt fails as `interrupted` unless it already ended.
    RecordDeadLetter {
        step: String,
        attempt: u32,
        receives: u32,
        now: Timestamp,
    },
    /// An attempt failed; the retry policy decides what follows.
    RecordFailure {
        step: String,
        attempt: u32,
        error_class: ErrorClass,
        exit_code: Option<i32>,
        message: String,
        duration_ms: u64,
        now: Timestamp,
    },
    /// The engine opened the bastion for itself, for a step about to go through it.
    RecordAccessGranted(BastionAccess),
    /// The deployment's lease on the engine's rule on the bastion closed: the rule was deleted,
    /// or kept for the deployments in `kept_for`, which still hold it.
    RecordAccessRevoked {
        rule: String,
        kept_for: Vec<overture_events::DeploymentId>,
    },
    /// The engine learned servers' SSH host keys; hosts already pinned keep their keys.
    PinHostKeys(Vec<PinnedHost>),
    /// The sealed secrets were deleted.
    RecordSecretsPurged,
    /// A user carries a failed deployment on from its failed and abandoned steps; what the
    /// user gave again (secrets, token) is sealed anew.
    Redrive {
        requested_by: String,
        /// What was sealed, when there is anything to seal.
        sealed: Option<SealedCredentials>,
    },
    /// A user asks for the deployment's resources to be destroyed (or to carry on doing so).
    RequestDestroy,
    /// A step's resources were destroyed.
    RecordStepDestroyed { step: String, duration_ms: u64 },
    /// Destroying a step's resources failed.
    RecordDestroyFailure {
        step: String,
        exit_code: Option<i32>,
        message: String,
        duration_ms: u64,
    },
    /// A running attempt's sandbox reaches only these destinations.
    RecordNetworkPolicy {
        step: String,
        attempt: u32,
        allowed: Vec<String>,
    },
}

/// Why a command was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DeploymentError {
    /// `Request` on a deployment that exists.
    #[error("the deployment was already requested")]
    AlreadyRequested,
    /// Any other command before `Request`.
    #[error("no such deployment")]
    NotRequested,
    /// `Request` of a blueprint or parameters the engine could not run (see
    /// [`crate::blueprint::recorded_problems`]): every door checks them first, so this only
    /// guards a door that forgot.
    #[error("the deployment cannot be run as requested:\n{0}")]
    Unrunnable(crate::blueprint::BlueprintError),
    /// The deployment has ended.
    #[error("the deployment has already ended")]
    AlreadyFinished,
    /// The step is not in the blueprint.
    #[error("the blueprint has no step `{0}`")]
    UnknownStep(String),
    /// This attempt is not waiting to start (already started, superseded, or abandoned).
    #[error("attempt {attempt} of step `{step}` is not waiting to start")]
    AttemptNotScheduled { step: String, attempt: u32 },
    /// The attempt's wait has not passed.
    #[error("attempt {attempt} of step `{step}` may not start before {not_before}")]
    NotYetDue {
        step: String,
        attempt: u32,
        not_before: Timestamp,
    },
    /// This attempt is not running, so its outcome cannot be recorded.
    #[error("attempt {attempt} of step `{step}` is not running")]
    AttemptNotRunning { step: String, attempt: u32 },
    /// The attempt's lease has not ended: for all anyone knows, it still runs.
    #[error(
        "attempt {attempt} of step `{step}` may still be running: its lease lasts until {until}"
    )]
    LeaseNotExpired {
        step: String,
        attempt: u32,
        until: Timestamp,
    },
    /// Secrets may be purged only once no step can run any more and the bastion is closed.
    #[error("the secrets cannot be purged while steps may still run or the bastion is open")]
    StepsStillRunning,
    /// The engine already holds a rule on the bastion; steps share it.
    #[error("the bastion is already open for this deployment (rule {0})")]
    AccessAlreadyGranted(String),
    /// The bastion is opened only for a step about to run.
    #[error("no step of the deployment is running, so the bastion is not opened")]
    NoStepRunning,
    /// A deployment is destroyed only once it has ended.
    #[error("the deployment is still running; destroy it once it has ended")]
    StillRunning,
    /// Everything the deployment made is gone already.
    #[error("the deployment has already been destroyed")]
    AlreadyDestroyed,
    /// The step is not the next one to destroy.
    #[error("step `{0}` is not the next one to destroy")]
    NotNextToDestroy(String),
    /// Only a step that provides a service registers instances, and only of that service.
    #[error("step `{step}` does not provide service `{service}`")]
    NotProvided { step: String, service: String },
    /// Only a deployment that has ended is redriven.
    #[error("the deployment is still running; redrive it once it has failed")]
    RedriveWhileRunning,
    /// A deployment that succeeded has nothing to carry on.
    #[error(
        "the deployment succeeded, so nothing is left to redrive; redeploy it to run it again"
    )]
    RedriveSucceeded,
    /// A user ended the deployment on purpose.
    #[error("the deployment was cancelled, so it is not redriven; redeploy it to run it again")]
    RedriveCancelled,
    /// Its resources were torn down (or are being): carrying it on would build on nothing.
    #[error("the deployment's resources were destroyed; redeploy it to run it again")]
    RedriveDestroyed,
}

/// What the handlers must carry out for a deployment, derived from its state alone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Run this attempt once `not_before` has passed.
    RunAttempt {
        step: String,
        attempt: u32,
        not_before: Timestamp,
    },
    /// Advance the deployment again at this instant (a grace period's deadline).
    WakeAt(Timestamp),
    /// Delete the engine's rule on the bastion, then record it.
    RevokeAccess(BastionAccess),
    /// Delete the sealed secrets, then record it.
    PurgeSecrets,
}

/// The actions a deployment's state calls for. Carrying one out twice must be harmless.
///
/// Its cost grows with the number of waiting attempts; a caller that knows which attempts were
/// just decided asks [`attempt_action`] for each and [`actions_besides_attempts`] instead.
pub fn actions(state: &DeploymentState) -> Vec<Action> {
    let mut actions: Vec<Action> = state
        .steps
        .waiting()
        .filter_map(|(name, s)| run_attempt(name, s))
        .collect();
    actions.extend(actions_besides_attempts(state));
    actions
}

/// The attempt's [`Action::RunAttempt`], if that attempt of the step waits to start.
pub fn attempt_action(state: &DeploymentState, step: &str, attempt: u32) -> Option<Action> {
    let (name, s) = state.steps.entry_named(step)?;
    (s.status.is_waiting() && s.attempt == attempt)
        .then(|| run_attempt(name, s))
        .flatten()
}

fn run_attempt(name: &str, s: &StepState) -> Option<Action> {
    s.not_before.map(|not_before| Action::RunAttempt {
        step: name.to_owned(),
        attempt: s.attempt,
        not_before,
    })
}

/// The actions other than running attempts, in the order [`actions`] gives them: waking at the
/// grace period's deadline, closing the bastion, purging the secrets.
pub fn actions_besides_attempts(state: &DeploymentState) -> Vec<Action> {
    let mut actions = Vec::new();
    if let Phase::Failing {
        deadline: Some(deadline),
        ..
    } = state.phase
    {
        if state.running_steps().next().is_some() {
            actions.push(Action::WakeAt(deadline));
        }
    }
    actions.extend(
        state
            .steps
            .awaiting()
            .filter_map(|(_, s)| s.awaiting.as_ref())
            .map(|(deadline, _)| Action::WakeAt(*deadline)),
    );
    // Closing the bastion comes first: it needs the user's token, which the purge deletes.
    if let Some(access) = state
        .bastion_access
        .as_ref()
        .filter(|_| state.work_is_over())
    {
        actions.push(Action::RevokeAccess(access.clone()));
    } else if state.may_purge() && !state.secrets_purged && !state.keeps_watching() {
        actions.push(Action::PurgeSecrets);
    }
    actions
}

impl Deployment {
    /// Decides the events a command leads to, or why it is refused.
    pub fn handle(
        state: &DeploymentState,
        command: DeploymentCommand,
    ) -> Result<Vec<DeploymentEvent>, DeploymentError> {
        use DeploymentCommand as C;
        match (&state.phase, &command) {
            (Phase::NotRequested, C::Request { .. }) => {}
            (_, C::Request { .. }) => return Err(DeploymentError::AlreadyRequested),
            (Phase::NotRequested, _) => return Err(DeploymentError::NotRequested),
            (Phase::Finished(_), C::Advance { .. }) => return Ok(vec![]),
            // Every attempt of an ended deployment has its outcome: a dead letter is no news.
            (Phase::Finished(_), C::RecordDeadLetter { .. }) => return Ok(vec![]),
            // Two handlers may carry out the same closing action (the feed and a timer): the
            // one that comes second finds it done, and the deployment ended, which is no error.
            (Phase::Finished(_), C::RecordSecretsPurged) if state.secrets_purged => {
                return Ok(vec![])
            }
            // A deployment that watched services kept its seal; it goes once it stops watching.
            (Phase::Finished(_), C::RecordSecretsPurged) => {}
            // A succeeded deployment keeps watching the services its steps watch.
            (Phase::Finished(_), C::ObserveServices { .. }) => {}
            (Phase::Finished(_), C::RecordAccessRevoked { .. })
                if state.bastion_access.is_none() =>
            {
                return Ok(vec![])
            }
            // Keys learned by an attempt that ended with the deployment are of no more use.
            (Phase::Finished(_), C::PinHostKeys(_)) => return Ok(vec![]),
            (Phase::Finished(_), C::Redrive { .. }) if state.destroy.is_some() => {
                return Err(DeploymentError::RedriveDestroyed)
            }
            (Phase::Finished(Outcome::Failed), C::Redrive { .. }) => {}
            (Phase::Finished(Outcome::Succeeded), C::Redrive { .. }) => {
                return Err(DeploymentError::RedriveSucceeded)
            }
            (Phase::Finished(Outcome::Cancelled), C::Redrive { .. }) => {
                return Err(DeploymentError::RedriveCancelled)
            }
            (_, C::Redrive { .. }) => return Err(DeploymentError::RedriveWhileRunning),
            (
                Phase::Finished(_),
                C::RequestDestroy | C::RecordStepDestroyed { .. } | C::RecordDestroyFailure { .. },
            ) => {}
            (
                _,
                C::RequestDestroy | C::RecordStepDestroyed { .. } | C::RecordDestroyFailure { .. },
            ) => return Err(DeploymentError::StillRunning),
            (Phase::Finished(_), _) => return Err(DeploymentError::AlreadyFinished),
            _ => {}
        }
        match command {
            C::Request {
                tenant,
                requested_by,
                trigger,
                source,
                blueprint,
                blueprint_hash,
                params,
                cloud,
                sealed,
                triggered_by,
            } => {
                let mut problems = crate::blueprint::recorded_problems(&blueprint);
                problems.extend(params.iter().filter_map(|(name, value)| {
                    Some(crate::blueprint::BlueprintProblem {
                        field: format!("params.{name}"),
                        problem: format!("the value {}", crate::inputs::nul_problem(value)?),
                    })
                }));
                if !problems.is_empty() {
                    return Err(DeploymentError::Unrunnable(
                        crate::blueprint::BlueprintError(problems),
                    ));
                }
                let requested = DeploymentEvent::DeploymentRequested {
                    tenant,
                    requested_by,
                    trigger,
                    source,
                    blueprint,
                    blueprint_hash,
                    params,
                    cloud,
                    triggered_by,
                };
                let sealed = sealed.map(credentials_sealed);
                Ok(std::iter::once(requested).chain(sealed).collect())
            }
            C::Advance { now } => Ok(advance(state, now)),
            C::ObserveServices { now, others } => Ok(observe_services(state, now, &others)),
            C::RegisterServices {
                step,
                attempt,
                instances,
            } => register_services(state, step, attempt, instances),
            C::Cancel {
                requested_by,
                reason,
            } => Ok(cancel(state, requested_by, reason)),
            C::StartAttempt {
                step,
                attempt,
                sandbox,
                now,
            } => start(state, step, attempt, sandbox, now),
            C::RecordSuccess {
                step,
                attempt,
                outputs,
                duration_ms,
            } => {
                require_running(state, &step, attempt)?;
                Ok(vec![DeploymentEvent::StepSucceeded {
                    step,
                    attempt,
                    outputs,
                    duration_ms,
                }])
            }
            C::InterruptAttempt {
                step,
                attempt,
                why,
                now,
            } => {
                require_running(state, &step, attempt)?;
                let lease = state.step(&step)?.lease_until;
                if let (Interruption::LeaseExpired, Some(until)) = (why, lease) {
                    if now < until {
                        return Err(DeploymentError::LeaseNotExpired {
                            step,
                            attempt,
                            until,
                        });
                    }
                }
                let class = ErrorClass::Interrupted;
                let failed = DeploymentEvent::StepAttemptFailed {
                    step: step.clone(),
                    attempt,
                    error_class: class,
                    exit_code: None,
                    message: why.message().to_owned(),
                    duration_ms: 0,
                };
                Ok(std::iter::once(failed)
                    .chain(after_failure(state, &step, attempt, class, now))
                    .collect())
            }
            C::RecordDeadLetter {
                step,
                attempt,
                receives,
                now,
            } => dead_lettered(state, step, attempt, receives, now),
            C::RecordFailure {
                step,
                attempt,
                error_class,
                exit_code,
                message,
                duration_ms,
                now,
            } => {
                require_running(state, &step, attempt)?;
                let failed = DeploymentEvent::StepAttemptFailed {
                    step: step.clone(),
                    attempt,
                    error_class,
                    exit_code,
                    message,
                    duration_ms,
                };
                Ok(std::iter::once(failed)
                    .chain(after_failure(state, &step, attempt, error_class, now))
                    .collect())
            }
            C::RecordNetworkPolicy {
                step,
                attempt,
                allowed,
            } => {
                require_running(state, &step, attempt)?;
                Ok(vec![DeploymentEvent::StepNetworkPolicyApplied {
                    step,
                    attempt,
                    allowed,
                }])
            }
            C::RecordAccessGranted(access) => {
                if let Some(open) = &state.bastion_access {
                    return Err(DeploymentError::AccessAlreadyGranted(open.rule.clone()));
                }
                // An attempt abandoned while it opened the bastion still records its rule, so
                // that the rule is closed with the others; only a deployment still running
                // refuses a rule no step needs.
                let late = matches!(
                    state.phase,
                    Phase::Failing { .. } | Phase::Cancelling { .. }
                ) && !state.secrets_purged;
                if state.running_steps().next().is_none() && !late {
                    return Err(DeploymentError::NoStepRunning);
                }
                Ok(vec![DeploymentEvent::BastionAccessGranted {
                    rule: access.rule,
                    security_group: access.security_group,
                    bastion: access.bastion,
                    source: access.source,
                    port: access.port,
                }])
            }
            C::RecordAccessRevoked { rule, kept_for } => Ok(state
                .bastion_access
                .as_ref()
                .filter(|open| open.rule == rule)
                .map(|_| DeploymentEvent::BastionAccessRevoked { rule, kept_for })
                .into_iter()
                .collect()),
            C::PinHostKeys(pins) => Ok(pin_host_keys(state, pins)),
            C::RecordSecretsPurged => {
                if state.secrets_purged {
                    Ok(vec![])
                } else if state.may_purge() && !state.keeps_watching() {
                    Ok(vec![DeploymentEvent::SecretsPurged {}])
                } else {
                    Err(DeploymentError::StepsStillRunning)
                }
            }
            C::RequestDestroy => request_destroy(state),
            C::Redrive {
                requested_by,
                sealed,
            } => Ok(redrive(state, requested_by, sealed)),
            C::RecordStepDestroyed { step, duration_ms } => {
                let remaining = next_to_destroy(state, &step)?;
                let mut events = vec![DeploymentEvent::StepDestroyed { step, duration_ms }];
                if remaining.len() == 1 {
                    events.push(DeploymentEvent::DeploymentDestroyed {});
                }
                Ok(events)
            }
            C::RecordDestroyFailure {
                step,
                exit_code,
                message,
                duration_ms,
            } => {
                next_to_destroy(state, &step)?;
                Ok(vec![DeploymentEvent::StepDestroyFailed {
                    step,
                    exit_code,
                    message,
                    duration_ms,
                }])
            }
        }
    }

    /// Folds one event into the state.
    pub fn apply(mut state: DeploymentState, event: DeploymentEvent) -> DeploymentState {
        use DeploymentEvent as E;
        match event {
            E::DeploymentRequested {
                tenant,
                blueprint,
                params,
                cloud,
                triggered_by,
                ..
            } => {
                state.cloud = cloud;
                state.triggered_by = triggered_by;
                let fresh = StepState {
                    status: StepStatus::Pending,
                    attempt: 0,
                    not_before: None,
                    outputs: BTreeMap::new(),
                    lease_until: None,
                    first_attempt: 1,
                    awaiting: None,
                    services: BTreeMap::new(),
                };
                state.steps = Steps::new(&blueprint, &fresh);
                state.tenant = tenant;
                state.blueprint = Some(Arc::new(blueprint));
                state.params = params;
                state.phase = Phase::Running;
            }
            E::CredentialsSealed {
                seal,
                ssh_public_key,
                ..
            } => {
                state.seal = Some(seal);
                state.ssh_public_key = ssh_public_key;
            }
            E::BastionAccessGranted {
                rule,
                security_group,
                bastion,
                source,
                port,
            } => {
                state.bastion_access = Some(BastionAccess {
                    rule,
                    security_group,
                    bastion,
                    source,
                    port,
                })
            }
            E::BastionAccessRevoked { .. } => state.bastion_access = None,
            E::HostKeysPinned {
                server,
                host,
                learned,
                keys,
            } => {
                state.host_keys.insert(
                    host.clone(),
                    PinnedHost {
                        server,
                        host,
                        learned,
                        keys,
                    },
                );
            }
            E::StepScheduled {
                step,
                attempt,
                not_before,
            }
            | E::StepRetryScheduled {
                step,
                next_attempt: attempt,
                not_before,
                ..
            } => {
                // The run's first attempt is scheduled; any later one is a retry.
                let retry = state
                    .steps
                    .get(&step)
                    .is_some_and(|s| attempt > s.first_attempt);
                state.steps.update(&step, |s| {
                    s.status = if retry {
                        StepStatus::Retrying
                    } else {
                        StepStatus::Scheduled
                    };
                    s.attempt = attempt;
                    s.not_before = Some(not_before);
                    s.awaiting = None;
                });
            }
            E::StepAwaitingServices {
                step,
                waiting_for,
                deadline,
            } => state.steps.update(&step, |s| {
                s.status = StepStatus::Awaiting;
                s.awaiting = Some((deadline, waiting_for));
            }),
            E::ServicesResolved { step, services } => {
                state.steps.update(&step, |s| s.services = services)
            }
            E::ServiceRegistered {
                service,
                step,
                host,
                address,
                port,
            } => {
                let instance = ServiceInstance {
                    service,
                    step,
                    host,
                    address,
                    port,
                };
                if !state.registrations.contains(&instance) {
                    state.registrations.push(instance);
                }
            }
            E::ServiceDeregistered {
                service,
                address,
                port,
                ..
            } => state.registrations.retain(|instance| {
                !(instance.service == service
                    && instance.address == address
                    && instance.port == port)
            }),
            E::StepRerunRequested { step, .. } => {
                state.steps.update(&step, |s| {
                    s.status = StepStatus::Pending;
                    s.first_attempt = s.attempt.saturating_add(1);
                    s.not_before = None;
                    s.lease_until = None;
                });
                if state.phase == Phase::Finished(Outcome::Succeeded) {
                    state.phase = Phase::Running;
                }
            }
            E::StepStarted {
                step, lease_until, ..
            } => state.steps.update(&step, |s| {
                s.status = StepStatus::Running;
                s.not_before = None;
                s.lease_until = lease_until;
            }),
            E::StepSucceeded { step, outputs, .. } => state.steps.update(&step, |s| {
                s.status = StepStatus::Succeeded;
                s.outputs = outputs;
            }),
            E::StepAttemptFailed { .. } | E::StepJobDeadLettered { .. } => {}
            E::StepFailed {
                step,
                attempts,
                error_class,
            } => {
                let awaited = state
                    .steps
                    .get(&step)
                    .and_then(|s| s.awaiting.as_ref())
                    .map(|(_, waiting_for)| waiting_for.clone());
                state.steps.update(&step, |s| {
                    s.status = StepStatus::Failed;
                    s.not_before = None;
                    s.awaiting = None;
                });
                if state.phase == Phase::Running {
                    let reason = match (error_class, awaited) {
                        (ErrorClass::ServiceTimeout, Some(waiting_for)) => format!(
                            "step `{step}` timed out waiting for {} ({error_class})",
                            services::shortfalls_text(&waiting_for)
                        ),
                        _ => format!(
                            "step `{step}` failed after {attempts} attempt(s) ({error_class})"
                        ),
                    };
                    state.phase = Phase::Failing {
                        reason,
                        deadline: None,
                    };
                }
            }
            E::FailureGracePeriodStarted { deadline, .. } => {
                if let Phase::Failing { deadline: slot, .. } = &mut state.phase {
                    *slot = Some(deadline);
                }
            }
            E::StepAbandoned { step, .. } => state.steps.update(&step, |s| {
                s.status = StepStatus::Abandoned;
                s.not_before = None;
                s.awaiting = None;
            }),
            E::SecretsPurged {} => state.secrets_purged = true,
            E::DeploymentSucceeded {} => state.phase = Phase::Finished(Outcome::Succeeded),
            E::DeploymentFailed { .. } => state.phase = Phase::Finished(Outcome::Failed),
            E::CancellationRequested {
                requested_by,
                reason,
            } => {
                state.phase = Phase::Cancelling {
                    requested_by,
                    reason,
                }
            }
            E::DeploymentCancelled { .. } => state.phase = Phase::Finished(Outcome::Cancelled),
            E::DestroyRequested { steps } => {
                state.destroy = Some(Destroy {
                    remaining: steps,
                    failed: false,
                })
            }
            E::StepDestroyed { step, .. } => {
                if let Some(destroy) = &mut state.destroy {
                    destroy.remaining.retain(|s| *s != step);
                }
            }
            E::StepDestroyFailed { .. } => {
                if let Some(destroy) = &mut state.destroy {
                    destroy.failed = true;
                }
            }
            E::DeploymentDestroyed {} => {
                state.destroy = Some(Destroy::default());
            }
            E::DeploymentRedriven { steps, .. } => {
                for name in &steps {
                    state.steps.update(name, |s| {
                        s.status = StepStatus::Pending;
                        s.first_attempt = s.attempt.saturating_add(1);
                        s.not_before = None;
                        s.lease_until = None;
                        s.outputs.clear();
                    });
                }
                // The last run purged its seal; what this run needs is sealed anew, if anything.
                state.seal = None;
                state.ssh_public_key = None;
                state.secrets_purged = false;
                state.phase = Phase::Running;
            }
            // For the audit trail only.
            E::StepNetworkPolicyApplied { .. } => {}
        }
        state
    }

    /// Folds a whole history into a state.
    pub fn replay(events: impl IntoIterator<Item = DeploymentEvent>) -> DeploymentState {
        events
            .into_iter()
            .fold(DeploymentState::default(), Self::apply)
    }
}

/// One `HostKeysPinned` per host not pinned yet: a pin is never replaced, so a server that
/// later offers other keys is refused rather than learned again.
fn pin_host_keys(state: &DeploymentState, pins: Vec<PinnedHost>) -> Vec<DeploymentEvent> {
    let mut seen: Vec<String> = Vec::new();
    pins.into_iter()
        .filter(|pin| !pin.keys.is_empty())
        .filter(|pin| !state.host_keys.contains_key(&pin.host))
        .filter(|pin| {
            let first = !seen.contains(&pin.host);
            seen.push(pin.host.clone());
            first
        })
        .map(|pin| DeploymentEvent::HostKeysPinned {
            server: pin.server,
            host: pin.host,
            learned: pin.learned,
            keys: pin.keys,
        })
        .collect()
}

fn advance(state: &DeploymentState, now: Timestamp) -> Vec<DeploymentEvent> {
    match &state.phase {
        Phase::Running => {
            if state.work_is_over() {
                return ending(state, DeploymentEvent::DeploymentSucceeded {});
            }
            // Pending steps whose needs all succeeded, kept up to date as events are applied.
            state
                .steps
                .ready(false)
                .map(|(name, s)| DeploymentEvent::StepScheduled {
                    step: name.clone(),
                    attempt: s.first_attempt,
                    not_before: now,
                })
                .collect()
        }
        Phase::Failing { reason, deadline } => {
            let mut events: Vec<DeploymentEvent> = match deadline {
                Some(deadline) if now >= *deadline => state
                    .running_steps()
                    .map(|(name, s)| DeploymentEvent::StepAbandoned {
                        step: name.clone(),
                        attempt: s.attempt,
                        reason: "still running when the failure grace period ended".into(),
                    })
                    .collect(),
                _ => vec![],
            };
            let nothing_runs = !events.is_empty() || state.running_steps().next().is_none();
            if nothing_runs {
                events.extend(ending(
                    state,
                    DeploymentEvent::DeploymentFailed {
                        reason: reason.clone(),
                    },
                ));
            }
            events
        }
        Phase::Cancelling {
            requested_by,
            reason,
        } => {
            if state.work_is_over() {
                ending(
                    state,
                    DeploymentEvent::DeploymentCancelled {
                        reason: reason.clone(),
                        requested_by: requested_by.clone(),
                    },
                )
            } else {
                vec![]
            }
        }
        Phase::NotRequested | Phase::Finished(_) => vec![],
    }
}

/// The deployment's `end`, once its work is over: after its secrets are purged. A deployment
/// that sealed nothing, and so opened no bastion, has nothing to purge: its purge is recorded
/// with its end, in the commit that ends its work, instead of in a commit of its own after the
/// orchestrator has deleted nothing.
fn ending(state: &DeploymentState, end: DeploymentEvent) -> Vec<DeploymentEvent> {
    let watching = matches!(end, DeploymentEvent::DeploymentSucceeded {})
        && state.keeps_watching()
        && state.seal.is_some();
    if state.secrets_purged || (watching && state.bastion_access.is_none()) {
        vec![end]
    } else if state.seal.is_none() && state.bastion_access.is_none() {
        vec![DeploymentEvent::SecretsPurged {}, end]
    } else {
        vec![]
    }
}

/// The events of a look at the tenant's registry (see [`DeploymentCommand::ObserveServices`]).
/// At most one wait times out per look: its failure abandons the other waits.
fn observe_services(
    state: &DeploymentState,
    now: Timestamp,
    others: &[ServiceInstance],
) -> Vec<DeploymentEvent> {
    if !state.looks_at_services() {
        return vec![];
    }
    let members = services::members(state.registrations.iter().chain(others));
    let mut events = Vec::new();
    if state.phase == Phase::Running {
        let deciding = state
            .steps
            .ready(true)
            .chain(state.steps.awaiting())
            .filter_map(|(name, s)| Some((name, s, state.spec(name)?)));
        for (name, s, spec) in deciding {
            let waiting_for = services::shortfalls(&spec.requires, &members);
            if waiting_for.is_empty() {
                events.push(DeploymentEvent::ServicesResolved {
                    step: name.clone(),
                    services: services::resolved(spec, &members),
                });
                events.push(DeploymentEvent::StepScheduled {
                    step: name.clone(),
                    attempt: s.first_attempt,
                    not_before: now,
                });
                continue;
            }
            match &s.awaiting {
                None => {
                    let wait_ms = spec.requires.iter().map(|need| need.timeout_ms).max();
                    events.push(DeploymentEvent::StepAwaitingServices {
                        step: name.clone(),
                        waiting_for,
                        deadline: later(now, wait_ms.unwrap_or(0)),
                    });
                }
                Some((deadline, before)) if now >= *deadline => {
                    // The failure's reason counts what is registered now, not when the wait
                    // began: what it still waits for is recorded again if that changed.
                    if *before != waiting_for {
                        events.push(DeploymentEvent::StepAwaitingServices {
                            step: name.clone(),
                            waiting_for,
                            deadline: *deadline,
                        });
                    }
                    events.extend(after_failure(
                        state,
                        name,
                        s.attempt,
                        ErrorClass::ServiceTimeout,
                        now,
                    ));
                    return events;
                }
                Some(_) => {}
            }
        }
    }
    for (name, s) in state.steps.iter() {
        if s.status != StepStatus::Succeeded {
            continue;
        }
        let Some(spec) = state.spec(name) else {
            continue;
        };
        let changed = spec.watch.iter().find_map(|service| {
            let to = services::members_of(&members, service);
            let from = s.services.get(service).cloned().unwrap_or_default();
            (from != to).then(|| (service.clone(), from, to))
        });
        if let Some((service, from, to)) = changed {
            events.push(DeploymentEvent::StepRerunRequested {
                step: name.clone(),
                service,
                from,
                to,
            });
        }
    }
    events
}

/// The events of a providing step's hosts answering its service's check: one registration per
/// instance not registered yet.
fn register_services(
    state: &DeploymentState,
    step: String,
    attempt: u32,
    instances: Vec<ServiceInstance>,
) -> Result<Vec<DeploymentEvent>, DeploymentError> {
    require_running(state, &step, attempt)?;
    let provided = state
        .spec(&step)
        .and_then(|spec| spec.provides.as_ref())
        .map(|provides| provides.service.as_str());
    let mut events = Vec::new();
    let mut seen: Vec<&ServiceInstance> = Vec::new();
    for instance in &instances {
        if provided != Some(instance.service.as_str()) || instance.step != step {
            return Err(DeploymentError::NotProvided {
                step,
                service: instance.service.clone(),
            });
        }
        if state.registrations.contains(instance) || seen.contains(&instance) {
            continue;
        }
        seen.push(instance);
        events.push(DeploymentEvent::ServiceRegistered {
            service: instance.service.clone(),
            step: instance.step.clone(),
            host: instance.host.clone(),
            address: instance.address.clone(),
            port: instance.port,
        });
    }
    Ok(events)
}

/// The events of a redrive: every step that did not succeed runs again, and what the user gave
/// again is sealed. Refusals are decided in [`Deployment::handle`].
fn redrive(
    state: &DeploymentState,
    requested_by: String,
    sealed: Option<SealedCredentials>,
) -> Vec<DeploymentEvent> {
    let steps = state
        .steps
        .iter()
        .filter(|(_, s)| s.status != StepStatus::Succeeded)
        .map(|(name, _)| name.clone())
        .collect();
    std::iter::once(DeploymentEvent::DeploymentRedriven {
        requested_by,
        steps,
    })
    .chain(sealed.map(credentials_sealed))
    .collect()
}

/// The event naming what was sealed: references, never values.
fn credentials_sealed(sealed: SealedCredentials) -> DeploymentEvent {
    DeploymentEvent::CredentialsSealed {
        seal: sealed.seal,
        secrets: sealed.secrets,
        ssh_public_key: sealed.ssh_public_key,
        token: sealed.token,
    }
}

/// The events of a user's cancel: every running or waiting attempt is abandoned at once, with
/// no grace period (the user asked). Cancelling again changes nothing.
fn cancel(state: &DeploymentState, requested_by: String, reason: String) -> Vec<DeploymentEvent> {
    if matches!(state.phase, Phase::Cancelling { .. }) {
        return vec![];
    }
    let why = format!("cancelled by {requested_by}");
    let abandoned = state
        .steps
        .waiting_or_running()
        .into_iter()
        .map(|(name, s)| DeploymentEvent::StepAbandoned {
            step: name.clone(),
            attempt: s.attempt,
            reason: why.clone(),
        });
    std::iter::once(DeploymentEvent::CancellationRequested {
        requested_by,
        reason,
    })
    .chain(abandoned)
    .collect()
}

/// Starts tearing a finished deployment down, or carries on after a failure.
fn request_destroy(state: &DeploymentState) -> Result<Vec<DeploymentEvent>, DeploymentError> {
    match &state.destroy {
        Some(destroy) if destroy.is_done() => Err(DeploymentError::AlreadyDestroyed),
        // Under way and not stopped: carrying on needs no new event.
        Some(destroy) if !destroy.failed => Ok(vec![]),
        Some(destroy) => Ok(vec![DeploymentEvent::DestroyRequested {
            steps: destroy.remaining.clone(),
        }]),
        None => {
            let steps = destroyable_steps(state);
            let nothing_to_destroy = steps.is_empty();
            // Its instances leave the registry before anything is torn down, so that whoever
            // watches them stops sending them work first.
            let mut events: Vec<DeploymentEvent> = state
                .registrations
                .iter()
                .map(|instance| DeploymentEvent::ServiceDeregistered {
                    service: instance.service.clone(),
                    step: instance.step.clone(),
                    host: instance.host.clone(),
                    address: instance.address.clone(),
                    port: instance.port,
                    reason: "its deployment is being destroyed".into(),
                })
                .collect();
            events.push(DeploymentEvent::DestroyRequested { steps });
            if nothing_to_destroy {
                events.push(DeploymentEvent::DeploymentDestroyed {});
            }
            Ok(events)
        }
    }
}

/// The steps whose resources may exist: destroyable steps that started at least once, the
/// steps that depend on others first.
fn destroyable_steps(state: &DeploymentState) -> Vec<String> {
    let Some(blueprint) = &state.blueprint else {
        return vec![];
    };
    let mut order = crate::graph::topological_order(&blueprint.steps);
    order.reverse();
    order.retain(|name| {
        state
            .spec(name)
            .is_some_and(|spec| spec.kind == DESTROYABLE_KIND)
            && state.steps.get(name).is_some_and(|s| s.attempt > 0)
    });
    order
}

/// The steps still to destroy, if `step` is the one to destroy now.
fn next_to_destroy<'a>(
    state: &'a DeploymentState,
    step: &str,
) -> Result<&'a [String], DeploymentError> {
    match &state.destroy {
        Some(destroy) if destroy.is_done() => Err(DeploymentError::AlreadyDestroyed),
        Some(destroy)
            if !destroy.failed && destroy.remaining.first().is_some_and(|s| s == step) =>
        {
            Ok(&destroy.remaining)
        }
        _ => Err(DeploymentError::NotNextToDestroy(step.to_owned())),
    }
}

fn start(
    state: &DeploymentState,
    step: String,
    attempt: u32,
    sandbox: String,
    now: Timestamp,
) -> Result<Vec<DeploymentEvent>, DeploymentError> {
    let current = state.step(&step)?;
    let waiting = current.status.is_waiting() && current.attempt == attempt;
    if !waiting || state.phase != Phase::Running {
        return Err(DeploymentError::AttemptNotScheduled { step, attempt });
    }
    if let Some(not_before) = current.not_before.filter(|t| now < *t) {
        return Err(DeploymentError::NotYetDue {
            step,
            attempt,
            not_before,
        });
    }
    let timeout = state.spec(&step).map_or(0, |spec| spec.timeout_ms);
    // A timeout beyond what an instant can hold leaves the attempt without a lease.
    let lease_until = i64::try_from(timeout)
        .ok()
        .and_then(TimeDelta::try_milliseconds)
        .and_then(|timeout| timeout.checked_add(&ATTEMPT_LEASE_MARGIN))
        .and_then(|lease| now.checked_add_signed(lease));
    Ok(vec![DeploymentEvent::StepStarted {
        step,
        attempt,
        sandbox,
        lease_until,
    }])
}

fn require_running(
    state: &DeploymentState,
    step: &str,
    attempt: u32,
) -> Result<(), DeploymentError> {
    let current = state.step(step)?;
    if current.status == StepStatus::Running && current.attempt == attempt {
        Ok(())
    } else {
        Err(DeploymentError::AttemptNotRunning {
            step: step.to_owned(),
            attempt,
        })
    }
}

/// The events of an attempt whose job the queue gave up on.
///
/// The attempt fails as `interrupted`, and the step's rule for that class decides what follows
/// (by default two more attempts), rather than the step failing outright: a dead letter says
/// that the engine could not carry the attempt through (its runners crashed or timed out on
/// it, the log or the sandbox were unavailable at every delivery), not that the step did
/// anything wrong, which is what `interrupted` means. A step that must never run twice opts
/// out as for any interruption (`interrupted: { times: 0 }`), and the work stays bounded: at
/// most `times + 1` attempts of `maxReceiveCount` deliveries each.
///
/// A running attempt whose lease has not ended may still be running (its runner holds the job
/// and will record the outcome), so the dead letter waits for the lease, as an interruption
/// does. An attempt that ended or was superseded already has its outcome: nothing is recorded.
fn dead_lettered(
    state: &DeploymentState,
    step: String,
    attempt: u32,
    receives: u32,
    now: Timestamp,
) -> Result<Vec<DeploymentEvent>, DeploymentError> {
    let current = state.step(&step)?;
    let running = current.status == StepStatus::Running;
    if current.attempt != attempt || !(running || current.status.is_waiting()) {
        return Ok(vec![]);
    }
    if let Some(until) = current.lease_until.filter(|until| running && now < *until) {
        return Err(DeploymentError::LeaseNotExpired {
            step,
            attempt,
            until,
        });
    }
    let class = ErrorClass::Interrupted;
    let events = vec![
        DeploymentEvent::StepJobDeadLettered {
            step: step.clone(),
            attempt,
            receives,
        },
        DeploymentEvent::StepAttemptFailed {
            step: step.clone(),
            attempt,
            error_class: class,
            exit_code: None,
            message: format!(
                "the attempt was interrupted: its job was delivered {receives} times without an \
                 outcome and moved to the dead-letter queue"
            ),
            duration_ms: 0,
        },
    ];
    Ok(events
        .into_iter()
        .chain(after_failure(state, &step, attempt, class, now))
        .collect())
}

/// The events after an attempt's failure: a retry, or the step's failure and its consequences.
fn after_failure(
    state: &DeploymentState,
    step: &str,
    attempt: u32,
    class: ErrorClass,
    now: Timestamp,
) -> Vec<DeploymentEvent> {
    let spec = state.spec(step);
    // The policy counts the attempts of this run: a redriven step gets its retries again.
    let first = state.steps.get(step).map_or(1, |s| s.first_attempt);
    let of_this_run = attempt.saturating_sub(first).saturating_add(1);
    let decision = match (spec, &state.phase) {
        (Some(spec), Phase::Running) => retry::decide(spec, class, of_this_run),
        // A deployment that is already failing starts no new attempts.
        _ => RetryDecision::GiveUp,
    };
    // An attempt number past the last one there can be is no retry.
    let next_attempt = attempt.checked_add(1);
    if let (RetryDecision::Retry { wait, .. }, Some(next_attempt)) = (decision, next_attempt) {
        let delay_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
        return vec![DeploymentEvent::StepRetryScheduled {
            step: step.to_owned(),
            attempt,
            next_attempt,
            delay_ms,
            not_before: later(now, delay_ms),
        }];
    }
    let mut events = vec![DeploymentEvent::StepFailed {
        step: step.to_owned(),
        attempts: attempt,
        error_class: class,
    }];
    if state.phase != Phase::Running {
        return events;
    }
    // The first failure for good: waiting attempts never start; running ones get the grace period.
    for (name, s) in state
        .steps
        .waiting()
        .chain(state.steps.awaiting())
        .filter(|(name, _)| name.as_str() != step)
    {
        events.push(DeploymentEvent::StepAbandoned {
            step: name.clone(),
            attempt: s.attempt,
            reason: format!("not started because step `{step}` failed"),
        });
    }
    let still_running = state.running_steps().any(|(name, _)| name.as_str() != step);
    if still_running {
        let grace_ms = state.blueprint.as_ref().map_or(0, |b| b.grace_ms);
        events.push(DeploymentEvent::FailureGracePeriodStarted {
            failed_step: step.to_owned(),
            deadline: later(now, grace_ms),
        });
    }
    events
}

/// The instant `ms` after `now`, never panicking on what was recorded. A wait longer than a
/// blueprint may set ([`MAX_DURATION_MS`](crate::duration::MAX_DURATION_MS): recorded before the
/// bound, or by a door that did not check) waits that long; an instant past the last one a
/// timestamp holds is the last one.
pub fn later(now: Timestamp, ms: u64) -> Timestamp {
    let ms = ms.min(crate::duration::MAX_DURATION_MS);
    i64::try_from(ms)
        .ok()
        .and_then(TimeDelta::try_milliseconds)
        .and_then(|wait| now.checked_add_signed(wait))
        .unwrap_or(Timestamp::MAX_UTC)
}

#[cfg(feature = "esrs")]
impl esrs::Aggregate for Deployment {
    const NAME: &'static str = "deployment";
    type State = DeploymentState;
    type Command = DeploymentCommand;
    type Event = DeploymentEvent;
    type Error = DeploymentError;

    fn handle_command(
        state: &Self::State,
        command: Self::Command,
    ) -> Result<Vec<Self::Event>, Self::Error> {
        Deployment::handle(state, command)
    }

    fn apply_event(state: Self::State, event: Self::Event) -> Self::State {
        Deployment::apply(state, event)
    }
}
