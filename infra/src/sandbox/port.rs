//! The runner's sandbox port ([`RunSandboxed`]) on bubblewrap.

use async_trait::async_trait;
use overture_runner::{Cancel, PortError, RunSandboxed, SandboxExit, SandboxJob, SandboxResult};

use super::{Bubblewrap, Exit, SandboxRequest};

#[async_trait]
impl RunSandboxed for Bubblewrap {
    async fn run<'a>(
        &self,
        job: SandboxJob,
        cancel: Cancel<'a>,
    ) -> Result<SandboxResult, PortError> {
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
        };
        let outcome = Bubblewrap::run(self, request, cancel)
            .await
            .map_err(|e| PortError(e.to_string()))?;
        let exit = match outcome.exit {
            Exit::Code(code) => SandboxExit::Code(code),
            Exit::Signal(signal) => SandboxExit::Signal(signal),
            Exit::TimedOut => SandboxExit::TimedOut,
            Exit::Cancelled => SandboxExit::Cancelled,
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
