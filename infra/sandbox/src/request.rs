//! What a caller asks of a sandbox ([`SandboxRequest`]) and what it gets back
//! ([`SandboxOutcome`], [`Exit`]), with the checks a request must pass before anything is
//! created on disk.

use std::collections::HashSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use secrecy::SecretString;

use super::args::{SANDBOX_OUTPUTS, SANDBOX_PATH, SANDBOX_WORK};
use super::error::SandboxError;
use super::network::NetworkPolicy;
use super::{MAX_COMMAND, MAX_ENVIRONMENT, MAX_VARIABLE};

pub use overture_events::StepLimits;
pub use overture_runner::sandbox::LimitReached;
pub use overture_runner::sandbox::{OutputsFile, ENGINE_PROGRAM};

/// The uid every step runs as, on the host as in the sandbox: no account has it (Debian reserves
/// 65000–65533 and never hands them out), so a step owns nothing outside its own workspace.
pub const STEP_UID: u32 = 65533;
/// The step's gid, likewise no group's.
pub const STEP_GID: u32 = 65533;

/// Variables the sandbox sets itself; a request may not set them too.
pub(crate) const RESERVED_ENV: [&str; 3] = ["PATH", "HOME", "OVERTURE_OUTPUTS"];

/// The longest sandbox id accepted; far below any file system's name limit.
const MAX_ID_LEN: usize = 128;

/// One step attempt to run in a fresh sandbox.
pub struct SandboxRequest {
    /// Names the workspace directory, so it must be a safe file name: ASCII letters, digits,
    /// `.`, `_` and `-`, not starting with `.`, at most 128 bytes.
    pub id: String,
    /// Run with `/bin/sh -c`, in `/work`.
    pub command: String,
    /// Plain variables; names are shell identifiers, and may not be `PATH`, `HOME` or
    /// `OVERTURE_OUTPUTS`.
    pub env: Vec<(String, String)>,
    /// Secret variables, under the same rules as `env`; their values are exposed only to the
    /// step.
    pub secret_env: Vec<(String, SecretString)>,
    /// Inputs placed under `/work`, at plain relative paths (no `/` at the start, no `.` or `..`).
    pub files: Vec<(PathBuf, Vec<u8>)>,
    /// Keep the host's network; when false the step sees only `lo`.
    pub network: bool,
    /// Show the engine's own program, read-only, at [`ENGINE_PROGRAM`] (for the steps the engine
    /// carries out itself, such as making servers); the sandbox must have been given one with
    /// [`Bubblewrap::with_engine_program`](super::Bubblewrap::with_engine_program).
    pub engine_program: bool,
    /// How long the step may run before it is killed.
    pub timeout: Duration,
    /// Keep at most this many bytes of output: the last ones.
    pub output_limit: usize,
    /// Files under `/work` (plain relative paths) to read back once the command has ended,
    /// however it ended; a file the step did not leave is simply not in the outcome.
    pub collect: Vec<PathBuf>,
    /// Where the output is copied as it arrives, besides the tail kept in memory.
    pub log: Option<OutputLog>,
    /// What the step may use of the machine: its cgroup's memory, processes and CPU, and the
    /// size of its `/work` (the log's size is the caller's to keep).
    pub limits: StepLimits,
    /// With `network`: the step gets a network namespace of its own that reaches only these
    /// destinations (see [`NetworkPolicy`]); without one it shares the engine's network.
    pub network_policy: Option<NetworkPolicy>,
}

/// A writer that receives a step's output as it arrives.
pub type OutputLog = Box<dyn std::io::Write + Send + Sync>;

// By hand, because input files may hold keys: only their paths and sizes are shown.
impl fmt::Debug for SandboxRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let files: Vec<_> = self
            .files
            .iter()
            .map(|(path, content)| (path, content.len()))
            .collect();
        f.debug_struct("SandboxRequest")
            .field("id", &self.id)
            .field("command", &self.command)
            .field("env", &self.env)
            .field("secret_env", &self.secret_env)
            .field("files", &files)
            .field("network", &self.network)
            .field("engine_program", &self.engine_program)
            .field("timeout", &self.timeout)
            .field("output_limit", &self.output_limit)
            .field("collect", &self.collect)
            .field("log", &self.log.is_some())
            .field("limits", &self.limits)
            .field("network_policy", &self.network_policy)
            .finish()
    }
}

/// How a step attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Exit {
    /// The command exited with this code.
    Code(i32),
    /// The command was killed by this signal.
    ///
    /// bubblewrap reports a signal as the shell does, as 128 + the signal, so a command that
    /// itself exits with 129..=192 is read as killed by a signal too, just as `$?` reads it.
    Signal(i32),
    /// The request's timeout passed and the sandbox was killed.
    TimedOut,
    /// The caller cancelled the run and the sandbox was killed.
    Cancelled,
    /// The command failed (or was killed) having run into this limit.
    LimitReached(LimitReached),
}

impl Exit {
    /// Reads a status in the shell's encoding, as bubblewrap reports it.
    pub(crate) fn from_shell_status(status: i32) -> Self {
        match status - 128 {
            signal @ 1..=64 => Exit::Signal(signal),
            _ => Exit::Code(status),
        }
    }

    /// Whether the step ran to the end and exited with code 0.
    pub fn success(&self) -> bool {
        *self == Exit::Code(0)
    }
}

/// What a finished step attempt left behind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxOutcome {
    /// How it ended.
    pub exit: Exit,
    /// Standard output and standard error, interleaved as they arrived, cut to the last
    /// `output_limit` bytes.
    pub output: Vec<u8>,
    /// What the step wrote to the file named by `$OVERTURE_OUTPUTS` (empty if nothing), or its
    /// size if that was more than [`MAX_OUTPUTS_FILE`](super::MAX_OUTPUTS_FILE).
    pub outputs_file: OutputsFile,
    /// From the start of bubblewrap until the step ended or was killed.
    pub duration: Duration,
    /// The files asked for in [`SandboxRequest::collect`] that the step left, as regular files.
    pub collected: Vec<(PathBuf, Vec<u8>)>,
}

impl SandboxRequest {
    /// Checks everything that can be checked before touching the disk.
    pub(crate) fn validate(&self) -> Result<(), SandboxError> {
        validate_id(&self.id)?;
        if self.command.contains('\0') {
            return Err(SandboxError::InvalidCommand);
        }
        if self.command.len() > MAX_COMMAND {
            return Err(SandboxError::CommandTooLong {
                bytes: self.command.len(),
                limit: MAX_COMMAND,
            });
        }
        let mut seen = HashSet::new();
        let plain = self.env.iter().map(|(name, value)| (name, value.as_str()));
        let secret = self.secret_env.iter().map(|(name, value)| {
            use secrecy::ExposeSecret;
            // Only looked at for a NUL byte, which would split the argument list.
            (name, value.expose_secret())
        });
        for (name, value) in plain.chain(secret) {
            validate_env_name(name)?;
            if !seen.insert(name.as_str()) {
                return Err(invalid_env(name, "it is given more than once"));
            }
            if value.contains('\0') {
                return Err(invalid_env(name, "its value contains a NUL byte"));
            }
        }
        self.validate_env_size()?;
        for path in self.files.iter().map(|(path, _)| path).chain(&self.collect) {
            validate_file_path(path)?;
        }
        if let Some(policy) = &self.network_policy {
            policy.check()?;
        }
        Ok(())
    }

    /// Checks the variables fit what the kernel hands to the shell, counting those the sandbox
    /// sets itself; sizes only, so no value is exposed beyond its length.
    fn validate_env_size(&self) -> Result<(), SandboxError> {
        use secrecy::ExposeSecret;
        let fixed = [
            ("PATH", SANDBOX_PATH.len()),
            ("HOME", SANDBOX_WORK.len()),
            ("OVERTURE_OUTPUTS", SANDBOX_OUTPUTS.len()),
        ];
        let plain = self
            .env
            .iter()
            .map(|(name, value)| (name.as_str(), value.len()));
        let secret = self
            .secret_env
            .iter()
            .map(|(name, value)| (name.as_str(), value.expose_secret().len()));
        let mut total = 0usize;
        for (name, value) in fixed.into_iter().chain(plain).chain(secret) {
            // As the shell receives it: `NAME=value`.
            let bytes = name.len() + 1 + value;
            if bytes > MAX_VARIABLE {
                return Err(SandboxError::VariableTooLong {
                    name: name.to_owned(),
                    bytes,
                    limit: MAX_VARIABLE,
                });
            }
            total += bytes;
        }
        if total > MAX_ENVIRONMENT {
            return Err(SandboxError::EnvironmentTooLarge {
                bytes: total,
                limit: MAX_ENVIRONMENT,
            });
        }
        Ok(())
    }
}

fn validate_id(id: &str) -> Result<(), SandboxError> {
    let reason = if id.is_empty() {
        Some("it is empty")
    } else if id.len() > MAX_ID_LEN {
        Some("it is longer than 128 bytes")
    } else if id.starts_with('.') {
        Some("it starts with '.'")
    } else if !id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        Some("only ASCII letters, digits, '.', '_' and '-' are allowed")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(SandboxError::InvalidId {
            id: id.to_owned(),
            reason,
        }),
        None => Ok(()),
    }
}

fn validate_env_name(name: &str) -> Result<(), SandboxError> {
    let mut bytes = name.bytes();
    let well_formed = bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if !well_formed {
        return Err(invalid_env(
            name,
            "names are ASCII letters, digits and '_', not starting with a digit",
        ));
    }
    if RESERVED_ENV.contains(&name) {
        return Err(invalid_env(name, "the sandbox sets it itself"));
    }
    Ok(())
}

fn invalid_env(name: &str, reason: &'static str) -> SandboxError {
    SandboxError::InvalidEnv {
        name: name.to_owned(),
        reason,
    }
}

fn validate_file_path(path: &Path) -> Result<(), SandboxError> {
    match overture_runner::sandbox::path_outside(path) {
        Some(reason) => Err(SandboxError::InvalidFilePath {
            path: path.to_owned(),
            reason,
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_status_is_decoded_as_the_shell_does() {
        assert_eq!(Exit::from_shell_status(0), Exit::Code(0));
        assert_eq!(Exit::from_shell_status(4), Exit::Code(4));
        assert_eq!(Exit::from_shell_status(128), Exit::Code(128));
        assert_eq!(Exit::from_shell_status(137), Exit::Signal(9));
        assert_eq!(Exit::from_shell_status(255), Exit::Code(255));
    }

    #[test]
    fn ids_must_be_plain_file_names() {
        for good in [
            "a",
            "step-1.attempt_2",
            "0198c2a4-7b7e-7cc3-9d1c-3f0d6b0e6a51",
        ] {
            assert!(validate_id(good).is_ok(), "{good}");
        }
        let long = "a".repeat(129);
        for bad in [
            "",
            ".",
            "..",
            ".hidden",
            "a/b",
            "../x",
            "a b",
            "é",
            long.as_str(),
        ] {
            assert!(
                matches!(validate_id(bad), Err(SandboxError::InvalidId { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn env_names_are_identifiers_and_not_reserved() {
        assert!(validate_env_name("TF_VAR_x1").is_ok());
        for bad in ["", "1A", "A=B", "A-B", "PATH", "HOME", "OVERTURE_OUTPUTS"] {
            assert!(
                matches!(validate_env_name(bad), Err(SandboxError::InvalidEnv { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn file_paths_stay_inside_the_workspace() {
        assert!(validate_file_path(Path::new("a/b.txt")).is_ok());
        for bad in ["", "/etc/x", "../x", "a/../../x", "./a"] {
            assert!(
                matches!(
                    validate_file_path(Path::new(bad)),
                    Err(SandboxError::InvalidFilePath { .. })
                ),
                "{bad}"
            );
        }
    }
}
