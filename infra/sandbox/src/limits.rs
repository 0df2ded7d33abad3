//! What keeps one attempt from starving the machine, beside the [`cgroup`](super::cgroup) it runs
//! in: its workspace (`/work` and the outputs file, everything the step can write that is not
//! in memory already) is a tmpfs of the workspace limit's size, mounted on the host before its
//! inputs are written and unmounted before the workspace is removed, so a step that fills it
//! gets `ENOSPC` and nothing else runs short of disk. Its pages are memory, charged to the
//! attempt that writes them, so the memory limit bounds them too.
//!
//! After the run, [`reached`] tells which limit a failed attempt ran into.

use std::io;
use std::path::Path;

use overture_events::StepLimits;
use overture_runner::sandbox::LimitReached;

use super::cgroup::{AttemptGroup, Reached};

/// Below this much free space a workspace counts as full: a writer stops at the last block
/// that no longer fits, which may leave a few pages over.
const FULL_SLACK: u64 = 64 * 1024;

/// Mounts a tmpfs of `bytes` at `dir` (the new, empty workspace directory), private to root.
pub(super) fn mount_workspace(dir: &Path, bytes: u64) -> io::Result<()> {
    let target = c_path(dir)?;
    let options =
        std::ffi::CString::new(format!("size={bytes},mode=0700")).map_err(io::Error::other)?;
    // SAFETY: every pointer is a NUL-terminated string that outlives the call.
    let rc = unsafe {
        libc::mount(
            c"overture-work".as_ptr(),
            target.as_ptr(),
            c"tmpfs".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            options.as_ptr().cast(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Unmounts the workspace tmpfs at `dir`, if there is one; the files in it go with it.
pub(super) fn unmount_workspace(dir: &Path) -> io::Result<()> {
    let target = c_path(dir)?;
    // SAFETY: `target` is a NUL-terminated string that outlives the call.
    let rc = unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH | libc::UMOUNT_NOFOLLOW) };
    if rc != 0 {
        let error = io::Error::last_os_error();
        // Not a mount point (never mounted, or unmounted already), or gone.
        if matches!(error.raw_os_error(), Some(libc::EINVAL | libc::ENOENT)) {
            return Ok(());
        }
        return Err(error);
    }
    Ok(())
}

/// Every workspace tmpfs mounted under `root`, from `/proc/self/mountinfo`, deepest first.
pub(super) fn mounts_under(root: &Path) -> Vec<std::path::PathBuf> {
    let Ok(mountinfo) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    let mut found: Vec<std::path::PathBuf> = mountinfo
        .lines()
        .filter_map(|line| line.split_whitespace().nth(4))
        // Paths with spaces are escaped as \040 in mountinfo; workspace roots of ours have none
        // in practice, and one that does is simply not found here.
        .map(std::path::PathBuf::from)
        .filter(|mount| mount.starts_with(root) && mount != root)
        .collect();
    found.sort_by_key(|mount| std::cmp::Reverse(mount.components().count()));
    found
}

/// Whether the file system at `dir` has (almost) no space left.
fn is_full(dir: &Path) -> bool {
    let Ok(path) = c_path(dir) else {
        return false;
    };
    // SAFETY: `stat` is plain data the kernel fills.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are valid for the duration of the call.
    if unsafe { libc::statvfs(path.as_ptr(), &mut stat) } != 0 {
        return false;
    }
    #[allow(clippy::unnecessary_cast)]
    let free = (stat.f_bavail as u64).saturating_mul(stat.f_frsize as u64);
    free < FULL_SLACK
}

/// The limit a failed attempt ran into, if it ran into one: memory, then processes, then the
/// workspace, since running out of the first often shows as failing at the next.
pub(super) fn reached(
    group: Option<&AttemptGroup>,
    work: &Path,
    limits: &StepLimits,
) -> Option<LimitReached> {
    let cgroup = group.map(AttemptGroup::reached).unwrap_or_default();
    if cgroup.contains(&Reached::Memory) {
        return Some(LimitReached::Memory {
            limit: limits.memory_bytes,
        });
    }
    if cgroup.contains(&Reached::Pids) {
        return Some(LimitReached::Processes { limit: limits.pids });
    }
    is_full(work).then_some(LimitReached::Workspace {
        limit: limits.workspace_bytes,
    })
}

fn c_path(path: &Path) -> io::Result<std::ffi::CString> {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(io::Error::other)
}
