//! The programs that run inside a step's sandbox or task, not started by users: hidden
//! subcommands of the same binary, so a sandbox needs only the engine's own program.
//!
//! - [`provision`]: `overture provision`, which a `servers` step runs inside its sandbox.
//! - [`host_keys`]: `overture host-keys`, which a `wait-ssh` step runs inside its sandbox to read
//!   from the cloud the host keys of servers it contacts first.
//! - [`step_run`]: `overture step-run`, the entrypoint of a step's Fargate task on AWS (exit
//!   code: the step command's, or 125 when the entrypoint itself failed).
//!
//! Here too is what `provision` and `host-keys` share: how they fail, and how they end as their
//! step kinds expect. None needs a data directory, and their exit codes are their step kinds',
//! not the program's.

mod host_keys;
mod provision;
mod step_run;

use std::future::Future;
use std::process::ExitCode;

use clap::Subcommand;

use overture_openstack::{CloudError, ProvisionError};
use overture_runner::servers::BACKEND_UNREACHABLE;

/// How a command inside a step's sandbox failed, by exit code.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Failed {
    /// The input or the environment is wrong: the runner's doing, not the cloud's (exit 2).
    #[error("{0}")]
    Input(String),
    /// The cloud API could not be reached, which a retry may get past (exit 75).
    #[error("{0}")]
    Backend(String),
    /// Anything else: a refused token, a server in ERROR, a wait that ran out (exit 1).
    #[error("{0}")]
    Other(String),
}

impl Failed {
    fn code(&self) -> u8 {
        match self {
            Failed::Input(_) => 2,
            // 75 fits in a u8; the constant is an i32 because exit codes are.
            Failed::Backend(_) => u8::try_from(BACKEND_UNREACHABLE).unwrap_or(1),
            Failed::Other(_) => 1,
        }
    }
}

impl From<CloudError> for Failed {
    fn from(error: CloudError) -> Self {
        if error.is_backend() {
            Failed::Backend(error.to_string())
        } else {
            Failed::Other(error.to_string())
        }
    }
}

impl From<ProvisionError> for Failed {
    fn from(error: ProvisionError) -> Self {
        if error.is_backend() {
            Failed::Backend(error.to_string())
        } else {
            Failed::Other(error.to_string())
        }
    }
}

/// Runs `work` to its end on a runtime of its own. On failure the reason goes to stderr (the
/// attempt's log) and to `error_file`, which the step kind collects to say why.
pub(crate) fn run(error_file: &str, work: impl Future<Output = Result<(), Failed>>) -> ExitCode {
    let outcome = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime.block_on(work),
        Err(error) => Err(Failed::Other(format!("cannot start the runtime: {error}"))),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(failed) => {
            eprintln!("error: {failed}");
            if let Err(error) = std::fs::write(error_file, failed.to_string()) {
                eprintln!("error: cannot write {error_file}: {error}");
            }
            ExitCode::from(failed.code())
        }
    }
}

/// The hidden subcommands that run inside a sandbox or a task.
#[derive(Subcommand)]
pub enum SandboxedCommand {
    /// Carry out a `servers` step's plan: run by the step inside its sandbox, not by users.
    #[command(hide = true)]
    Provision(provision::ProvisionArgs),
    /// Read the SSH host keys of the hosts a `wait-ssh` step contacts first from the cloud's
    /// consoles: run by the step inside its sandbox, not by users.
    #[command(hide = true)]
    HostKeys(host_keys::HostKeysArgs),
    /// Run a step attempt's sealed job: the entrypoint of a step's Fargate task on AWS, started
    /// by the runner, not by users. Exits with the command's code, 125 if it could not run it.
    #[command(hide = true)]
    StepRun(step_run::StepRunArgs),
}

impl SandboxedCommand {
    /// Runs the program; its exit code is its step kind's.
    pub fn main(self) -> ExitCode {
        match self {
            SandboxedCommand::Provision(args) => provision::main(&args),
            SandboxedCommand::HostKeys(args) => host_keys::main(&args),
            SandboxedCommand::StepRun(args) => step_run::main(args),
        }
    }
}
