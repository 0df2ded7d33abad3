//! [`SandboxError`]: why a sandbox could not run a command, as opposed to the command failing.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

/// A sandbox could not be set up, run or torn down; the step's own failure is an
/// [`Exit`](super::Exit) instead.
///
/// No variant carries an environment value, so none can leak a secret.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The bubblewrap program is not there.
    #[error(
        "bubblewrap ({}) was not found; install it with `apt-get install bubblewrap`",
        program.display()
    )]
    NotInstalled {
        /// The program that was looked for.
        program: PathBuf,
    },
    /// bubblewrap is installed but cannot make a sandbox on this machine.
    #[error(
        "bubblewrap ({}) cannot create a sandbox here: {reason}; it needs Linux namespaces \
         (run as root, or with unprivileged user namespaces enabled) and Linux 5.3 or later",
        program.display()
    )]
    Unusable {
        /// The program that was tried.
        program: PathBuf,
        /// What went wrong, usually bubblewrap's own message.
        reason: String,
    },
    /// The sandbox id cannot name a directory safely.
    #[error("invalid sandbox id {id:?}: {reason}")]
    InvalidId {
        /// The id as given.
        id: String,
        /// Which rule it breaks.
        reason: &'static str,
    },
    /// An input file's path would land outside the workspace, or is not a plain relative path.
    #[error("invalid input file path {}: {reason}", path.display())]
    InvalidFilePath {
        /// The path as given.
        path: PathBuf,
        /// Which rule it breaks.
        reason: &'static str,
    },
    /// An environment variable cannot be handed to the step.
    #[error("invalid environment variable {name:?}: {reason}")]
    InvalidEnv {
        /// The variable's name (never its value).
        name: String,
        /// Which rule it breaks.
        reason: &'static str,
    },
    /// The request asks for the engine's program, but the sandbox was given none.
    #[error(
        "the step needs the engine's own program in its sandbox, but this sandbox was set up \
         without one (Bubblewrap::with_engine_program)"
    )]
    NoEngineProgram,
    /// The command holds a NUL byte, which no argument vector can carry.
    #[error("the command contains a NUL byte")]
    InvalidCommand,
    /// The command is longer than the sandbox accepts.
    #[error("the command is {bytes} bytes; at most {limit} are accepted")]
    CommandTooLong {
        /// Its length.
        bytes: usize,
        /// The most accepted ([`MAX_COMMAND`](super::MAX_COMMAND)).
        limit: usize,
    },
    /// One variable is longer than the kernel passes to a program (`E2BIG` at exec).
    #[error("the variable {name} is {bytes} bytes as NAME=value; at most {limit} are accepted")]
    VariableTooLong {
        /// The variable's name (never its value).
        name: String,
        /// The length of `NAME=value`.
        bytes: usize,
        /// The most accepted ([`MAX_VARIABLE`](super::MAX_VARIABLE)).
        limit: usize,
    },
    /// The variables together are more than the sandbox passes to a program.
    #[error("the variables come to {bytes} bytes; at most {limit} are accepted")]
    EnvironmentTooLarge {
        /// The length of every `NAME=value` together.
        bytes: usize,
        /// The most accepted ([`MAX_ENVIRONMENT`](super::MAX_ENVIRONMENT)).
        limit: usize,
    },
    /// A workspace with this id exists already: ids must not be reused.
    #[error("sandbox workspace {} already exists", path.display())]
    WorkspaceExists {
        /// The existing directory, which is left as it is.
        path: PathBuf,
    },
    /// The workspace could not be prepared or read back.
    #[error("could not {action} {}: {source}", path.display())]
    Workspace {
        /// What was being done, such as "create" or "write".
        action: &'static str,
        /// The path it was done to.
        path: PathBuf,
        /// What the system said.
        #[source]
        source: io::Error,
    },
    /// A file to read back from the workspace is larger than the engine will read.
    #[error("the step left {} larger than {limit} bytes", path.display())]
    CollectedTooLarge {
        /// The file, relative to `/work`.
        path: PathBuf,
        /// The most the engine reads.
        limit: u64,
    },
    /// bubblewrap could not be started.
    #[error("could not start bubblewrap ({}): {source}", program.display())]
    Spawn {
        /// The program that was started.
        program: PathBuf,
        /// What the system said.
        #[source]
        source: io::Error,
    },
    /// bubblewrap started but failed before the command ran (a mount, a namespace, the exec).
    #[error("bubblewrap failed to set up the sandbox: {message}")]
    Setup {
        /// bubblewrap's own message (the step never ran, so it holds no step output).
        message: String,
    },
    /// Talking to the sandbox's processes failed.
    #[error("sandbox {action} failed: {source}")]
    Process {
        /// What was being done, such as "wait for bubblewrap".
        action: &'static str,
        /// What the system said.
        #[source]
        source: io::Error,
    },
    /// Processes of the sandbox were still alive this long after they were killed.
    #[error("processes of the sandbox were still alive {grace:?} after they were killed")]
    StillRunning {
        /// How long they were given.
        grace: Duration,
    },
    /// The step's limits could not be put in place (its cgroup, its workspace's size).
    #[error("could not apply the step's limits: {action}: {source}")]
    Limits {
        /// What was being done, such as "create the attempt's cgroup".
        action: &'static str,
        /// What the system said.
        #[source]
        source: io::Error,
    },
    /// A destination of the request's network policy cannot be allowed.
    #[error("invalid network policy: {reason}")]
    InvalidNetworkPolicy {
        /// Which destination, and why.
        reason: super::network::DestinationError,
    },
    /// The step's network namespace could not be filtered or connected (nft, pasta).
    #[error("could not set up the step's network: {reason}")]
    Network {
        /// What failed, with the tool's own message.
        reason: String,
    },
}
