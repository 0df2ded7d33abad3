//! The runner's sandbox port ([`RunSandboxed`]) on bubblewrap.

use async_trait::async_trait;
use overture_runner::sandbox::{
    Cancel, PortError, RunError, RunSandboxed, SandboxExit, SandboxJob, SandboxResult, Unrunnable,
};

use super::{Bubblewrap, Exit, SandboxError, SandboxRequest};

#[async_trait]
impl RunSandboxed for Bubblewrap {
    async fn run<'a>(
        &self,
        job: SandboxJob,
        cancel: Cancel<'a>,
    ) -> Result<SandboxResult, RunError> {
        let request = SandboxRequest {
            id: job.id,
            command: job.command,
            env: job.env,
            secret_env: job.secret_env,
            files: job.files,
            network: job.network,
            engine_program: job.engine_program,
            timeout: job.timeout,
            output_limit: job.output_limit,
            collect: job.collect,
            log: job.log,
            limits: job.limits,
            network_policy: job
                .network_policy
                .map(|allow| super::NetworkPolicy { allow }),
        };
        let outcome = Bubblewrap::run(self, request, cancel)
            .await
            .map_err(run_error)?;
        let exit = match outcome.exit {
            Exit::Code(code) => SandboxExit::Code(code),
            Exit::Signal(signal) => SandboxExit::Signal(signal),
            Exit::TimedOut => SandboxExit::TimedOut,
            Exit::Cancelled => SandboxExit::Cancelled,
            Exit::LimitReached(limit) => SandboxExit::LimitReached(limit),
        };
        Ok(SandboxResult {
            exit,
            output: outcome.output,
            outputs_file: outcome.outputs_file,
            duration: outcome.duration,
            collected: outcome.collected,
        })
    }
}

/// Tells what the step asked for, which no retry can change, from the sandbox failing.
fn run_error(error: SandboxError) -> RunError {
    match error {
        SandboxError::CommandTooLong { bytes, limit } => {
            Unrunnable::CommandTooLong { bytes, limit }.into()
        }
        SandboxError::InvalidCommand => Unrunnable::NulInCommand.into(),
        SandboxError::VariableTooLong { name, bytes, limit } => {
            Unrunnable::VariableTooLong { name, bytes, limit }.into()
        }
        SandboxError::EnvironmentTooLarge { bytes, limit } => {
            Unrunnable::EnvironmentTooLarge { bytes, limit }.into()
        }
        // The rest are the engine's or the machine's: bad ids and paths are the engine's own
        // making, and the others may pass (on this machine later, or on another runner's).
        other => PortError::unavailable(other).into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_the_step_asked_for_is_unrunnable() {
        let refused = run_error(SandboxError::CommandTooLong { bytes: 3, limit: 2 });
        assert!(matches!(
            refused,
            RunError::Unrunnable(Unrunnable::CommandTooLong { bytes: 3, limit: 2 })
        ));
        assert!(!refused.retryable());
        let failed = run_error(SandboxError::StillRunning {
            grace: std::time::Duration::from_secs(10),
        });
        assert!(failed.retryable(), "{failed}");
    }
}
