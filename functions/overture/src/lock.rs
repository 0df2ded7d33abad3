//! The data directory's locks, all `flock`s the kernel releases when their process dies.
//!
//! - [`EngineLock`]: every process that drives deployments holds `engine.lock` shared; `overture
//!   resume` needs it exclusive, because only when no other engine is alive may it treat every
//!   in-flight job and every running attempt as orphaned.
//! - [`DriveLock`]: held by the process driving one deployment, so `overture cancel` knows
//!   whether a live engine will carry its cancel out or it must do so itself.
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
        match deployment_lock(data_dir, "destroy", deployment) {
            Ok(Some(file)) => Ok(Self { _file: file }),
            Ok(None) => Err(DestroyLockError::Busy(deployment)),
            Err((dir, source)) => Err(DestroyLockError::Io { dir, source }),
        }
    }
}

/// Held by the process driving a deployment (`deploy`, or `cancel` carrying its cancel out);
/// released when dropped or when that process dies.
#[derive(Debug)]
pub struct DriveLock {
    _file: File,
}

impl DriveLock {
    /// Takes the deployment's drive lock (`locks/drive-<id>.lock`) without waiting: `None` when
    /// a live process drives the deployment.
    pub fn take(data_dir: &Path, deployment: DeploymentId) -> Result<Option<Self>, std::io::Error> {
        deployment_lock(data_dir, "drive", deployment)
            .map(|file| file.map(|file| Self { _file: file }))
            .map_err(|(_, source)| source)
    }
}

/// Takes `locks/<purpose>-<id>.lock` exclusively without waiting: `None` when another process
/// holds it; on failure, the folder and the error.
fn deployment_lock(
    data_dir: &Path,
    purpose: &str,
    deployment: DeploymentId,
) -> Result<Option<File>, (String, std::io::Error)> {
    let dir = data_dir.join("locks");
    let io = |source| (dir.display().to_string(), source);
    std::fs::create_dir_all(&dir).map_err(io)?;
    try_flock(
        &dir.join(format!("{purpose}-{deployment}.lock")),
        libc::LOCK_EX,
    )
    .map_err(io)
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
