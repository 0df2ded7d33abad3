//! The step task's entrypoint (`overture step-run`): what runs inside each Fargate task that
//! [`FargateSteps`](crate::fargate::FargateSteps) starts, carrying out the contract in
//! [`crate::fargate`]'s header.
//!
//! [`run_step`] reads the attempt's sealed input from S3 and opens it through KMS
//! ([`open_input`]), places the job's files under the work directory, runs the command with
//! `/bin/sh -c` in a cleared environment as an unprivileged user ([`RunAs`]), echoes its output
//! as it comes (the container's stdout goes to CloudWatch Logs) while keeping its tail, kills it
//! at the job's timeout, reads back its outputs file and the files it collects, seals them
//! ([`seal_result`]) and puts them beside the input. It returns the command's exit code, which
//! the container exits with; an `Err` means the entrypoint itself failed and left no result.
//!
//! The command never sees the task's AWS credentials: its environment holds the job's variables
//! and `PATH`, `HOME`, `OVERTURE_OUTPUTS`, nothing of the entrypoint's (in particular no
//! `AWS_CONTAINER_CREDENTIALS_RELATIVE_URI`, the path of the task role's credentials). Running
//! as root, the entrypoint runs the command as another user, who can read neither the
//! entrypoint's environment in `/proc` nor signal it; once the command ended, every process of
//! that user is killed, and waited for, before anything is read back, so nothing can swap a file for a link
//! while the entrypoint (root) reads it.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{lchown, DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use aws_sdk_s3::primitives::ByteStream;
use overture_domain::secret::{Masker, SecretString};
use overture_runner::logs::MaskingWriter;
use overture_runner::workspace::{
    path_outside, read_inside, read_outputs_file, TailBuffer, MAX_COLLECTED_FILE, MAX_OUTPUTS_FILE,
};
use overture_runner::OutputsFile;

use crate::fargate::{
    call, encode, open_input, seal_result, AttemptInput, AttemptRef, AttemptResult, FargateError,
};

/// The work directory of the step image, where the job's files are placed.
pub const WORK_DIR: &str = "/work";
/// The user the step image runs commands as.
pub const STEP_USER: &str = "overture-step";
/// The step's `$OVERTURE_OUTPUTS` file, in the work directory.
pub const OUTPUTS_FILE: &str = ".overture-outputs";
/// `PATH` for the command, the step image's usual one.
const STEP_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// How long the output may take to close once every process of the command was killed; it
/// closes at once unless a process escaped the kill (possible only when not running as root).
const CLOSE_GRACE: Duration = Duration::from_secs(10);

/// What `overture step-run` is asked to do.
#[derive(Clone, Debug)]
pub struct StepRun {
    /// The payloads bucket.
    pub bucket: String,
    /// The key of the attempt's sealed input.
    pub input: String,
    /// Where the job's files go, and the command's working directory and `HOME`.
    pub work_dir: PathBuf,
    /// Who runs the command when the entrypoint runs as root: a user name or a numeric uid.
    pub user: String,
}

/// Why the entrypoint could not run the step or hand its result back; never carries a secret
/// (no variable's value, no file's content).
#[derive(Debug, thiserror::Error)]
pub enum StepTaskError {
    /// The input key is not where [`FargateSteps`](crate::fargate::FargateSteps) puts inputs.
    #[error(
        "the input key {0:?} is not of the form steps/<deployment>/<step>/<attempt>/input.sealed"
    )]
    InputKey(String),
    /// Reading, opening, sealing or putting failed (S3, KMS, a sealed input that does not open).
    #[error(transparent)]
    Sealed(#[from] FargateError),
    /// Running as root, the entrypoint found no such user to run the command as.
    #[error(
        "no user {0:?} to run the step's command as (the step image makes `overture-step`); \
         the entrypoint runs as root and never runs a step's command as root"
    )]
    NoSuchUser(String),
    /// The job names a file outside the work directory.
    #[error("the job names the file {path:?}, which {reason}")]
    FileOutside {
        /// The path as the job names it.
        path: PathBuf,
        /// Which rule it breaks.
        reason: &'static str,
    },
    /// A file or directory of the work directory could not be made or read.
    #[error("cannot {action} {path}: {source}")]
    WorkDir {
        /// What was being done.
        action: &'static str,
        /// Where.
        path: PathBuf,
        /// The system's error.
        source: io::Error,
    },
    /// A file to collect is larger than the engine reads back.
    #[error("the step left {path:?} larger than {limit} bytes, the most read back of a file")]
    CollectedTooLarge {
        /// The path as the job names it.
        path: PathBuf,
        /// The most read back.
        limit: u64,
    },
    /// The command could not be started, waited for or killed.
    #[error("cannot {action} the step's command: {source}")]
    Command {
        /// What was being done.
        action: &'static str,
        /// The system's error (it names no variable's value).
        source: io::Error,
    },
}

/// Who the command runs as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunAs {
    /// The entrypoint's own user (the entrypoint does not run as root, so cannot switch).
    Caller,
    /// Another user, switched to before the command starts.
    User {
        /// Its user id.
        uid: u32,
        /// Its group id.
        gid: u32,
    },
}

impl RunAs {
    /// Whom to run a command as for `--user NAME|UID`: that user when running as root (looked
    /// up in `/etc/passwd`; a number not listed there is taken as uid and gid), else the caller.
    pub fn resolve(user: &str) -> Result<Self, StepTaskError> {
        // SAFETY: geteuid has no preconditions and touches no memory.
        if unsafe { libc::geteuid() } != 0 {
            return Ok(RunAs::Caller);
        }
        let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
        let number = user.parse::<u32>().ok();
        let listed = passwd.lines().find_map(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            let (name, uid, gid) = (fields.first()?, fields.get(2)?, fields.get(3)?);
            let (uid, gid) = (uid.parse::<u32>().ok()?, gid.parse::<u32>().ok()?);
            (*name == user || Some(uid) == number).then_some((uid, gid))
        });
        let (uid, gid) = match (listed, number) {
            (Some(ids), _) => ids,
            (None, Some(uid)) => (uid, uid),
            (None, None) => return Err(StepTaskError::NoSuchUser(user.to_owned())),
        };
        if uid == 0 {
            return Err(StepTaskError::NoSuchUser(user.to_owned()));
        }
        Ok(RunAs::User { uid, gid })
    }
}

/// Runs the attempt whose sealed input `run.input` names, and puts its sealed result beside it;
/// the command's exit code (128 + the signal's number when a signal ended it). The command's
/// output is copied to `echo` as it comes, the deployment's secrets masked.
pub async fn run_step(
    s3: &aws_sdk_s3::Client,
    kms: &aws_sdk_kms::Client,
    run: &StepRun,
    echo: Box<dyn Write + Send>,
) -> Result<i32, StepTaskError> {
    let attempt = AttemptRef::of_input_key(&run.input)
        .ok_or_else(|| StepTaskError::InputKey(run.input.clone()))?;
    let run_as = RunAs::resolve(&run.user)?;
    let sealed = s3
        .get_object()
        .bucket(&run.bucket)
        .key(&run.input)
        .send()
        .await
        .map_err(call("S3", "GetObject"))?
        .body
        .collect()
        .await
        .map_err(call("S3", "GetObject"))?
        .into_bytes();
    let (input, data_key) = open_input(kms, &attempt, &sealed).await?;

    let work = run.work_dir.clone();
    let placing = input_files(&input)?;
    let outputs = tokio::task::spawn_blocking(move || place(&work, placing, run_as))
        .await
        .map_err(|join| StepTaskError::WorkDir {
            action: "prepare",
            path: run.work_dir.clone(),
            source: io::Error::other(join),
        })??;

    // What CloudWatch Logs keeps is masked as the attempt's log is, and so is the tail: cut at
    // its start, it may begin inside a secret.
    let secrets: Vec<SecretString> = input
        .masked
        .iter()
        .cloned()
        .map(SecretString::from)
        .collect();
    let masker = Masker::new(&secrets);
    let echo = Box::new(MaskingWriter::new(echo, masker.clone()));
    let (exit, output) = run_command(&input, &run.work_dir, &outputs, run_as, echo).await?;
    let output = if output.len() >= input.output_limit {
        masker.mask_tail(&output)
    } else {
        masker.mask_bytes(&output)
    }
    .into_bytes();

    let work = run.work_dir.clone();
    let collect = input.collect.clone();
    let left = tokio::task::spawn_blocking(move || read_back(&work, &outputs, &collect))
        .await
        .map_err(|join| StepTaskError::WorkDir {
            action: "read back",
            path: run.work_dir.clone(),
            source: io::Error::other(join),
        })??;
    let result = AttemptResult {
        output: encode(&output),
        outputs_file: match left.outputs_file {
            OutputsFile::Read(content) => Ok(encode(&content)),
            OutputsFile::TooLarge { bytes, limit } => Err((bytes, limit)),
        },
        collected: left
            .collected
            .into_iter()
            .map(|(path, content)| (path, encode(&content)))
            .collect(),
    };
    let body = seal_result(&data_key, &attempt, &result)?;
    s3.put_object()
        .bucket(&run.bucket)
        .key(format!("{}result.sealed", attempt.prefix()))
        .body(ByteStream::from(body))
        .send()
        .await
        .map_err(call("S3", "PutObject"))?;
    Ok(exit)
}

/// The job's files, decoded, each checked to stay under the work directory.
fn input_files(input: &AttemptInput) -> Result<Vec<(PathBuf, Vec<u8>)>, StepTaskError> {
    for path in input
        .files
        .iter()
        .map(|(path, _)| path)
        .chain(&input.collect)
    {
        if let Some(reason) = path_outside(path) {
            return Err(StepTaskError::FileOutside {
                path: path.clone(),
                reason,
            });
        }
    }
    input
        .files
        .iter()
        .map(|(path, content)| {
            use base64::Engine as _;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(content)
                .map_err(|_| {
                    FargateError::DoesNotOpen(format!("input's file {path:?} is not base64"))
                })?;
            Ok((path.clone(), bytes))
        })
        .collect()
}

/// Makes the work directory (private to the command's user) with the job's files and an empty
/// outputs file in it; the outputs file's path.
fn place(
    work: &Path,
    files: Vec<(PathBuf, Vec<u8>)>,
    run_as: RunAs,
) -> Result<PathBuf, StepTaskError> {
    let failed = |action, path: &Path| {
        let path = path.to_owned();
        move |source| StepTaskError::WorkDir {
            action,
            path,
            source,
        }
    };
    let own = |path: &Path| match run_as {
        RunAs::Caller => Ok(()),
        RunAs::User { uid, gid } => lchown(path, Some(uid), Some(gid)),
    };
    if let Some(parent) = work.parent() {
        std::fs::create_dir_all(parent).map_err(failed("create", parent))?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(work) {
        // The image's own /work, empty.
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
        other => other.map_err(failed("create", work))?,
    }
    std::fs::set_permissions(work, std::fs::Permissions::from_mode(0o700))
        .map_err(failed("restrict", work))?;
    own(work).map_err(failed("hand over", work))?;

    let write_new = |path: &Path, content: &[u8]| -> Result<(), StepTaskError> {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .and_then(|mut file| file.write_all(content))
            .map_err(failed("write", path))?;
        own(path).map_err(failed("hand over", path))
    };
    for (relative, content) in files {
        // Each directory on the way, made here and handed over, or already one of the job's.
        let mut dir = work.to_owned();
        let parents: Vec<_> = relative
            .parent()
            .into_iter()
            .flat_map(Path::components)
            .collect();
        for component in parents {
            dir.push(component);
            match std::fs::symlink_metadata(&dir) {
                Ok(metadata) if metadata.is_dir() => continue,
                Ok(_) => return Err(failed("create", &dir)(io::ErrorKind::NotADirectory.into())),
                Err(error) if error.kind() == io::ErrorKind::NotFound => {}
                Err(error) => return Err(failed("create", &dir)(error)),
            }
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(&dir)
                .map_err(failed("create", &dir))?;
            own(&dir).map_err(failed("hand over", &dir))?;
        }
        write_new(&work.join(&relative), &content)?;
    }
    let outputs = work.join(OUTPUTS_FILE);
    write_new(&outputs, b"")?;
    Ok(outputs)
}

/// Runs the command to its end or its timeout; its exit code and its output's tail.
async fn run_command(
    input: &AttemptInput,
    work: &Path,
    outputs: &Path,
    run_as: RunAs,
    mut echo: Box<dyn Write + Send>,
) -> Result<(i32, Vec<u8>), StepTaskError> {
    let failed = |action| move |source| StepTaskError::Command { action, source };
    // One pipe for stdout and stderr, so they interleave as they were written.
    let (reader, writer) = pipe().map_err(failed("make a pipe for"))?;
    let stderr = writer.try_clone().map_err(failed("make a pipe for"))?;
    let mut command = tokio::process::Command::new("/bin/sh");
    command
        .arg("-c")
        .arg(&input.command)
        .env_clear()
        .envs(input.env.iter().map(|(name, value)| (name, value)))
        .envs(input.secret_env.iter().map(|(name, value)| (name, value)))
        .env("PATH", STEP_PATH)
        .env("HOME", work)
        .env("OVERTURE_OUTPUTS", outputs)
        .current_dir(work)
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(stderr)
        .process_group(0)
        .kill_on_drop(true);
    if let RunAs::User { uid, gid } = run_as {
        // std drops the supplementary groups too (setgroups) before setgid and setuid.
        command.uid(uid).gid(gid);
    }
    let spawned = command.spawn();
    // The command's copies of the pipe's writing end must go, or the pipe never closes.
    drop(command);
    let mut child = spawned.map_err(failed("start"))?;
    let group = child.id();

    let tail = Arc::new(Mutex::new(TailBuffer::new(input.output_limit)));
    let copying = {
        let tail = Arc::clone(&tail);
        tokio::task::spawn_blocking(move || {
            copy_output(reader, &mut echo, &tail);
            echo
        })
    };

    let timeout = Duration::from_millis(input.timeout_ms);
    let status = tokio::select! {
        status = child.wait() => Some(status.map_err(failed("wait for"))?),
        () = tokio::time::sleep(timeout) => None,
    };
    let timed_out = status.is_none();
    // Also after a normal exit: whatever the command left running in the background goes.
    if let Some(group) = group {
        kill_group(group).map_err(failed("kill"))?;
    }
    let status = match status {
        Some(status) => status,
        None => child.wait().await.map_err(failed("wait for"))?,
    };
    if let RunAs::User { uid, gid } = run_as {
        kill_every_process_of(uid, gid).map_err(failed("kill"))?;
        // A killed process dies when it is next scheduled; until then it may finish a call.
        tokio::task::spawn_blocking(move || wait_until_none_of(uid, CLOSE_GRACE))
            .await
            .unwrap_or_else(|join| Err(io::Error::other(join)))
            .map_err(failed("wait for the end of"))?;
    }
    let echo = match tokio::time::timeout(CLOSE_GRACE, copying).await {
        Ok(Ok(echo)) => Some(echo),
        // A process that escaped the kill keeps the pipe open; the tail so far is what is kept.
        Ok(Err(_)) | Err(_) => None,
    };
    let mut tail = tail.lock().unwrap_or_else(PoisonError::into_inner);
    if timed_out {
        // Said where the user reads the output: the attempt's log and CloudWatch Logs.
        let said = format!(
            "overture: the command ran past its timeout ({} ms) and was killed\n",
            input.timeout_ms
        );
        tail.push(said.as_bytes());
        if let Some(mut echo) = echo {
            let _ = echo.write_all(said.as_bytes()).and_then(|()| echo.flush());
        }
    }
    let output = std::mem::replace(&mut *tail, TailBuffer::new(0)).into_vec();
    Ok((exit_code(status), output))
}

/// Copies the command's output to `echo` and into `tail` until every writer has closed it;
/// `echo` is flushed once, at the end (a masking writer holds back what may begin a secret
/// until then).
fn copy_output(mut reader: File, echo: &mut dyn Write, tail: &Mutex<TailBuffer>) {
    let mut buffer = vec![0u8; 16 * 1024];
    let mut echoing = true;
    loop {
        match reader.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => {
                if echoing && echo.write_all(&buffer[..n]).is_err() {
                    // The log is a copy; the command and its tail go on without it.
                    echoing = false;
                }
                tail.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(&buffer[..n]);
            }
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    if echoing {
        let _ = echo.flush();
    }
}

/// A pipe, both ends close-on-exec (the command gets its own copies as stdout and stderr).
fn pipe() -> io::Result<(File, File)> {
    let mut fds: [RawFd; 2] = [-1; 2];
    // SAFETY: `fds` is a valid array of two ints for the kernel to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded, so both are fresh descriptors that nothing else owns.
    let (reader, writer) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    Ok((File::from(reader), File::from(writer)))
}

/// The command's exit code as a shell reports it: 128 + the signal's number when one ended it.
fn exit_code(status: ExitStatus) -> i32 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(signal)) => 128 + signal,
        (None, None) => 128,
    }
}

/// Kills the command's process group; a group already gone is no failure.
fn kill_group(group: u32) -> io::Result<()> {
    let group = libc::pid_t::try_from(group).map_err(io::Error::other)?;
    // SAFETY: killpg sends a signal to a process group; it touches no memory.
    if unsafe { libc::killpg(group, libc::SIGKILL) } == 0 {
        return Ok(());
    }
    match io::Error::last_os_error() {
        error if error.raw_os_error() == Some(libc::ESRCH) => Ok(()),
        error => Err(error),
    }
}

/// Kills every process of the command's user, wherever it went (a daemon out of the group),
/// from a short-lived process of that user: `kill(-1)` reaches exactly the processes its caller
/// may signal, all of that user's, and never its caller.
fn kill_every_process_of(uid: u32, gid: u32) -> io::Result<()> {
    let mut killer = std::process::Command::new("/bin/sh");
    killer
        .args(["-c", "exit 0"])
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .uid(uid)
        .gid(gid);
    // SAFETY: kill(2) is async-signal-safe and the closure allocates nothing; it runs in the
    // child after setuid, so it can only reach processes of the command's user.
    unsafe {
        killer.pre_exec(|| {
            if libc::kill(-1, libc::SIGKILL) == 0 {
                return Ok(());
            }
            match io::Error::last_os_error() {
                // No other process of that user was left.
                error if error.raw_os_error() == Some(libc::ESRCH) => Ok(()),
                error => Err(error),
            }
        });
    }
    let status = killer.status()?;
    if status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!("the killer ended with {status}")))
    }
}

/// Waits until no live process of `uid` is left (zombies are dead already), at most `grace`.
/// Each process's `Uid:` line in `/proc/<pid>/status` is read rather than the owner of its
/// directory, which is root for a process that made itself undumpable (ssh-agent does).
fn wait_until_none_of(uid: u32, grace: Duration) -> io::Result<()> {
    let start = std::time::Instant::now();
    loop {
        let mut left = false;
        for entry in std::fs::read_dir("/proc")?.flatten() {
            if entry.file_name().to_string_lossy().parse::<u32>().is_err() {
                continue;
            }
            // A process gone meanwhile has no status to read.
            let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else {
                continue;
            };
            let field = |name: &str| {
                status
                    .lines()
                    .find_map(|line| line.strip_prefix(name))
                    .unwrap_or_default()
                    .to_owned()
            };
            let ours = field("Uid:")
                .split_whitespace()
                .any(|id| id.parse() == Ok(uid));
            let dead = field("State:").trim_start().starts_with('Z');
            left |= ours && !dead;
        }
        if !left {
            return Ok(());
        }
        if start.elapsed() > grace {
            return Err(io::Error::other(format!(
                "processes of uid {uid} were still running {grace:?} after they were killed"
            )));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// What the command left behind.
struct Left {
    /// Its `$OVERTURE_OUTPUTS` file.
    outputs_file: OutputsFile,
    /// The files of the job's `collect` that it left, as regular files.
    collected: Vec<(PathBuf, Vec<u8>)>,
}

/// What the command left: its outputs file and the files the job collects.
fn read_back(work: &Path, outputs: &Path, collect: &[PathBuf]) -> Result<Left, StepTaskError> {
    let outputs_file = match read_outputs_file(outputs, MAX_OUTPUTS_FILE) {
        Ok(file) => file,
        // The command removed it: it wrote no outputs.
        Err(error) if error.kind() == io::ErrorKind::NotFound => OutputsFile::default(),
        Err(source) => {
            return Err(StepTaskError::WorkDir {
                action: "read",
                path: outputs.to_owned(),
                source,
            })
        }
    };
    let mut collected = Vec::new();
    for relative in collect {
        match read_inside(work, relative, MAX_COLLECTED_FILE) {
            Ok(Some(content)) => collected.push((relative.clone(), content)),
            Ok(None) => {}
            Err(error) if error.kind() == io::ErrorKind::FileTooLarge => {
                return Err(StepTaskError::CollectedTooLarge {
                    path: relative.clone(),
                    limit: MAX_COLLECTED_FILE,
                })
            }
            Err(source) => {
                return Err(StepTaskError::WorkDir {
                    action: "read",
                    path: work.join(relative),
                    source,
                })
            }
        }
    }
    Ok(Left {
        outputs_file,
        collected,
    })
}
