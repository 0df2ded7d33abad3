//! The runner function: run one attempt of one step, in a fresh sandbox, and record how it went.
//!
//! [`run_attempt`] takes a [`RunAttempt`] job. It records `StepStarted`, has the step's kind
//! prepare the sandbox command (see [`step`] and [`kind`], one module per kind), runs it through
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
//!
//! The attempt's life, in order: [`run_attempt`] (here) loads and starts it; `attempt` opens its
//! secrets and files, has the kind prepare it, applies its egress and runs it watched (`lease`),
//! and judges the exit; `bastion` opens the bastion first and blames a lost one after;
//! [`service_check`] checks a provided service; `record` records the outcome. The ports are in
//! [`ports`] and, for the sandbox, [`sandbox`].

mod attempt;
mod bastion;
pub mod destroy;
pub mod files;
pub mod host_keys;
pub mod kind;
mod lease;
pub mod limits;
pub mod logs;
pub mod network;
pub mod ports;
mod record;
pub mod sandbox;
pub mod service_check;
pub mod sqs;
pub mod step;
#[cfg(test)]
pub(crate) mod testing;

#[cfg(feature = "fakes")]
pub mod fakes;
pub mod workspace;

use std::time::Duration;

use overture_domain::kind::Kind;
use overture_domain::{DeploymentCommand, StepStatus};
use overture_events::{DeploymentId, ErrorClass, Timestamp};
use overture_kit::{Cause, LogError};
use record::Record;

/// The kinds' modules, where they were before the kinds had a folder.
pub use kind::{ansible, http, script, servers, terraform, wait_ssh};
/// How much of the host's loopback steps may reach, as [`RunnerPorts::loopback`] takes it.
pub use overture_domain::egress::LoopbackEgress;
/// The job: run this attempt of this step (its body on the queue is in `overture_events`).
pub use overture_events::job::RunAttempt;
pub use ports::{
    GrantAccess, GrantError, KeepAlive, KeepStepState, OpenSeal, PortError, RunnerPorts,
};
pub use sandbox::{
    Cancel, OutputsFile, RunError, RunSandboxed, SandboxExit, SandboxJob, SandboxResult,
    Unrunnable, ENGINE_PROGRAM,
};
pub use sqs::{on_job_messages, ChangeVisibility, MessageError};

/// The name the runner appends events under.
pub const ACTOR: &str = "runner";
/// How often a running attempt renews its lease and looks for its abandonment.
pub const HEARTBEAT: Duration = Duration::from_secs(1);
/// How much of an attempt's output is kept.
pub const OUTPUT_LIMIT: usize = 64 * 1024;

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
#[tracing::instrument(
    name = "run_attempt",
    level = "info",
    skip_all,
    fields(deployment = %job.deployment, step = %job.step, attempt = job.attempt, cause = ?job.cause)
)]
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
    let record = Record {
        ports,
        deployment,
        cause: &cause,
        step,
        attempt,
    };
    let current = loaded.state.steps.get(step);
    if current.is_some_and(|s| s.status == StepStatus::Running && s.attempt == attempt) {
        return Ok(record.came_back().await?);
    }

    let sandbox_id = sandbox_id(deployment, step, logs::LogName::Attempt(attempt));
    let now = ports.clock.now();
    let start = DeploymentCommand::StartAttempt {
        step: step.clone(),
        attempt,
        sandbox: sandbox_id.clone(),
        now,
    };
    if loaded.state.spec(step).and_then(Kind::of) == Some(Kind::Noop) {
        return Ok(record.start_and_succeed(start, now).await?);
    }
    let state = match record.start(start).await? {
        Ok(state) => state,
        Err(report) => return Ok(report),
    };
    let Some(spec) = state.spec(step).cloned() else {
        return Ok(AttemptReport::Obsolete(format!(
            "the blueprint has no step `{step}`"
        )));
    };

    let outcome =
        attempt::run_in_sandbox(&state, &spec, deployment, attempt, sandbox_id, ports, lease)
            .await?;
    Ok(record.outcome(outcome).await?)
}

pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// A new sandbox's id: the deployment, the step and the run (readable in `ps`, and read back by
/// [`parse_sandbox_id`] when a dead engine left the sandbox behind), and a random suffix so no
/// two runs share a workspace.
pub(crate) fn sandbox_id(deployment: DeploymentId, step: &str, run: logs::LogName) -> String {
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
