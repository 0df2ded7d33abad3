//! The per-attempt workspace on the host, `<workspace root>/<id>/`, and the guard that removes
//! it on every path out of a run.
//!
//! ```text
//! <id>/work/      the step's /work: its inputs, its cwd and HOME (read-write)
//! <id>/outputs    bound at /run/overture/outputs (read-write)
//! <id>/command    a command too long for an argument, bound at /run/overture/command (read-only)
//! <id>/etc/       passwd and group for the sandbox (read-only)
//! ```
//!
//! What the step may touch (`work/` and all in it, `outputs`, `command`) belongs to the step's
//! user ([`STEP_UID`]); the rest stays root's. The step sees only what is bound into its sandbox,
//! never `<id>` itself.
//!
//! `<id>` itself is a tmpfs of the step's workspace limit (see `limits`), unmounted before the
//! directory is removed.

use std::fs::{self, DirBuilder, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

pub(super) use overture_runner::sandbox::read_inside;
use overture_runner::sandbox::read_outputs_file;
use overture_runner::sandbox::OutputsFile;

use super::error::SandboxError;
use super::request::{STEP_GID, STEP_UID};

/// The step's working directory, inside the workspace.
pub(super) const WORK_DIR: &str = "work";
/// The file the step's `$OVERTURE_OUTPUTS` points at, inside the workspace.
pub(super) const OUTPUTS_FILE: &str = "outputs";
/// The file holding a command too long to pass as an argument, inside the workspace.
pub(super) const COMMAND_FILE: &str = "command";
/// The sandbox's own `/etc/passwd` and `/etc/group`, inside the workspace.
pub(super) const ETC_DIR: &str = "etc";

// Made up rather than bound from the host, so the step learns nothing of the host's accounts,
// while programs that look up their uid (ssh does) still find a user, with HOME at /work.
const PASSWD: &str = "root:x:0:0:root:/root:/usr/sbin/nologin\n\
                      step:x:65533:65533:step:/work:/bin/sh\n\
                      nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n";
const GROUP: &str = "root:x:0:\nstep:x:65533:\nnogroup:x:65534:\n";

/// A workspace directory that is removed when this is dropped, unless [`Workspace::remove`]
/// removed it first.
#[derive(Debug)]
pub(super) struct Workspace {
    dir: PathBuf,
    removed: bool,
}

impl Workspace {
    /// Creates `<root>/<id>/` and its contents, with `files` under `work/` and `command`, if
    /// given, at [`COMMAND_FILE`]; fails if the directory exists. `id` and the file paths must
    /// have been validated.
    pub(super) async fn create(
        root: PathBuf,
        id: String,
        files: Vec<(PathBuf, Vec<u8>)>,
        command: Option<Vec<u8>>,
        work_bytes: u64,
    ) -> Result<Self, SandboxError> {
        let dir = root.join(&id);
        // If the caller stops waiting, the task still finishes and drops the guard it made.
        tokio::task::spawn_blocking(move || {
            create_blocking(&root, &id, &files, command, work_bytes)
        })
        .await
        .map_err(|source| SandboxError::Workspace {
            action: "create",
            path: dir,
            source: io::Error::other(source),
        })?
    }

    /// The workspace directory.
    pub(super) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Reads back what the step wrote to `$OVERTURE_OUTPUTS`; more than `limit` bytes is not
    /// read, only measured.
    pub(super) async fn read_outputs(&self, limit: u64) -> Result<OutputsFile, SandboxError> {
        let path = self.dir.join(OUTPUTS_FILE);
        let reading = path.clone();
        let read = tokio::task::spawn_blocking(move || read_outputs_file(&reading, limit))
            .await
            .unwrap_or_else(|join| Err(io::Error::other(join)));
        read.map_err(|source| SandboxError::Workspace {
            action: "read",
            path,
            source,
        })
    }

    /// Reads back the files a step left at these paths under `/work`, each up to `limit` bytes.
    ///
    /// Called only once every process of the sandbox is gone, so nothing can swap a file for a
    /// link between the check and the read: a path whose file or any directory on the way is a
    /// symlink, or that is not a regular file, is left out rather than followed out of the
    /// workspace.
    pub(super) async fn collect(
        &self,
        paths: &[PathBuf],
        limit: u64,
    ) -> Result<Vec<(PathBuf, Vec<u8>)>, SandboxError> {
        let work = self.dir.join(WORK_DIR);
        let paths = paths.to_vec();
        tokio::task::spawn_blocking(move || {
            let mut collected = Vec::new();
            for relative in paths {
                let path = work.join(&relative);
                match read_inside(&work, &relative, limit) {
                    Ok(Some(content)) => collected.push((relative, content)),
                    Ok(None) => {}
                    Err(source) if source.kind() == io::ErrorKind::FileTooLarge => {
                        return Err(SandboxError::CollectedTooLarge {
                            path: relative,
                            limit,
                        })
                    }
                    Err(source) => {
                        return Err(SandboxError::Workspace {
                            action: "read",
                            path,
                            source,
                        })
                    }
                }
            }
            Ok(collected)
        })
        .await
        .unwrap_or_else(|join| {
            Err(SandboxError::Workspace {
                action: "read",
                path: self.dir.clone(),
                source: io::Error::other(join),
            })
        })
    }

    /// Removes the directory without blocking the runtime; a failure is logged, since the
    /// outcome of the step matters more than a leftover directory.
    pub(super) async fn remove(mut self) {
        self.removed = true;
        let dir = self.dir.clone();
        let removed = tokio::task::spawn_blocking(move || remove_dir(&dir))
            .await
            .unwrap_or_else(|join| Err(io::Error::other(join)));
        if let Err(error) = removed {
            tracing::error!(dir = %self.dir.display(), %error, "could not remove sandbox workspace");
        }
    }
}

impl Drop for Workspace {
    fn drop(&mut self) {
        if !self.removed {
            // An early return or a dropped `run` future: removing synchronously here is the only
            // way to be sure the directory goes.
            if let Err(error) = remove_dir(&self.dir) {
                tracing::error!(dir = %self.dir.display(), %error, "could not remove sandbox workspace");
            }
        }
    }
}

fn remove_dir(dir: &Path) -> io::Result<()> {
    // The workspace is a mount of its own (see `limits`); a mount point cannot be removed.
    super::limits::unmount_workspace(dir)?;
    // `remove_dir_all` does not follow symlinks, so links the step left in /work are harmless.
    match fs::remove_dir_all(dir) {
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

fn create_blocking(
    root: &Path,
    id: &str,
    files: &[(PathBuf, Vec<u8>)],
    command: Option<Vec<u8>>,
    work_bytes: u64,
) -> Result<Workspace, SandboxError> {
    let private_dirs = {
        let mut builder = DirBuilder::new();
        builder.mode(0o700);
        builder
    };
    let failed = |action, path: &Path| {
        let path = path.to_owned();
        move |source| SandboxError::Workspace {
            action,
            path,
            source,
        }
    };

    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(root)
        .map_err(failed("create", root))?;
    let dir = root.join(id);
    if let Err(source) = private_dirs.create(&dir) {
        return Err(if source.kind() == io::ErrorKind::AlreadyExists {
            SandboxError::WorkspaceExists { path: dir }
        } else {
            failed("create", &dir)(source)
        });
    }
    // Only now is the directory ours to remove.
    let workspace = Workspace {
        dir,
        removed: false,
    };
    // All of it, /work and the outputs file alike, so nothing the step writes reaches the disk.
    super::limits::mount_workspace(&workspace.dir, work_bytes).map_err(|source| {
        SandboxError::Limits {
            action: "mount the workspace",
            source,
        }
    })?;

    let work = workspace.dir.join(WORK_DIR);
    // Searchable by others: bubblewrap enters it (`--chdir`) as root without capabilities,
    // before the step's user takes over. Nothing but the sandbox ever sees it, and only through
    // `<id>`, which is root's alone.
    DirBuilder::new()
        .mode(0o711)
        .create(&work)
        .map_err(failed("create", &work))?;
    fs::set_permissions(&work, fs::Permissions::from_mode(0o711))
        .map_err(failed("chmod", &work))?;
    give_to_step(&work).map_err(failed("chown", &work))?;
    let etc = workspace.dir.join(ETC_DIR);
    private_dirs.create(&etc).map_err(failed("create", &etc))?;
    // Bound read-only; the step's user must read them, and they hold nothing of the host's.
    for (name, content) in [("etc/passwd", PASSWD), ("etc/group", GROUP)] {
        let path = workspace.dir.join(name);
        write_new(&path, content.as_bytes(), 0o644).map_err(failed("write", &path))?;
    }
    let mut steps_own = vec![(OUTPUTS_FILE, Vec::new())];
    if let Some(command) = command {
        steps_own.push((COMMAND_FILE, command));
    }
    for (name, content) in steps_own {
        let path = workspace.dir.join(name);
        write_new(&path, &content, 0o600).map_err(failed("write", &path))?;
        give_to_step(&path).map_err(failed("chown", &path))?;
    }

    for (relative, content) in files {
        let path = work.join(relative);
        // Each directory made on the way is the step's, as /work is.
        let mut missing = Vec::new();
        let mut parent = path.parent();
        while let Some(dir) = parent.filter(|dir| *dir != work && !dir.exists()) {
            missing.push(dir);
            parent = dir.parent();
        }
        for dir in missing.into_iter().rev() {
            private_dirs.create(dir).map_err(failed("create", dir))?;
            give_to_step(dir).map_err(failed("chown", dir))?;
        }
        write_new(&path, content, 0o600).map_err(failed("write", &path))?;
        give_to_step(&path).map_err(failed("chown", &path))?;
    }
    Ok(workspace)
}

/// Writes a file that must not exist yet, so nothing already there is followed or overwritten.
fn write_new(path: &Path, content: &[u8], mode: u32) -> io::Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)?;
    // The engine's umask may be narrower than the mode asked for; the mode is what is meant.
    file.set_permissions(fs::Permissions::from_mode(mode))?;
    file.write_all(content)
}

/// Hands a path the engine just made to the step's user. The step runs without capabilities, so
/// what it reads or writes under /work must be its own.
fn give_to_step(path: &Path) -> io::Result<()> {
    std::os::unix::fs::lchown(path, Some(STEP_UID), Some(STEP_GID))
}
