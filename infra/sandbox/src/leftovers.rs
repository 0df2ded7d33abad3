//! Sandboxes left behind by an engine or a runner that died.
//!
//! `--die-with-parent` kills a sandbox when its engine dies, but not when the engine dies while
//! bubblewrap is still setting the sandbox up: the sandbox's init then outlives it. And nothing
//! dies with it of the attempt's cgroup or its workspace, a tmpfs that holds its files in
//! memory. Recovery therefore finds this root's own sandboxes by their workspace path, which
//! every sandbox process of ours carries on its command line, and kills them by PID; removes
//! the cgroups under this root's own parent group; and unmounts and removes the workspaces
//! under this root. [`RootHold`] keeps a process that starts beside a live one from clearing
//! that one's sandboxes.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use super::workspace::{read_inside, WORK_DIR};
use super::{Bubblewrap, MAX_COLLECTED_FILE};

/// What was cleared of the sandboxes a dead process left, for the log line that says so.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Cleared {
    /// Processes killed: sandboxes' inits, steps and pastas that outlived their engine.
    pub processes: usize,
    /// Attempts' cgroups removed.
    pub cgroups: usize,
    /// Workspaces unmounted and removed.
    pub workspaces: usize,
}

impl Cleared {
    /// Whether nothing was left.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

impl std::fmt::Display for Cleared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} process(es) killed, {} cgroup(s) and {} workspace(s) removed",
            self.processes, self.cgroups, self.workspaces
        )
    }
}

impl Bubblewrap {
    /// Kills every process whose command line names a workspace under this sandbox root, and
    /// removes this root's cgroups (killing what is still in them). Call it only when no live
    /// process uses this root; the counts go into [`Cleared`] (workspaces are counted by
    /// [`remove_leftovers`](Self::remove_leftovers)).
    pub fn kill_leftovers(&self) -> std::io::Result<Cleared> {
        let processes = kill_processes_naming(&self.workspace_root)?;
        // Their cgroups, with anything that escaped the search above killed in them.
        let cgroups = match &self.cgroups {
            Ok(cgroups) => cgroups.remove_leftovers()?,
            Err(_) => 0,
        };
        Ok(Cleared {
            processes,
            cgroups,
            workspaces: 0,
        })
    }

    /// Unmounts the `/work` of every workspace left under this root, so the workspaces can be
    /// removed. Call it only once [`leftover_files`](Self::leftover_files) has read them.
    pub fn unmount_leftovers(&self) -> std::io::Result<()> {
        for mount in super::limits::mounts_under(&self.workspace_root) {
            super::limits::unmount_workspace(&mount)?;
        }
        Ok(())
    }

    /// Unmounts and removes every workspace left under this root; returns how many there were.
    /// Call it only once [`leftover_files`](Self::leftover_files) has read them.
    pub fn remove_leftovers(&self) -> std::io::Result<usize> {
        self.unmount_leftovers()?;
        let entries = match std::fs::read_dir(&self.workspace_root) {
            Ok(entries) => entries,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(error) => return Err(error),
        };
        let mut removed = 0;
        for entry in entries {
            let path = entry?.path();
            match std::fs::symlink_metadata(&path)?.is_dir() {
                true => std::fs::remove_dir_all(&path)?,
                false => std::fs::remove_file(&path)?,
            }
            removed += 1;
        }
        Ok(removed)
    }

    /// Where this sandbox's attempts' cgroups go (one directory on cgroup v2, three on v1), or
    /// none when the machine has no cgroups to use.
    pub fn cgroup_parents(&self) -> Vec<PathBuf> {
        self.cgroups
            .as_ref()
            .map(super::cgroup::Cgroups::parents)
            .unwrap_or_default()
    }

    /// Takes this root for a process that runs sandboxes in it, for as long as the hold lives:
    /// alone ([`RootHold::alone`]) when no other live process holds it, and then that process
    /// may clear what dead ones left before it [shares](RootHold::share) the root.
    pub fn hold_root(&self) -> std::io::Result<RootHold> {
        let mut path = self.workspace_root.clone().into_os_string();
        path.push(".lock");
        if let Some(parent) = self.workspace_root.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)?;
        if flock(&file, libc::LOCK_EX | libc::LOCK_NB)? {
            return Ok(RootHold { file, alone: true });
        }
        // Another live process uses the root; waits only while one clears it.
        flock(&file, libc::LOCK_SH)?;
        Ok(RootHold { file, alone: false })
    }
    /// The file at `relative` (under `/work`) in every workspace left under this root, by
    /// sandbox id: what a run killed with its engine had written so far. Read as
    /// [`collect`](super::SandboxRequest::collect) reads, never through a link. Call it only
    /// once [`kill_leftovers`](Self::kill_leftovers) has run.
    pub fn leftover_files(&self, relative: &Path) -> std::io::Result<Vec<(String, Vec<u8>)>> {
        let entries = match std::fs::read_dir(&self.workspace_root) {
            Ok(entries) => entries,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
            Err(error) => return Err(error),
        };
        let mut found = Vec::new();
        for entry in entries {
            let entry = entry?;
            let Some(id) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            if !entry.file_type()?.is_dir() {
                continue;
            }
            let work = entry.path().join(WORK_DIR);
            match read_inside(&work, relative, MAX_COLLECTED_FILE) {
                Ok(Some(content)) => found.push((id, content)),
                Ok(None) => {}
                // One unreadable leftover must not keep the others from being read.
                Err(error) => tracing::warn!(sandbox = %id, %error, "cannot read a leftover file"),
            }
        }
        Ok(found)
    }
}

fn kill_processes_naming(root: &Path) -> std::io::Result<usize> {
    let mut needle = root.as_os_str().as_encoded_bytes().to_vec();
    needle.push(b'/');
    let mut killed = 0;
    for entry in std::fs::read_dir("/proc")?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        if pid != std::process::id() as i32
            && cmdline
                .windows(needle.len())
                .any(|w| w == needle.as_slice())
        {
            // SAFETY: kill(2) with a PID read from /proc; it shares no memory with this process.
            if unsafe { libc::kill(pid, libc::SIGKILL) } == 0 {
                killed += 1;
            }
        }
    }
    Ok(killed)
}

/// A process's hold on a sandbox root: a lock beside it, let go when the process ends however
/// it ends, so a dead process holds nothing.
#[derive(Debug)]
pub struct RootHold {
    file: File,
    alone: bool,
}

impl RootHold {
    /// Whether no other live process holds the root: what is under it was left by dead ones.
    pub fn alone(&self) -> bool {
        self.alone
    }

    /// Lets other processes take the root beside this one, once its leftovers are cleared.
    pub fn share(mut self) -> std::io::Result<Self> {
        flock(&self.file, libc::LOCK_SH)?;
        self.alone = false;
        Ok(self)
    }
}

/// `flock(2)` on `file`; `false` when a non-blocking lock is held by another process.
fn flock(file: &File, operation: libc::c_int) -> std::io::Result<bool> {
    // SAFETY: flock on an open descriptor has no memory effects.
    if unsafe { libc::flock(file.as_raw_fd(), operation) } == 0 {
        return Ok(true);
    }
    let error = std::io::Error::last_os_error();
    match error.raw_os_error() {
        Some(libc::EWOULDBLOCK) => Ok(false),
        _ => Err(error),
    }
}
