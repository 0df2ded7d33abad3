//! Runs one step attempt in a fresh bubblewrap sandbox that is destroyed afterwards.
//!
//! - This file: [`Bubblewrap`], which prepares a workspace, starts bubblewrap, waits for the
//!   step, its timeout or its cancellation, and makes sure nothing of the sandbox outlives
//!   [`Bubblewrap::run`].
//! - [`request`](SandboxRequest): what is asked and what comes back ([`SandboxOutcome`],
//!   [`Exit`]), and the checks a request passes first.
//! - `args`: the bubblewrap command line (namespaces, mounts, the command itself or, when it is
//!   too long for an argument, the file holding it) and the step's environment.
//! - `workspace`: the per-attempt directory on the host and the guard that removes it.
//! - `output`: the tail-capped capture of stdout and stderr, which share one pipe.
//! - `network`: a networked step's own network namespace ([`NetworkPolicy`]): the nftables
//!   ruleset that allows only the policy's destinations and the `pasta` process that connects
//!   it, both set up while the sandbox is still held (below), pasta ended with the run.
//! - `sys`: the Linux calls std and tokio lack (pidfds, memfd, pipes), and all the `unsafe`.
//! - `port`: the runner's `RunSandboxed` port, implemented on [`Bubblewrap`].
//! - `preflight`: [`Bubblewrap::preflight`], what the machine lacks for any step to run
//!   ([`Unready`]), checked when an engine starts; and where the sandbox's tools are looked up.
//! - `leftovers`: [`Bubblewrap::kill_leftovers`] and [`Bubblewrap::remove_leftovers`], for
//!   sandboxes a dead engine or runner left behind ([`Cleared`]); it finds them by the workspace
//!   path on bubblewrap's command line. [`RootHold`] tells a process whether it is alone.
//! - [`SandboxError`]: what went wrong when the sandbox, not the step, failed.
//! - `cgroup` and `limits`: what an attempt may use of the machine. Each attempt gets a cgroup
//!   of its own (v2 where the machine has it, else v1) limiting memory, processes and CPU, which
//!   the init joins while bubblewrap still holds it blocked, so every process of the step is in
//!   it; and a workspace (`/work`, the outputs file) that is a tmpfs of the workspace limit's
//!   size. Both go on every path out of `run`; `kill_leftovers` removes the cgroups a dead
//!   engine left, and `unmount_leftovers` its workspaces' mounts.
//!
//! # How a run ends
//!
//! bubblewrap starts as a monitor process (in its own process group) that clones the sandbox's
//! init, pid 1 of a new pid namespace, which forks the step. When pid 1 dies the kernel kills
//! everything else in the namespace and lets pid 1 finish dying only once they are gone. So
//! [`Bubblewrap::run`] learns pid 1's host pid (`--json-status-fd`), holds a pidfd on it while
//! the sandbox is still blocked (`--block-fd`), and on every path kills it through that pidfd and
//! waits for it to exit. A pidfd cannot hit a process that reused the pid.

mod args;
mod cgroup;
mod error;
mod leftovers;
mod limits;
mod network;
mod output;
mod port;
mod preflight;
mod request;
mod sys;
mod workspace;

use std::future::Future;
use std::io::{BufRead, BufReader};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::process::{Child, Command};
use tokio::time::Instant;
use tracing::Instrument;

pub use error::SandboxError;
pub use leftovers::{Cleared, RootHold};
pub use network::{Destination, DestinationError, NetworkPolicy};
/// How much of a step's outputs file and collected files is read back, as on every form.
pub use overture_runner::sandbox::{MAX_COLLECTED_FILE, MAX_OUTPUTS_FILE};
pub use preflight::{Missing, Unready};
pub use request::{
    Exit, LimitReached, OutputLog, OutputsFile, SandboxOutcome, SandboxRequest, StepLimits,
    ENGINE_PROGRAM, STEP_GID, STEP_UID,
};

use args::{Fds, SystemLayout};
use overture_runner::sandbox::TailBuffer;
use sys::Pidfd;
use workspace::Workspace;

/// The longest command a sandbox runs. A command over 64 KiB reaches the shell as a file rather
/// than an argument, so the kernel's limits do not apply to it; this bound keeps a command
/// (recorded in the blueprint's event) from being a way to ship data.
pub const MAX_COMMAND: usize = 1024 * 1024;
/// The longest `NAME=value` of one variable: the kernel refuses a longer string at exec
/// (`MAX_ARG_STRLEN`, 128 KiB counting its final NUL), and bubblewrap would fail to start the
/// shell.
pub const MAX_VARIABLE: usize = 128 * 1024 - 1;
/// The most all of a step's variables may come to: the kernel's limit for arguments and
/// environment together is a quarter of the stack limit (2 MiB by default), and the inline
/// command needs its share.
pub const MAX_ENVIRONMENT: usize = 1024 * 1024;

/// Why no sandbox runs on a host without `setpriv`.
const NO_SETPRIV: &str =
    "setpriv (util-linux) is missing, and no step may run as root: install util-linux";

/// How long the sandbox's processes get to vanish once killed, and the output pipes to close,
/// before `run` reports [`SandboxError::StillRunning`]. Dying takes milliseconds; this only
/// bounds a kernel or bubblewrap gone wrong.
const KILL_GRACE: Duration = Duration::from_secs(10);

/// Runs commands in bubblewrap sandboxes, each with a fresh workspace under one root directory.
#[derive(Debug, Clone)]
pub struct Bubblewrap {
    program: PathBuf,
    workspace_root: PathBuf,
    layout: SystemLayout,
    /// The engine's own program, for requests that run it (see
    /// [`SandboxRequest::engine_program`]).
    engine_program: Option<PathBuf>,
    /// Where attempts' cgroups go, or why they cannot be made here.
    cgroups: Result<cgroup::Cgroups, String>,
}

impl Bubblewrap {
    /// Uses `bwrap` from `PATH`, and makes workspaces under `workspace_root` (created if missing).
    pub fn new(workspace_root: PathBuf) -> Self {
        Self::with_program(find_bwrap(), workspace_root)
    }

    /// Uses the bubblewrap at `program`, and makes workspaces under `workspace_root`.
    pub fn with_program(program: PathBuf, workspace_root: PathBuf) -> Self {
        let cgroups = cgroup::Cgroups::detect(&cgroup::tag(&workspace_root));
        Self {
            program,
            workspace_root,
            layout: SystemLayout::detect(),
            engine_program: None,
            cgroups,
        }
    }

    /// Shows `program` (the engine's own executable, `std::env::current_exe()`) read-only at
    /// [`ENGINE_PROGRAM`] in the sandboxes whose requests ask for it.
    pub fn with_engine_program(mut self, program: PathBuf) -> Self {
        self.engine_program = Some(program);
        self
    }

    /// Checks that bubblewrap is installed and can make a sandbox on this machine.
    pub async fn available() -> Result<(), SandboxError> {
        let program = find_bwrap();
        let unusable = |reason: String| SandboxError::Unusable {
            program: program.clone(),
            reason,
        };
        // The pidfd is how `run` makes sure a sandbox is gone (Linux 5.3).
        Pidfd::open(std::process::id())
            .map_err(|error| unusable(format!("pidfd_open failed: {error}")))?;
        // Without setpriv no step could run as its own user.
        let layout = SystemLayout::detect();
        if layout.setpriv().is_none() {
            return Err(unusable(NO_SETPRIV.to_owned()));
        }
        // Without cgroups no step's limits could be kept.
        cgroup::Cgroups::detect("check")
            .map_err(|reason| unusable(format!("no cgroups to limit the steps with: {reason}")))?;

        let mut command = Command::new(&program);
        command
            .args([
                "--unshare-pid",
                "--unshare-ipc",
                "--unshare-uts",
                "--unshare-net",
            ])
            .args(["--die-with-parent", "--new-session"])
            .args(args::kept_capabilities())
            .args(layout.args())
            .args(["--proc", "/proc", "--dev", "/dev", "--remount-ro", "/"])
            // The very switch every step goes through.
            .args(args::step_user_args(&layout))
            .arg("/bin/true")
            .env_clear()
            .stdin(Stdio::null())
            .kill_on_drop(true);
        let output = tokio::time::timeout(KILL_GRACE, command.output())
            .await
            .map_err(|_| {
                unusable(format!(
                    "a test sandbox did not finish within {KILL_GRACE:?}"
                ))
            })?
            .map_err(|source| spawn_error(&program, source))?;
        if output.status.success() {
            Ok(())
        } else {
            let stderr = String::from_utf8_lossy(&output.stderr);
            Err(unusable(format!("{} ({})", stderr.trim(), output.status)))
        }
    }

    /// Runs `request.command` in a new sandbox until it exits, its timeout passes or `cancel`
    /// resolves, then removes the sandbox and its workspace.
    ///
    /// When this returns, no process of the sandbox is left. If the future is dropped instead,
    /// the processes are killed but not waited for, and the workspace is removed at once.
    pub async fn run(
        &self,
        mut request: SandboxRequest,
        cancel: impl Future<Output = ()>,
    ) -> Result<SandboxOutcome, SandboxError> {
        request.validate()?;
        if request.engine_program && self.engine_program.is_none() {
            return Err(SandboxError::NoEngineProgram);
        }
        if self.layout.setpriv().is_none() {
            return Err(SandboxError::Unusable {
                program: self.program.clone(),
                reason: NO_SETPRIV.to_owned(),
            });
        }
        let span = tracing::info_span!("sandbox", id = %request.id, network = request.network);
        async {
            let files = std::mem::take(&mut request.files);
            let log = request.log.take();
            let script = args::command_file(&request.command);
            let workspace = Workspace::create(
                self.workspace_root.clone(),
                request.id.clone(),
                files,
                script,
                request.limits.workspace_bytes,
            )
            .await?;
            let outcome = self.run_in(&workspace, &request, log, cancel).await;
            workspace.remove().await;
            match &outcome {
                Ok(outcome) => {
                    tracing::debug!(exit = ?outcome.exit, duration = ?outcome.duration, "sandbox finished");
                }
                Err(error) => tracing::warn!(%error, "sandbox failed"),
            }
            outcome
        }
        .instrument(span)
        .await
    }

    async fn run_in(
        &self,
        workspace: &Workspace,
        request: &SandboxRequest,
        log: Option<OutputLog>,
        cancel: impl Future<Output = ()>,
    ) -> Result<SandboxOutcome, SandboxError> {
        let group = self.attempt_group(request)?;
        let env =
            sys::memfd_with(&args::env_args(request)).map_err(process("pass the environment"))?;
        let (status_read, status_write) = sys::pipe().map_err(process("make a pipe"))?;
        let (block_read, block_write) = sys::socket_pair().map_err(process("make a socket"))?;
        let fds = Fds {
            args: env.as_raw_fd(),
            status: status_write.as_raw_fd(),
            block: block_read.as_raw_fd(),
        };
        let mut child = self.spawn(workspace, request, fds)?;
        let started = Instant::now();
        // bubblewrap has its own copies now; ours would keep the pipes from ever closing.
        drop((env, status_write, block_read));

        let tail = Arc::new(Mutex::new(TailBuffer::new(request.output_limit)));
        let Some(stdout) = child.stdout.take() else {
            return Err(process("capture output")(std::io::Error::other(
                "bubblewrap's stdout was not piped",
            )));
        };
        let capture = tokio::spawn(output::capture(stdout, Arc::clone(&tail), log));

        let held = hold_init(status_read, &group, workspace, request, &mut child).await?;
        // Let the command start. If the sandbox died during its setup instead, nobody is
        // listening, and bubblewrap's exit says why.
        let _ = sys::send_byte(&block_write);
        drop(block_write);

        let ended = wait_for_end(&mut child, started, request.timeout, cancel).await?;
        let duration = started.elapsed();
        if let Ended::Killed(_) = ended {
            kill_sandbox(&mut child, held.init.as_ref()).await?;
        }
        end_sandbox(held.init, held.pasta).await?;
        // Every writer of the pipe is gone now, so it is at end of file, or about to be.
        let mut capture = capture;
        if tokio::time::timeout(KILL_GRACE, &mut capture)
            .await
            .is_err()
        {
            capture.abort();
            return Err(SandboxError::StillRunning { grace: KILL_GRACE });
        }
        let output = output::take(&tail);

        let exit = match ended {
            Ended::Killed(exit) => exit,
            Ended::Exited(status) => {
                let status_lines = held.status_lines;
                let exit_code = blocking(move || read_exit_code(status_lines))
                    .await
                    .map_err(process("read bubblewrap's status"))?;
                exit_of(status, exit_code, &output)?
            }
        };
        // A step that failed may have failed for a limit; one that coped with it succeeded.
        let exit = match exit {
            Exit::Code(_) | Exit::Signal(_) if !exit.success() => {
                let work = workspace.dir().join(workspace::WORK_DIR);
                limits::reached(Some(&group), &work, &request.limits)
                    .map_or(exit, Exit::LimitReached)
            }
            other => other,
        };
        let outputs_file = workspace.read_outputs(MAX_OUTPUTS_FILE).await?;
        let collected = workspace
            .collect(&request.collect, MAX_COLLECTED_FILE)
            .await?;
        Ok(SandboxOutcome {
            exit,
            output,
            outputs_file,
            duration,
            collected,
        })
    }

    /// Starts bubblewrap on the sandbox's command line, with nothing of the engine's
    /// environment and the descriptors in `fds` left open for it.
    fn spawn(
        &self,
        workspace: &Workspace,
        request: &SandboxRequest,
        fds: Fds,
    ) -> Result<Child, SandboxError> {
        let mut command = Command::new(&self.program);
        command
            .args(args::command_line(
                &self.layout,
                workspace.dir(),
                request,
                self.engine_program
                    .as_deref()
                    .filter(|_| request.engine_program),
                fds,
            ))
            // Nothing of the engine's environment reaches bubblewrap, so nothing in it (such as
            // LD_PRELOAD) can steer bubblewrap while it still runs as root outside the sandbox.
            .env_clear()
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            // Replaced by a duplicate of stdout in `pre_exec`.
            .stderr(Stdio::null())
            .process_group(0)
            .kill_on_drop(true);
        let inherited = [fds.args, fds.status, fds.block];
        // SAFETY: the closure only calls fcntl and dup2, which are async-signal-safe, and
        // allocates nothing.
        unsafe {
            command.pre_exec(move || {
                sys::clear_cloexec(&inherited)?;
                sys::stderr_to_stdout()
            });
        }
        // --die-with-parent ties bubblewrap to this thread, not this process; `run` is async, so
        // this is a runtime worker thread, which lives as long as the runtime.
        command
            .spawn()
            .map_err(|source| spawn_error(&self.program, source))
    }
}

/// The sandbox's init while it is held before the command starts: in its cgroup, with its
/// network attached, and bubblewrap's status lines still to read.
struct HeldInit {
    init: Option<KillOnDrop>,
    status_lines: BufReader<std::fs::File>,
    pasta: Option<network::Pasta>,
}

/// Takes hold of the sandbox's init, which bubblewrap holds until it gets our byte: opens it,
/// moves it into the attempt's cgroup, and attaches the step's own network.
async fn hold_init(
    status_read: std::os::fd::OwnedFd,
    group: &cgroup::AttemptGroup,
    workspace: &Workspace,
    request: &SandboxRequest,
    child: &mut Child,
) -> Result<HeldInit, SandboxError> {
    // bubblewrap writes the init's pid before letting it set up; from then until it gets
    // our byte on `block_read`, the init is alive unless its setup failed, so the pid cannot
    // have been reused when the pidfd opens.
    let (init_pid, status_lines) = blocking(move || {
        let mut lines = BufReader::new(std::fs::File::from(status_read));
        let mut first = String::new();
        lines.read_line(&mut first)?;
        Ok((status_field(&first, "child-pid"), lines))
    })
    .await
    .map_err(process("read bubblewrap's status"))?;
    let init = match init_pid.and_then(|pid| u32::try_from(pid).ok()) {
        Some(pid) => Pidfd::open(pid)
            .map_err(process("open the sandbox's init process"))?
            .map(KillOnDrop),
        None => None,
    };
    if let (Some(pid), Some(_)) = (init_pid.and_then(|pid| u32::try_from(pid).ok()), &init) {
        // Before the init starts the step: from here on, all it forks is in the group.
        group.add(pid).map_err(|source| SandboxError::Limits {
            action: "move the sandbox into its cgroup",
            source,
        })?;
    }
    // The step's own network, while its init is still held: see `network`.
    let pasta = match (init_pid, &request.network_policy) {
        (Some(pid), Some(policy)) if request.network => {
            let pid = u32::try_from(pid).unwrap_or_default();
            match network::attach(pid, policy, workspace.dir()).await {
                Ok(pasta) => Some(pasta),
                Err(error) => {
                    kill_sandbox(child, init.as_ref()).await?;
                    return Err(error);
                }
            }
        }
        _ => None,
    };
    Ok(HeldInit {
        init,
        status_lines,
        pasta,
    })
}

/// Waits for bubblewrap to exit, the timeout to pass, or `cancel` to resolve.
async fn wait_for_end(
    child: &mut Child,
    started: Instant,
    timeout: Duration,
    cancel: impl Future<Output = ()>,
) -> Result<Ended, SandboxError> {
    let deadline = started.checked_add(timeout);
    let timer = async {
        match deadline {
            Some(deadline) => tokio::time::sleep_until(deadline).await,
            // Beyond the end of time: never.
            None => std::future::pending().await,
        }
    };
    Ok(tokio::select! {
        status = child.wait() => Ended::Exited(status.map_err(process("wait for bubblewrap"))?),
        () = timer => Ended::Killed(Exit::TimedOut),
        () = cancel => Ended::Killed(Exit::Cancelled),
    })
}

/// Kills the sandbox's init and waits for it, even after a normal exit: bubblewrap leaves as
/// soon as the command does, and anything the command left running in the background must not
/// outlive `run`. Then stops the step's network.
async fn end_sandbox(
    init: Option<KillOnDrop>,
    pasta: Option<network::Pasta>,
) -> Result<(), SandboxError> {
    if let Some(init) = init {
        init.0.kill().map_err(process("kill the sandbox"))?;
        let waiting = init
            .0
            .try_clone()
            .map_err(process("wait for the sandbox"))?;
        let exited = blocking(move || waiting.wait_exited_blocking(KILL_GRACE))
            .await
            .map_err(process("wait for the sandbox"))?;
        if !exited {
            return Err(SandboxError::StillRunning { grace: KILL_GRACE });
        }
    }
    if let Some(pasta) = pasta {
        pasta.stop().await?;
    }
    Ok(())
}

impl Bubblewrap {
    /// The cgroup of the attempt `request` asks for, with its limits set.
    fn attempt_group(
        &self,
        request: &SandboxRequest,
    ) -> Result<cgroup::AttemptGroup, SandboxError> {
        let cgroups = self
            .cgroups
            .as_ref()
            .map_err(|reason| SandboxError::Limits {
                action: "find the cgroups",
                source: std::io::Error::other(reason.clone()),
            })?;
        cgroups
            .create(&request.id, &request.limits)
            .map_err(|source| SandboxError::Limits {
                action: "create the attempt's cgroup",
                source,
            })
    }

    /// Which cgroup version attempts run under here (`"cgroup v2"` or `"cgroup v1"`), or why
    /// none can.
    pub fn cgroup_version(&self) -> Result<&'static str, String> {
        self.cgroups
            .as_ref()
            .map(cgroup::Cgroups::version)
            .map_err(Clone::clone)
    }
}

/// Why the wait for the step ended.
enum Ended {
    /// bubblewrap exited by itself.
    Exited(ExitStatus),
    /// The sandbox was killed, for this reason.
    Killed(Exit),
}

/// The sandbox's init process, killed if `run` is dropped before it could wait for it.
struct KillOnDrop(Pidfd);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        // Killing twice is harmless; failing here can only mean it is gone already.
        let _ = self.0.kill();
    }
}

/// Kills bubblewrap's process group and the sandbox's init, and reaps bubblewrap.
async fn kill_sandbox(child: &mut Child, init: Option<&KillOnDrop>) -> Result<(), SandboxError> {
    // No id means bubblewrap has been reaped already.
    if let Some(pgid) = child.id() {
        sys::kill_process_group(pgid).map_err(process("kill bubblewrap"))?;
    }
    // Before init has set up --die-with-parent, killing bubblewrap alone would not stop it.
    if let Some(init) = init {
        init.0.kill().map_err(process("kill the sandbox"))?;
    }
    child.wait().await.map_err(process("wait for bubblewrap"))?;
    Ok(())
}

/// Turns how bubblewrap ended into the step's [`Exit`].
fn exit_of(
    status: ExitStatus,
    exit_code: Option<i64>,
    output: &[u8],
) -> Result<Exit, SandboxError> {
    use std::os::unix::process::ExitStatusExt;
    if let Some(signal) = status.signal() {
        // Not by us: something outside killed bubblewrap (and so the sandbox).
        return Ok(Exit::Signal(signal));
    }
    match exit_code.and_then(|code| i32::try_from(code).ok()) {
        Some(code) => Ok(Exit::from_shell_status(code)),
        // bubblewrap reports an exit code only once the command was exec'd; without one,
        // what it printed is its own complaint.
        None => Err(SandboxError::Setup {
            message: String::from_utf8_lossy(output).trim().to_owned(),
        }),
    }
}

/// Reads bubblewrap's remaining status lines to the end, for the step's exit code.
fn read_exit_code(lines: BufReader<std::fs::File>) -> std::io::Result<Option<i64>> {
    let mut exit_code = None;
    for line in lines.lines() {
        exit_code = exit_code.or(status_field(&line?, "exit-code"));
    }
    Ok(exit_code)
}

/// An integer field of one of bubblewrap's JSON status lines.
fn status_field(line: &str, field: &str) -> Option<i64> {
    let value: serde_json::Value = serde_json::from_str(line).ok()?;
    value.get(field)?.as_i64()
}

/// Runs blocking I/O off the runtime's threads.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> std::io::Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|join| Err(std::io::Error::other(join)))
}

/// Wraps an I/O error in [`SandboxError::Process`], saying what was being done.
fn process(action: &'static str) -> impl FnOnce(std::io::Error) -> SandboxError {
    move |source| SandboxError::Process { action, source }
}

fn spawn_error(program: &Path, source: std::io::Error) -> SandboxError {
    if source.kind() == std::io::ErrorKind::NotFound {
        SandboxError::NotInstalled {
            program: program.to_owned(),
        }
    } else {
        SandboxError::Spawn {
            program: program.to_owned(),
            source,
        }
    }
}

/// `bwrap` from the engine's `PATH`, resolved now because bubblewrap itself runs with an empty
/// environment; plain `bwrap` if it is not there, which then fails as not installed.
fn find_bwrap() -> PathBuf {
    preflight::on_path(Path::new("bwrap")).unwrap_or_else(|| PathBuf::from("bwrap"))
}
