//! Sandboxes left behind by an engine that died.
//!
//! `--die-with-parent` kills a sandbox when its engine dies, but not when the engine dies while
//! bubblewrap is still setting the sandbox up: the sandbox's init then outlives it. Recovery
//! therefore finds this engine's own sandboxes by their workspace path, which every sandbox
//! process of ours carries on its command line, and kills them by PID.

use std::path::Path;

use super::workspace::{read_inside, WORK_DIR};
use super::{Bubblewrap, MAX_COLLECTED_FILE};

impl Bubblewrap {
    /// Kills every process whose command line names a workspace under this sandbox root;
    /// returns how many were signalled. Call it only when no live engine uses this root.
    pub fn kill_leftovers(&self) -> std::io::Result<usize> {
        let killed = kill_processes_naming(&self.workspace_root)?;
        // Their cgroups, with anything that escaped the search above killed in them.
        if let Ok(cgroups) = &self.cgroups {
            cgroups.remove_leftovers()?;
        }
        Ok(killed)
    }

    /// Unmounts the `/work` of every workspace left under this root, so the workspaces can be
    /// removed. Call it only once [`leftover_files`](Self::leftover_files) has read them.
    pub fn unmount_leftovers(&self) -> std::io::Result<()> {
        for mount in super::limits::mounts_under(&self.workspace_root) {
            super::limits::unmount_workspace(&mount)?;
        }
        Ok(())
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
