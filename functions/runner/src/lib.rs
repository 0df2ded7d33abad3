//! The runner function: run one attempt of one step, in a fresh sandbox, and record how it went.
//!
//! [`run_attempt`] takes a [`RunAttempt`] job. It records `StepStarted`, has the step's kind
//! prepare the sandbox command (see [`step`] and one module per kind), runs it through
//! [`RunSandboxed`] with its output copied, masked, to the attempt's log ([`logs`]), has the kind
//! judge the exit, and records `StepSucceeded` or `StepAttemptFailed` (the aggregate then applies
//! the retry policy). A job the sandbox refuses to run as given ([`sandbox`]) is a failed
//! attempt too; only the sandbox's own failure leaves the job to be retried after its lease.
//! The files a step takes are fetched from the payload store by the hash the deployment
//! recorded ([`files`]); one that cannot be had as recorded fails the attempt, while an
//! unavailable store leaves the job to be retried.
//! While the attempt runs it keeps its job's lease alive and watches the log: once the attempt
//! is abandoned it kills the sandbox. A job that finds its attempt already running was held by
//! an engine that died; that attempt is recorded as `interrupted` and the retry policy decides.
//! On AWS, [`on_job_messages`] ([`sqs`]) is the trigger: it reads a batch of the step queue's
//! SQS messages into jobs, runs each with its message's visibility as the lease, and reports the
//! messages SQS must keep (partial batch failures).
//! What every sandbox does with a step's working directory (the output's tail, the outputs file,
//! the collected files) is in [`workspace`], shared by bubblewrap and the Fargate step task.

pub mod ansible;
pub mod destroy;
pub mod files;
pub mod host_keys;
pub mod http;
pub mod limits;
pub mod logs;
pub mod network;
pub mod sandbox;
pub mod script;
pub mod servers;
pub mod service_check;
pub mod sqs;
pub mod step;
pub mod terraform;
#[cfg(test)]
pub(crate) mod testing;

#[cfg(feature = "fakes")]
pub mod fakes;
pub mod wait_ssh;
pub mod workspace;

use std::future::Future;
use std::io::Write as _;
use std::pin::Pin;
use std::time::Duration;

use async_trait::async_trait;
use overture_domain::deployment::BastionAccess;
use overture_domain::deployment::Interruption;
use overture_domain::secret::{Masker, SecretString, SecretValues};
use overture_domain::{DeploymentCommand, DeploymentError, DeploymentState, StepStatus};
use overture_events::{CloudAccount, DeploymentId, ErrorClass, StepSpec, Timestamp};
use overture_kit::payload::StorePayloads;
use overture_kit::{execute, execute_all, Cause, Clock, DeploymentLog, LogError};
use step::{StepInput, Verdict};

/// How much of the host's loopback steps may reach, as [`RunnerPorts::loopback`] takes it.
pub use overture_domain::egress::LoopbackEgress;
/// The job: run this attempt of this step (its body on the queue is in `overture_events`).
pub use overture_events::job::RunAttempt;
pub use sandbox::{OutputsFile, RunError, Unrunnable};
pub use sqs::{on_job_messages, ChangeVisibility, MessageError};

/// The name the runner appends events under.
pub const ACTOR: &str = "runner";
/// How often a running attempt renews its lease and looks for its abandonment.
pub const HEARTBEAT: Duration = Duration::from_secs(1);
/// How much of an attempt's output is kept.
pub const OUTPUT_LIMIT: usize = 64 * 1024;
/// Where a sandbox shows the engine's own program, for the steps it carries out itself
/// ([`servers`]), when [`SandboxJob::engine_program`] asks for it.
pub const ENGINE_PROGRAM: &str = "/run/overture/bin/overture";
/// How many of the last output lines a failure's message carries.
const MESSAGE_LINES: usize = 20;

/// One command to run in a fresh sandbox.
pub struct SandboxJob {
    /// Names the sandbox (and its workspace).
    pub id: String,
    /// Run with `/bin/sh -c`.
    pub command: String,
    /// Plain environment variables.
    pub env: Vec<(String, String)>,
    /// Secret environment variables.
    pub secret_env: Vec<(String, SecretString)>,
    /// Files placed under `/work`.
    pub files: Vec<(std::path::PathBuf, Vec<u8>)>,
    /// Files under `/work` to read back once the command has ended.
    pub collect: Vec<std::path::PathBuf>,
    /// Whether the sandbox keeps network access.
    pub network: bool,
    /// Whether the sandbox shows the engine's own program at [`ENGINE_PROGRAM`].
    pub engine_program: bool,
    /// When to kill it.
    pub timeout: Duration,
    /// How much output to keep (the tail).
    pub output_limit: usize,
    /// Where the output is copied as it arrives.
    pub log: Option<Box<dyn std::io::Write + Send + Sync>>,
    /// The deployment's secret values, which no copy of the output may show: a sandbox that
    /// copies the output anywhere besides `log` (the Fargate task's CloudWatch Logs) masks them.
    pub masked: Vec<SecretString>,
    /// What the command may use of the machine.
    pub limits: overture_events::StepLimits,
    /// With `network`: the only destinations the sandbox may reach ([`network::policy`]);
    /// without one it has the runner's whole network.
    pub network_policy: Option<Vec<overture_domain::egress::Destination>>,
}

/// How a sandboxed command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SandboxExit {
    /// It exited with this code.
    Code(i32),
    /// A signal killed it.
    Signal(i32),
    /// It ran past its timeout and was killed.
    TimedOut,
    /// It was killed because it was no longer wanted.
    Cancelled,
    /// It failed having run into one of its limits.
    LimitReached(limits::LimitReached),
}

/// What a sandboxed command did.
pub struct SandboxResult {
    /// How it ended.
    pub exit: SandboxExit,
    /// Its stdout and stderr, the tail.
    pub output: Vec<u8>,
    /// What it wrote to `$OVERTURE_OUTPUTS`.
    pub outputs_file: OutputsFile,
    /// How long it ran.
    pub duration: Duration,
    /// The files of [`SandboxJob::collect`] it left.
    pub collected: Vec<(std::path::PathBuf, Vec<u8>)>,
}

/// A future that resolves when the sandbox must be killed.
pub type Cancel<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// Runs a command in a fresh sandbox that is destroyed afterwards.
#[async_trait]
pub trait RunSandboxed: Send + Sync {
    /// Runs `job`; kills it when `cancel` resolves.
    async fn run<'a>(&self, job: SandboxJob, cancel: Cancel<'a>)
        -> Result<SandboxResult, RunError>;
}

/// Opens a deployment's sealed secrets.
#[async_trait]
pub trait OpenSeal: Send + Sync {
    /// The secret values sealed for this deployment.
    async fn open(
        &self,
        deployment: DeploymentId,
        tenant: &str,
        seal: &str,
    ) -> Result<SecretValues, PortError>;
}

/// Keeps what a step's attempts hand on to the next attempt and to `destroy` (a Terraform
/// state), sealed to the deployment, outside every sandbox.
#[async_trait]
pub trait KeepStepState: Send + Sync {
    /// What the step's last attempt kept, if anything.
    async fn load(
        &self,
        deployment: DeploymentId,
        tenant: &str,
        step: &str,
    ) -> Result<Option<Vec<u8>>, PortError>;
    /// Keeps `state` for the step, replacing what was kept.
    async fn save(
        &self,
        deployment: DeploymentId,
        tenant: &str,
        step: &str,
        state: &[u8],
    ) -> Result<(), PortError>;
}

/// Opens a deployment's bastion for the engine, acting with the user's token: adds a rule to the
/// bastion's security group admitting the engine's own address to its SSH port.
#[async_trait]
pub trait GrantAccess: Send + Sync {
    /// Adds the rule (or finds the identical one already there) and says what it admits.
    async fn grant(
        &self,
        deployment: DeploymentId,
        cloud: &CloudAccount,
        bastion: &step::SshAddress,
        security_group: &str,
    ) -> Result<BastionAccess, GrantError>;

    /// Whether the engine's rule `access` is still on the bastion's security group: a step
    /// that could not get through the bastion asks, to tell a deleted rule from failing servers.
    async fn still_granted(
        &self,
        deployment: DeploymentId,
        cloud: &CloudAccount,
        access: &BastionAccess,
    ) -> Result<bool, GrantError>;
}

/// Why the bastion could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum GrantError {
    /// The cloud API answered 502/503 or could not be reached: worth retrying.
    #[error("the cloud could not open the bastion: {0}")]
    Backend(String),
    /// Anything else: a refused token, an unknown security group.
    #[error("the bastion could not be opened: {0}")]
    Refused(String),
}

/// Keeps the job's lease while the attempt runs, so no other runner takes it.
#[async_trait]
pub trait KeepAlive: Send + Sync {
    /// Renews the lease; an error means the job is no longer ours. `attempt_lease` is when the
    /// attempt's own lease ends (`StepStarted.lease_until`: its timeout and a margin): should
    /// the runner die, the job is best back then, when the attempt can be found interrupted.
    async fn keep_alive(&self, attempt_lease: Option<Timestamp>) -> Result<(), PortError>;
}

/// A port failed, saying whether trying again can help; never carries a secret.
#[derive(Debug, thiserror::Error)]
pub enum PortError {
    /// The store, service or machine behind the port failed in a way that may pass (unreachable,
    /// throttled, out of room): trying again later may succeed.
    #[error("{0}")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The port refused, and will refuse the same call again (a seal that does not open for this
    /// tenant, a lease another runner holds now, no right to the store).
    #[error("{0}")]
    Refused(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl PortError {
    /// A failure that may pass.
    pub fn unavailable(error: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        PortError::Unavailable(error.into())
    }

    /// A refusal that trying again will not change.
    pub fn refused(error: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        PortError::Refused(error.into())
    }

    /// Whether trying the same call again later may succeed.
    pub const fn is_retryable(&self) -> bool {
        matches!(self, PortError::Unavailable(_))
    }
}

/// The ports [`run_attempt`] uses.
pub struct RunnerPorts<'a> {
    /// The deployments.
    pub log: &'a dyn DeploymentLog,
    /// The sandbox.
    pub sandbox: &'a dyn RunSandboxed,
    /// The sealed secrets.
    pub seals: &'a dyn OpenSeal,
    /// What steps keep between attempts.
    pub kept: &'a dyn KeepStepState,
    /// The bastions.
    pub access: &'a dyn GrantAccess,
    /// Every attempt's output.
    pub logs: &'a dyn logs::AttemptLogs,
    /// The time.
    pub clock: &'a dyn Clock,
    /// The blueprint's files, by hash.
    pub payloads: &'a dyn StorePayloads,
    /// How much of the host's loopback the engine's operator lets steps reach.
    pub loopback: overture_domain::egress::LoopbackEgress,
}

/// What became of a job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AttemptReport {
    /// The attempt succeeded.
    Succeeded,
    /// The attempt failed with this class.
    Failed(ErrorClass),
    /// An earlier holder of this job died while the attempt ran; recorded as `interrupted`.
    Interrupted,
    /// The attempt was abandoned while it ran and its sandbox killed.
    Abandoned,
    /// The job no longer matches the deployment (already run, superseded or abandoned).
    Obsolete(String),
    /// The attempt may not start yet; run the job again at this instant.
    NotYetDue(Timestamp),
    /// The job came back while its attempt runs, and the attempt's lease has not ended: a
    /// duplicate delivery, or a runner not yet known to be gone. Run the job again at this
    /// instant, when the lease ends.
    StillRunning(Timestamp),
}

/// Why a job could not be handled; the job should be tried again later.
#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    /// The log failed.
    #[error(transparent)]
    Log(#[from] LogError),
    /// The sandbox, the seal, the kept state or the attempt's log failed.
    #[error("{0}")]
    Port(#[from] PortError),
    /// The payload store could not give a file the step takes (it was unavailable).
    #[error(transparent)]
    Files(#[from] files::FileError),
}

impl RunnerError {
    /// Whether handling the job again later may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            RunnerError::Log(error) => error.is_retryable(),
            RunnerError::Port(error) => error.is_retryable(),
            RunnerError::Files(error) => error.is_retryable(),
        }
    }
}

/// Runs one attempt and records its outcome.
pub async fn run_attempt(
    job: &RunAttempt,
    ports: &RunnerPorts<'_>,
    lease: &dyn KeepAlive,
) -> Result<AttemptReport, RunnerError> {
    let RunAttempt {
        deployment,
        step,
        attempt,
        cause,
    } = job;
    let (deployment, attempt) = (*deployment, *attempt);
    let cause = Cause::new(ACTOR, deployment, cause.unwrap_or_else(uuid::Uuid::now_v7));
    let loaded = ports.log.load(deployment).await?;
    let current = loaded.state.steps.get(step);

    if current.is_some_and(|s| s.status == StepStatus::Running && s.attempt == attempt) {
        // The job came back while its attempt runs: its runner died, or this is a duplicate
        // delivery. Only the attempt's lease tells which.
        let interrupted = interrupt(
            ports,
            deployment,
            &cause,
            step,
            attempt,
            Interruption::LeaseExpired,
        )
        .await?;
        return Ok(match interrupted {
            Ok(()) => AttemptReport::Interrupted,
            Err(DeploymentError::LeaseNotExpired { until, .. }) => {
                AttemptReport::StillRunning(until)
            }
            Err(refused) => AttemptReport::Obsolete(refused.to_string()),
        });
    }

    let sandbox_id = sandbox_id(deployment, step, logs::LogName::Attempt(attempt));
    let now = ports.clock.now();
    let start = DeploymentCommand::StartAttempt {
        step: step.clone(),
        attempt,
        sandbox: sandbox_id.clone(),
        now,
    };
    let kind = loaded.state.spec(step).map(|spec| spec.kind.as_str());
    if kind == Some("noop") {
        // Nothing runs, so nothing can happen between the start and the outcome: both, and the
        // steps the success makes ready, are one commit.
        let success = DeploymentCommand::RecordSuccess {
            step: step.clone(),
            attempt,
            outputs: Default::default(),
            duration_ms: 0,
        };
        let commands = [start, success, DeploymentCommand::Advance { now }];
        let recorded =
            execute_all(ports.log, deployment, "", &cause, |_| commands.to_vec()).await?;
        return Ok(match recorded {
            Ok(_) => AttemptReport::Succeeded,
            Err(DeploymentError::NotYetDue { not_before, .. }) => {
                AttemptReport::NotYetDue(not_before)
            }
            Err(refused) => AttemptReport::Obsolete(refused.to_string()),
        });
    }
    let state = match execute(ports.log, deployment, "", &cause, |_| start.clone()).await? {
        Ok(executed) => executed.state,
        Err(DeploymentError::NotYetDue { not_before, .. }) => {
            return Ok(AttemptReport::NotYetDue(not_before))
        }
        Err(refused) => return Ok(AttemptReport::Obsolete(refused.to_string())),
    };
    let Some(spec) = state.spec(step).cloned() else {
        return Ok(AttemptReport::Obsolete(format!(
            "the blueprint has no step `{step}`"
        )));
    };

    let outcome =
        run_in_sandbox(&state, &spec, deployment, attempt, sandbox_id, ports, lease).await?;

    let recorded = match outcome {
        Outcome::Abandoned => return Ok(AttemptReport::Abandoned),
        Outcome::LostJob => interrupt(
            ports,
            deployment,
            &cause,
            step,
            attempt,
            Interruption::RunnerLostJob,
        )
        .await?
        .map(|()| AttemptReport::Interrupted),
        Outcome::Success {
            outputs,
            duration,
            registrations,
        } => {
            // The instances are registered with the success, in its commit: a service that
            // answered its check runs, and steps waiting for it may start.
            let register =
                (!registrations.is_empty()).then(|| DeploymentCommand::RegisterServices {
                    step: step.clone(),
                    attempt,
                    instances: registrations,
                });
            let commands: Vec<DeploymentCommand> = register
                .into_iter()
                .chain([
                    DeploymentCommand::RecordSuccess {
                        step: step.clone(),
                        attempt,
                        outputs,
                        duration_ms: millis(duration),
                    },
                    DeploymentCommand::Advance {
                        now: ports.clock.now(),
                    },
                ])
                .collect();
            execute_all(ports.log, deployment, "", &cause, |_| commands.clone())
                .await?
                .map(|_| AttemptReport::Succeeded)
        }
        Outcome::Failure {
            class,
            exit_code,
            message,
            duration,
        } => record_failure(
            ports,
            deployment,
            &cause,
            step,
            attempt,
            class,
            exit_code,
            message,
            millis(duration),
        )
        .await?
        .map(|()| AttemptReport::Failed(class)),
    };
    // Refused here means the attempt was abandoned while it finished.
    Ok(recorded.unwrap_or(AttemptReport::Abandoned))
}

enum Outcome {
    Success {
        outputs: std::collections::BTreeMap<String, String>,
        duration: Duration,
        /// The instances of the service the step provides, which answered its check.
        registrations: Vec<overture_domain::services::ServiceInstance>,
    },
    Failure {
        class: ErrorClass,
        exit_code: Option<i32>,
        message: String,
        duration: Duration,
    },
    Abandoned,
    /// The runner lost the job's lease and killed the sandbox.
    LostJob,
}

/// Records the attempt as interrupted, or says why it is not.
async fn interrupt(
    ports: &RunnerPorts<'_>,
    deployment: DeploymentId,
    cause: &Cause,
    step: &str,
    attempt: u32,
    why: Interruption,
) -> Result<Result<(), DeploymentError>, LogError> {
    let command = DeploymentCommand::InterruptAttempt {
        step: step.to_owned(),
        attempt,
        why,
        now: ports.clock.now(),
    };
    Ok(
        execute(ports.log, deployment, "", cause, |_| command.clone())
            .await?
            .map(|_| ()),
    )
}

#[allow(clippy::too_many_arguments)]
async fn record_failure(
    ports: &RunnerPorts<'_>,
    deployment: DeploymentId,
    cause: &Cause,
    step: &str,
    attempt: u32,
    error_class: ErrorClass,
    exit_code: Option<i32>,
    message: String,
    duration_ms: u64,
) -> Result<Result<(), DeploymentError>, LogError> {
    let now = ports.clock.now();
    // What the failure leads to (a retry, the grace period, the deployment's end) is decided
    // in the same commit.
    let commands = [
        DeploymentCommand::RecordFailure {
            step: step.to_owned(),
            attempt,
            error_class,
            exit_code,
            message,
            duration_ms,
            now,
        },
        DeploymentCommand::Advance { now },
    ];
    Ok(
        execute_all(ports.log, deployment, "", cause, |_| commands.to_vec())
            .await?
            .map(|_| ()),
    )
}

/// Runs an attempt of a sandboxed kind: prepare, run with a masked log, conclude.
async fn run_in_sandbox(
    state: &DeploymentState,
    spec: &StepSpec,
    deployment: DeploymentId,
    attempt: u32,
    sandbox_id: String,
    ports: &RunnerPorts<'_>,
    lease: &dyn KeepAlive,
) -> Result<Outcome, RunnerError> {
    let secrets = match &state.seal {
        Some(seal) => ports.seals.open(deployment, &state.tenant, seal).await?,
        None => SecretValues::new(),
    };
    let masker = Masker::new(secrets.values());
    let kept_file = kept_file(&spec.kind);
    let kept = match kept_file {
        Some(_) => {
            ports
                .kept
                .load(deployment, &state.tenant, &spec.name)
                .await?
        }
        None => None,
    };
    let files = match fetch_files(state, spec, ports.payloads).await? {
        Ok(files) => files,
        Err(problem) => {
            return Ok(Outcome::Failure {
                class: ErrorClass::StepFailed,
                exit_code: None,
                message: masker.mask(&problem),
                duration: Duration::ZERO,
            })
        }
    };
    let input = StepInput {
        state,
        spec,
        secrets: &secrets,
        deployment,
        attempt,
        kept,
        files: &files,
    };
    let bastion_access = match open_bastion(&input, ports, &masker).await? {
        Ok(access) => access,
        Err(failure) => return Ok(failure),
    };
    let prepared = match prepare(&input) {
        Ok(prepared) => prepared,
        Err(problem) => {
            return Ok(Outcome::Failure {
                class: ErrorClass::StepFailed,
                exit_code: None,
                message: masker.mask(&problem),
                duration: Duration::ZERO,
            });
        }
    };
    let name = logs::LogName::Attempt(attempt);
    let log = ports.logs.create(deployment, &spec.name, name)?;
    let network_policy = match prepared.network {
        true => Some(network::policy(&input, ports.loopback).await),
        false => None,
    };
    if let Some(allowed) = &network_policy {
        record_network_policy(&input, allowed, ports, &masker).await?;
        // Checked before the sandbox runs: the firewall would refuse the connection, and the
        // step would read that as an unreachable backend and be retried.
        if let Some(refused) = network::refused_target(&input, allowed, ports.loopback).await {
            let message = masker.mask(&format!("egress refused: {refused}"));
            // The attempt's log says why too; a log that cannot be written loses only that.
            let mut log = log;
            let _ = writeln!(log, "{message}");
            return Ok(Outcome::Failure {
                class: ErrorClass::EgressRefused,
                exit_code: None,
                message,
                duration: Duration::ZERO,
            });
        }
    }
    let mut job = step::sandbox_job(sandbox_id, prepared, &input, name, log, &masker);
    job.network_policy = network_policy.clone();

    let lost_job = std::sync::atomic::AtomicBool::new(false);
    let attempt_lease = state.steps.get(&spec.name).and_then(|s| s.lease_until);
    let watch = watch_for_abandonment(
        ports.log,
        lease,
        attempt_lease,
        deployment,
        &spec.name,
        attempt,
        &lost_job,
    );
    let result = match ports.sandbox.run(job, Box::pin(watch)).await {
        Ok(result) => result,
        // Nothing ran, and running it again would be refused again: a failed attempt, which
        // the retry policy sees as any other.
        Err(RunError::Unrunnable(refused)) => {
            return Ok(Outcome::Failure {
                class: ErrorClass::StepFailed,
                exit_code: None,
                message: masker.mask(&refused.to_string()),
                duration: Duration::ZERO,
            })
        }
        Err(RunError::Failed(error)) => return Err(error.into()),
    };
    if let Some(kept) = kept_file.and_then(|file| step::collected(&result.collected, file)) {
        ports
            .kept
            .save(deployment, &state.tenant, &spec.name, kept)
            .await?;
    }

    let learned = host_keys::learned(state, &result.collected);
    if !learned.is_empty() {
        // Recorded before the outcome, so the steps that follow connect with these keys.
        let cause = Cause::new(ACTOR, deployment, uuid::Uuid::now_v7());
        let command = DeploymentCommand::PinHostKeys(learned);
        // Refused only when the deployment ended meanwhile: nothing will connect any more.
        let _ = execute(ports.log, deployment, "", &cause, |_| command.clone()).await?;
    }

    let output = shown_output(&masker, &result.output);
    let failure = |class, exit_code, headline: String| Outcome::Failure {
        class,
        exit_code,
        message: with_tail(masker.mask(&headline), &output),
        duration: result.duration,
    };
    let outcome = match result.exit {
        SandboxExit::Code(code) => match conclude(&input, code, &result) {
            Verdict::Success(outputs) => match step::recordable(outputs, &input, &masker) {
                Ok(outputs) => Outcome::Success {
                    outputs,
                    duration: result.duration,
                    registrations: Vec::new(),
                },
                Err(headline) => failure(ErrorClass::StepFailed, Some(code), headline),
            },
            Verdict::Failure { class, headline } => match refused_host_key(state, &result) {
                Some(Verdict::Failure { class, headline }) => failure(class, Some(code), headline),
                _ => failure(class, Some(code), headline),
            },
        },
        SandboxExit::Signal(signal) => failure(
            ErrorClass::StepFailed,
            None,
            format!("killed by signal {signal}"),
        ),
        SandboxExit::TimedOut => failure(
            ErrorClass::StepFailed,
            None,
            format!(
                "timed out after {}",
                overture_domain::duration::format_duration(Duration::from_millis(spec.timeout_ms))
            ),
        ),
        SandboxExit::Cancelled if lost_job.load(std::sync::atomic::Ordering::Relaxed) => {
            Outcome::LostJob
        }
        SandboxExit::Cancelled => Outcome::Abandoned,
        SandboxExit::LimitReached(limit) => {
            failure(ErrorClass::StepFailed, None, limit.to_string())
        }
    };
    let outcome = match (outcome, &spec.provides) {
        (success @ Outcome::Success { .. }, Some(provision)) => {
            check_service(success, &input, provision, network_policy, ports, &masker).await?
        }
        (outcome, _) => outcome,
    };
    Ok(match bastion_access {
        Some(access) => blame_a_lost_bastion(outcome, state, deployment, &access, ports).await,
        None => outcome,
    })
}

/// After a providing step succeeded: checks its service answers on every host
/// ([`service_check`]) in a sandbox of its own, with the attempt's network policy. The success
/// then carries the instances to register; a host that did not answer fails the attempt, and
/// nothing is registered.
async fn check_service(
    success: Outcome,
    input: &StepInput<'_>,
    provision: &overture_events::ServiceProvision,
    network_policy: Option<Vec<overture_domain::egress::Destination>>,
    ports: &RunnerPorts<'_>,
    masker: &Masker,
) -> Result<Outcome, RunnerError> {
    let Outcome::Success {
        outputs, duration, ..
    } = success
    else {
        return Ok(success);
    };
    let failed = |message: String| Outcome::Failure {
        class: ErrorClass::StepFailed,
        exit_code: None,
        message: masker.mask(&message),
        duration,
    };
    let prepared = match service_check::prepare(input, provision) {
        Ok(prepared) => prepared,
        Err(problem) => return Ok(failed(problem)),
    };
    let id = format!(
        "{}-check",
        sandbox_id(
            input.deployment,
            &input.spec.name,
            logs::LogName::Attempt(input.attempt)
        )
    );
    // The attempt's log was written once, by the step; the check's output goes into the
    // failure's message when it fails.
    let mut job = step::sandbox_job(
        id,
        prepared,
        input,
        logs::LogName::Attempt(input.attempt),
        Box::new(std::io::sink()),
        masker,
    );
    job.log = None;
    job.timeout = service_check::CHECK_WITHIN + Duration::from_secs(15);
    job.network_policy = Some(match network_policy {
        Some(policy) => policy,
        None => network::policy(input, ports.loopback).await,
    });
    let result = match ports
        .sandbox
        .run(job, Box::pin(std::future::pending()))
        .await
    {
        Ok(result) => result,
        Err(RunError::Unrunnable(refused)) => return Ok(failed(refused.to_string())),
        Err(RunError::Failed(error)) => return Err(error.into()),
    };
    let code = match result.exit {
        SandboxExit::Code(code) => code,
        _ => -1,
    };
    let output = shown_output(masker, &result.output);
    Ok(
        match service_check::conclude(input, provision, code, &result.collected) {
            Ok(registrations) => Outcome::Success {
                outputs,
                duration: duration + result.duration,
                registrations,
            },
            Err(headline) => Outcome::Failure {
                class: ErrorClass::StepFailed,
                exit_code: Some(code),
                message: with_tail(masker.mask(&headline), &output),
                duration: duration + result.duration,
            },
        },
    )
}

/// A step through the bastion that could not connect fails as `bastion-access-lost` when the
/// engine's rule is gone although the deployment still holds its lease on it: someone deleted
/// the rule, and blaming the servers (`bootstrap-timeout`, `host-unreachable`) would mislead.
async fn blame_a_lost_bastion(
    outcome: Outcome,
    state: &DeploymentState,
    deployment: DeploymentId,
    access: &BastionAccess,
    ports: &RunnerPorts<'_>,
) -> Outcome {
    let Outcome::Failure {
        class,
        exit_code,
        message,
        duration,
    } = outcome
    else {
        return outcome;
    };
    let connection_failed = matches!(
        class,
        ErrorClass::BootstrapTimeout | ErrorClass::HostUnreachable | ErrorClass::StepFailed
    );
    let still_granted = match &state.cloud {
        Some(cloud) if connection_failed => {
            ports.access.still_granted(deployment, cloud, access).await
        }
        _ => Ok(true),
    };
    match still_granted {
        Ok(false) => Outcome::Failure {
            class: ErrorClass::BastionAccessLost,
            exit_code,
            message: format!(
                "lost access to bastion {}: the engine's rule {} in security group {} was deleted \
                 while this deployment still held its lease on it (someone removed it outside \
                 Overture); the servers are not at fault. The step said: {message}",
                access.bastion, access.rule, access.security_group
            ),
            duration,
        },
        Ok(true) => Outcome::Failure {
            class,
            exit_code,
            message,
            duration,
        },
        Err(error) => {
            tracing::warn!(%deployment, rule = access.rule, %error, "could not check the bastion's rule; keeping the step's own failure");
            Outcome::Failure {
                class,
                exit_code,
                message,
                duration,
            }
        }
    }
}

/// The files the step takes; `Ok(Err(problem))` when one cannot be had as recorded (asking
/// again will not change that), `Err` when the store was unavailable.
async fn fetch_files(
    state: &DeploymentState,
    spec: &StepSpec,
    payloads: &dyn StorePayloads,
) -> Result<Result<std::collections::BTreeMap<String, String>, String>, RunnerError> {
    let Some(blueprint) = &state.blueprint else {
        return Ok(Ok(Default::default()));
    };
    match files::step_files(blueprint, spec, payloads).await {
        Ok(files) => Ok(Ok(files)),
        Err(error) if error.is_retryable() => Err(error.into()),
        Err(error) => Ok(Err(error.to_string())),
    }
}

/// Opens the bastion for the engine before the first attempt that goes through it, and records
/// it (`BastionAccessGranted`); later steps share the open rule. The grant opens the
/// deployment's own lease on the rule, even when another deployment made it. Returns the access
/// the step goes through (`None` when it goes through no bastion), or the attempt's failure
/// when it cannot be opened: the retry policy then decides, as for any failed attempt.
async fn open_bastion(
    input: &StepInput<'_>,
    ports: &RunnerPorts<'_>,
    masker: &Masker,
) -> Result<Result<Option<BastionAccess>, Outcome>, RunnerError> {
    let state = input.state;
    let failure = |class, message: String| {
        Err(Outcome::Failure {
            class,
            exit_code: None,
            message: masker.mask(&format!("could not open the bastion: {message}")),
            duration: Duration::ZERO,
        })
    };
    let jump = match input.bastion() {
        Ok(Some(jump)) => jump,
        Ok(None) => return Ok(Ok(None)),
        Err(problem) => return Ok(failure(ErrorClass::StepFailed, problem)),
    };
    if let Some(open) = &state.bastion_access {
        return Ok(Ok(Some(open.clone())));
    }
    let Some(cloud) = &state.cloud else {
        return Ok(failure(
            ErrorClass::StepFailed,
            "the deployment was given no cloud token to act with".into(),
        ));
    };
    let group = state
        .blueprint
        .as_ref()
        .and_then(|b| b.bastion.as_ref())
        .map_or(Ok(String::new()), |bastion| {
            input.render(&bastion.security_group)
        });
    let group = match group {
        Ok(group) => group,
        Err(problem) => {
            return Ok(failure(
                ErrorClass::StepFailed,
                format!("its security group: {problem}"),
            ))
        }
    };
    let access = match ports
        .access
        .grant(input.deployment, cloud, &jump.address, &group)
        .await
    {
        Ok(access) => access,
        Err(GrantError::Backend(message)) => {
            return Ok(failure(ErrorClass::BackendUnreachable, message))
        }
        Err(GrantError::Refused(message)) => return Ok(failure(ErrorClass::StepFailed, message)),
    };
    let cause = Cause::new(ACTOR, input.deployment, uuid::Uuid::now_v7());
    let command = DeploymentCommand::RecordAccessGranted(access.clone());
    match execute(ports.log, input.deployment, "", &cause, |_| command.clone()).await? {
        // A step running beside this one opened it first, with the same rule.
        Ok(_) | Err(DeploymentError::AccessAlreadyGranted(_)) => Ok(Ok(Some(access))),
        Err(refused) => Ok(failure(ErrorClass::StepFailed, refused.to_string())),
    }
}

/// The `host-key-mismatch` failure a failed attempt's output or collected logs show, if any:
/// whatever the kind made of the exit, a refused host key is what the user must hear about.
fn refused_host_key(state: &DeploymentState, result: &SandboxResult) -> Option<Verdict> {
    let mut text = String::from_utf8_lossy(&result.output).into_owned();
    for (_, content) in &result.collected {
        text.push('\n');
        text.push_str(&String::from_utf8_lossy(content));
    }
    host_keys::mismatch(state, &text)
}

/// Records the attempt's network policy in the deployment's history before its sandbox starts
/// (`StepNetworkPolicyApplied`). An attempt no longer running records nothing; its sandbox is
/// cancelled as soon as it starts.
async fn record_network_policy(
    input: &StepInput<'_>,
    allowed: &[overture_domain::egress::Destination],
    ports: &RunnerPorts<'_>,
    masker: &Masker,
) -> Result<(), RunnerError> {
    let cause = Cause::new(ACTOR, input.deployment, uuid::Uuid::now_v7());
    let command = DeploymentCommand::RecordNetworkPolicy {
        step: input.spec.name.clone(),
        attempt: input.attempt,
        // A host may come from a secret; it is then recorded as `***`.
        allowed: allowed
            .iter()
            .map(|destination| masker.mask(&destination.to_string()))
            .collect(),
    };
    // Refused only when the attempt is over, which the sandbox's watch then sees.
    let _ = execute(ports.log, input.deployment, "", &cause, |_| command.clone()).await?;
    Ok(())
}

/// The file under `/work` a kind keeps from one run to the next, if it keeps one.
fn kept_file(kind: &str) -> Option<&'static str> {
    match kind {
        terraform::KIND => Some(terraform::STATE_FILE),
        _ => None,
    }
}

/// The sandbox command of a step, by its kind.
fn prepare(input: &StepInput) -> Result<step::Prepared, String> {
    match input.spec.kind.as_str() {
        script::KIND => script::prepare(input),
        terraform::KIND => terraform::prepare(input),
        ansible::KIND => ansible::prepare(input),
        http::KIND => http::prepare(input),
        wait_ssh::KIND => wait_ssh::prepare(input),
        servers::KIND => servers::prepare(input),
        other => Err(format!("this engine cannot run steps of kind `{other}`")),
    }
}

/// What the step's kind makes of its command's exit code.
fn conclude(input: &StepInput, code: i32, result: &SandboxResult) -> Verdict {
    match input.spec.kind.as_str() {
        terraform::KIND => terraform::conclude(input, code, result),
        ansible::KIND => ansible::conclude(input, code, result),
        http::KIND => http::conclude(input, code, result),
        wait_ssh::KIND => wait_ssh::conclude(input, code, result),
        servers::KIND => servers::conclude(input, code, result),
        // `prepare` refused every other kind, so only a script gets this far.
        _ => script::conclude(code, result),
    }
}

/// Resolves once the attempt is no longer running (abandoned) or the job's lease was lost (and
/// then sets `lost_job`).
async fn watch_for_abandonment(
    log: &dyn DeploymentLog,
    lease: &dyn KeepAlive,
    attempt_lease: Option<Timestamp>,
    deployment: DeploymentId,
    step: &str,
    attempt: u32,
    lost_job: &std::sync::atomic::AtomicBool,
) {
    let mut ticks = tokio::time::interval(HEARTBEAT);
    ticks.tick().await;
    loop {
        ticks.tick().await;
        if let Err(error) = lease.keep_alive(attempt_lease).await {
            tracing::warn!(%deployment, step, attempt, %error, "lost the job's lease; stopping the attempt");
            lost_job.store(true, std::sync::atomic::Ordering::Relaxed);
            return;
        }
        match log.load(deployment).await {
            Ok(loaded) => {
                let running = loaded
                    .state
                    .steps
                    .get(step)
                    .is_some_and(|s| s.status == StepStatus::Running && s.attempt == attempt);
                if !running {
                    return;
                }
            }
            Err(error) => {
                tracing::warn!(%deployment, %error, "could not check whether the attempt is still wanted")
            }
        }
    }
}

/// A sandbox's output tail as a message may show it: masked, and, when its start may have been
/// cut away, without the first bytes, which could be the end of a secret whose start was cut.
fn shown_output(masker: &Masker, output: &[u8]) -> String {
    if output.len() >= OUTPUT_LIMIT {
        masker.mask_tail(output)
    } else {
        masker.mask_bytes(output)
    }
}

fn with_tail(headline: String, output: &str) -> String {
    let lines: Vec<&str> = output.lines().collect();
    let tail = &lines[lines.len().saturating_sub(MESSAGE_LINES)..];
    if tail.is_empty() {
        headline
    } else {
        format!("{headline}; last output:\n{}", tail.join("\n"))
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// A new sandbox's id: the deployment, the step and the run (readable in `ps`, and read back by
/// [`parse_sandbox_id`] when a dead engine left the sandbox behind), and a random suffix so no
/// two runs share a workspace.
fn sandbox_id(deployment: DeploymentId, step: &str, run: logs::LogName) -> String {
    format!(
        "{}-{step}-{run}-{}",
        deployment.uuid().simple(),
        short_suffix()
    )
}

/// The deployment, the step and the run a sandbox id of [`sandbox_id`] names.
pub fn parse_sandbox_id(id: &str) -> Option<(DeploymentId, String, logs::LogName)> {
    let mut parts = id.rsplitn(3, '-');
    let (_suffix, run, rest) = (parts.next()?, parts.next()?, parts.next()?);
    let (deployment, step) = rest.split_once('-')?;
    let deployment = DeploymentId::from_uuid(uuid::Uuid::try_parse(deployment).ok()?);
    let run = match run {
        "destroy" => logs::LogName::Destroy,
        attempt => logs::LogName::Attempt(attempt.parse().ok()?),
    };
    Some((deployment, step.to_owned(), run))
}

fn short_suffix() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..8].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sandbox_id_names_its_deployment_step_and_run() {
        let deployment = DeploymentId::from_uuid(uuid::Uuid::now_v7());
        for run in [logs::LogName::Attempt(12), logs::LogName::Destroy] {
            let id = sandbox_id(deployment, "web-tier-2", run);
            assert_eq!(
                parse_sandbox_id(&id),
                Some((deployment, "web-tier-2".to_owned(), run)),
                "{id}"
            );
        }
        assert_eq!(parse_sandbox_id("not-a-sandbox"), None);
    }

    #[test]
    fn a_ports_error_says_whether_handling_the_job_again_can_help() {
        assert!(RunnerError::from(PortError::unavailable("KMS throttled the call")).is_retryable());
        let refused = PortError::refused("the seal does not open for this tenant");
        assert!(!RunnerError::from(refused).is_retryable());
    }
}
