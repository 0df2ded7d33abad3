//! The sandbox port: all a sandbox implementation takes from the runner (`overture-sandbox` on
//! bubblewrap, the Fargate step task), and nothing else of its internals. [`RunSandboxed`] runs a
//! [`SandboxJob`] into a [`SandboxResult`]; what it answers besides a plain result is a job it
//! cannot run as given ([`Unrunnable`], which no retry mends, so the attempt fails), an
//! infrastructure failure ([`RunError::Failed`], which the engine retries once the job's lease
//! runs out), and the step's `$OVERTURE_OUTPUTS` file as it was read back ([`OutputsFile`]).
//! What every sandbox does with a step's working directory is re-exported from
//! [`crate::workspace`], and the limits a command can run into from [`crate::limits`].

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use async_trait::async_trait;
use overture_domain::secret::SecretString;

pub use crate::PortError;

pub use crate::limits::LimitReached;
pub use crate::workspace::{
    path_outside, read_inside, read_outputs_file, TailBuffer, MAX_COLLECTED_FILE, MAX_OUTPUTS_FILE,
};

/// Why [`RunSandboxed::run`](crate::RunSandboxed::run) returned no result.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The job cannot be run as given: the attempt fails, and running it again cannot help.
    #[error(transparent)]
    Unrunnable(#[from] Unrunnable),
    /// The sandbox itself failed; the same job may succeed later.
    #[error(transparent)]
    Failed(#[from] PortError),
}

impl RunError {
    /// Whether running the same job again can help.
    pub fn retryable(&self) -> bool {
        matches!(self, RunError::Failed(error) if error.is_retryable())
    }
}

/// A job the sandbox refuses before starting it, because of what the step asks for.
///
/// The messages go into events and progress lines: they name the limit and what to do, and
/// never a value (a variable may hold a secret).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unrunnable {
    /// The command is longer than the sandbox accepts.
    #[error(
        "the command is {}; the sandbox accepts at most {}: have the step fetch large data \
         instead of writing it into its command",
        size(*bytes), size(*limit)
    )]
    CommandTooLong {
        /// The command's length in bytes.
        bytes: usize,
        /// The most accepted.
        limit: usize,
    },
    /// The command holds a NUL byte, which no program's arguments can carry.
    #[error("the command contains a NUL byte (`\\0`), which a shell command cannot hold")]
    NulInCommand,
    /// One environment variable is longer than the kernel hands to a program.
    #[error(
        "the step's variable `{name}` (`NAME=value`) is {}; the kernel passes at most {} in one \
         variable: a value this large (a parameter, an output) must reach the step another way",
        size(*bytes), size(*limit)
    )]
    VariableTooLong {
        /// The variable's name (never its value).
        name: String,
        /// The length of `NAME=value` in bytes.
        bytes: usize,
        /// The most accepted.
        limit: usize,
    },
    /// The step's variables together are more than the sandbox hands to a program.
    #[error(
        "the step's variables come to {}; the sandbox passes at most {} in all",
        size(*bytes), size(*limit)
    )]
    EnvironmentTooLarge {
        /// The length of every `NAME=value` together, in bytes.
        bytes: usize,
        /// The most accepted.
        limit: usize,
    },
}

/// What the step left in the file named by `$OVERTURE_OUTPUTS`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OutputsFile {
    /// Its content (empty when the step wrote nothing).
    Read(Vec<u8>),
    /// It was larger than the engine reads, so it was not read.
    TooLarge {
        /// Its size.
        bytes: u64,
        /// The most the engine reads.
        limit: u64,
    },
}

impl Default for OutputsFile {
    fn default() -> Self {
        OutputsFile::Read(Vec::new())
    }
}

impl OutputsFile {
    /// The content, or why there is none to read, for a failed attempt's headline.
    pub fn content(&self) -> Result<&[u8], String> {
        match self {
            OutputsFile::Read(content) => Ok(content),
            OutputsFile::TooLarge { bytes, limit } => Err(format!(
                "wrote {} to $OVERTURE_OUTPUTS; at most {} is read: outputs are for short \
                 values, keep large data in files",
                size_u64(*bytes),
                size_u64(*limit)
            )),
        }
    }
}

/// A size for people: exact below 1 KiB, else in KiB or MiB with at most one decimal.
pub fn size(bytes: usize) -> String {
    size_u64(u64::try_from(bytes).unwrap_or(u64::MAX))
}

fn size_u64(bytes: u64) -> String {
    const KIB: u64 = 1024;
    const MIB: u64 = 1024 * KIB;
    let scaled = |unit: u64, name: &str| {
        // Tenths, rounded down, so a size just over a limit never reads as the limit itself.
        let tenths = bytes.saturating_mul(10) / unit;
        match tenths % 10 {
            0 => format!("{} {name} ({bytes} bytes)", tenths / 10),
            tenth => format!("{}.{tenth} {name} ({bytes} bytes)", tenths / 10),
        }
    };
    if bytes < KIB {
        format!("{bytes} bytes")
    } else if bytes < MIB {
        scaled(KIB, "KiB")
    } else {
        scaled(MIB, "MiB")
    }
}

/// Where a sandbox shows the engine's own program, for the steps it carries out itself
/// ([`servers`]), when [`SandboxJob::engine_program`] asks for it.
pub const ENGINE_PROGRAM: &str = "/run/overture/bin/overture";

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
    LimitReached(LimitReached),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_in_the_largest_whole_unit_with_the_exact_count() {
        assert_eq!(size(12), "12 bytes");
        assert_eq!(size(1024 * 1024), "1 MiB (1048576 bytes)");
        assert_eq!(size(3_000_000), "2.8 MiB (3000000 bytes)");
        assert_eq!(size(128 * 1024 - 1), "127.9 KiB (131071 bytes)");
    }

    #[test]
    fn only_an_infrastructure_failure_is_worth_a_retry() {
        assert!(RunError::from(PortError::unavailable("disk full")).retryable());
        assert!(!RunError::from(PortError::refused("no such program")).retryable());
        assert!(!RunError::from(Unrunnable::NulInCommand).retryable());
    }

    #[test]
    fn a_refusal_names_the_limit_and_the_size() {
        let message = Unrunnable::CommandTooLong {
            bytes: 3_000_000,
            limit: 1024 * 1024,
        }
        .to_string();
        assert!(message.starts_with("the command is 2.8 MiB"), "{message}");
        assert!(message.contains("at most 1 MiB"), "{message}");
        let outputs = OutputsFile::TooLarge {
            bytes: 2_000_000,
            limit: 1024 * 1024,
        };
        let headline = outputs.content().expect_err("too large");
        assert!(
            headline
                .starts_with("wrote 1.9 MiB (2000000 bytes) to $OVERTURE_OUTPUTS; at most 1 MiB"),
            "{headline}"
        );
    }
}
