//! What the engine's own commands that run inside a step's sandbox (`overture provision`,
//! `overture host-keys`) share: how they fail, and how they end as their step kinds expect.

use std::future::Future;
use std::process::ExitCode;

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
