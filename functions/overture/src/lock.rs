//! The data directory's locks, all `flock`s the kernel releases when their process dies.
//!
//! - [`EngineLock`]: every process that drives deployments holds `engine.lock` shared; `overture
//!   resume` needs it exclusive, because only when no other engine is alive may it treat every
//!   in-flight job and every running attempt as orphaned.
//! - [`DestroyLock`]: one `overture destroy` of a deployment at a time. The aggregate lets a
//!   destroy whose process died carry on, so without it two processes at once would both run
//!   `terraform destroy` on the same state.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;

use overture_events::DeploymentId;

/// A held lock; released when dropped (the kernel releases it if the process dies).
#[derive(Debug)]
pub struct EngineLock {
    _file: File,
}

/// Another engine holds the lock.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another process drives deployments in this data directory.
    #[error("another overture process is driving deployments in {0}; run this again once it has stopped")]
    Busy(String),
    /// The lock file could not be opened.
    #[error("cannot open the engine lock in {dir}: {source}")]
    Io { dir: String, source: std::io::Error },
}

impl EngineLock {
    /// Takes the lock shared (any number of deploying processes) or exclusive, without waiting.
    pub fn take(data_dir: &Path, exclusive: bool) -> Result<Self, LockError> {
        let dir = data_dir.display().to_string();
        let mode = if exclusive {
            libc::LOCK_EX
        } else {
            libc::LOCK_SH
        };
        match try_flock(&data_dir.join("engine.lock"), mode) {
            Ok(Some(file)) => Ok(Self { _file: file }),
            Ok(None) => Err(LockError::Busy(dir)),
            Err(source) => Err(LockError::Io { dir, source }),
        }
    }
}

/// Held while one process destroys a deployment; released when dropped.
#[derive(Debug)]
pub struct DestroyLock {
    _file: File,
}

/// Another process destroys the deployment, or the lock file could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum DestroyLockError {
    /// Another `overture destroy` of this deployment is running.
    #[error("another `overture destroy {0}` is running; run this again once it has ended")]
    Busy(DeploymentId),
    /// The lock file could not be made or opened.
    #[error("cannot open the destroy lock in {dir}: {source}")]
    Io { dir: String, source: std::io::Error },
}

impl DestroyLock {
    /// Takes the deployment's destroy lock (`locks/destroy-<id>.lock`), without waiting.
    pub fn take(data_dir: &Path, deployment: DeploymentId) -> Result<Self, DestroyLockError> {
        let dir = data_dir.join("locks");
        let io = |source| DestroyLockError::Io {
            dir: dir.display().to_string(),
            source,
        };
        std::fs::create_dir_all(&dir).map_err(io)?;
        match try_flock(
            &dir.join(format!("destroy-{deployment}.lock")),
            libc::LOCK_EX,
        ) {
            Ok(Some(file)) => Ok(Self { _file: file }),
            Ok(None) => Err(DestroyLockError::Busy(deployment)),
            Err(source) => Err(io(source)),
        }
    }
}

/// Opens (creating) `path` and takes a `flock` of `mode` on it without waiting: `None` when
/// another process holds a conflicting one.
fn try_flock(path: &Path, mode: libc::c_int) -> std::io::Result<Option<File>> {
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)?;
    // SAFETY: flock on a descriptor this function owns; no memory is shared with the kernel.
    let taken = unsafe { libc::flock(file.as_raw_fd(), mode | libc::LOCK_NB) };
    Ok((taken == 0).then_some(file))
}
