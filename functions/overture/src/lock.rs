//! The data directory's locks, all `flock`s the kernel releases when their process dies.
//!
//! - [`EngineLock`]: every process that drives deployments holds `engine.lock` shared; `overture
//!   resume` needs it exclusive, because only when no other engine is alive may it treat every
//!   in-flight job and every running attempt as orphaned.
//! - [`ServeLock`]: held by the one `overture engine` serving the data directory.
//! - [`DriveLock`]: held by the process driving one deployment, so `overture cancel` knows
//!   whether a live engine will carry its cancel out or it must do so itself.
//! - [`DestroyLock`]: one `overture destroy` of a deployment at a time. The aggregate lets a
//!   destroy whose process died carry on, so without it two processes at once would both run
//!   `terraform destroy` on the same state.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

use overture_events::DeploymentId;
use overture_infra::data_dir::{DIR_MODE, FILE_MODE};

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
    /// Another `overture engine` serves this data directory.
    #[error(
        "another `overture engine` serves {0}; `overture deploy` hands its deployments to that one"
    )]
    Serving(String),
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

/// Held by the one `overture engine` serving a data directory (`engine-serve.lock`).
#[derive(Debug)]
pub struct ServeLock {
    _file: File,
}

impl ServeLock {
    /// Takes the lock without waiting.
    pub fn take(data_dir: &Path) -> Result<Self, LockError> {
        let dir = data_dir.display().to_string();
        match try_flock(&data_dir.join("engine-serve.lock"), libc::LOCK_EX) {
            Ok(Some(file)) => Ok(Self { _file: file }),
            Ok(None) => Err(LockError::Serving(dir)),
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
    /// Takes the deployment's destroy lock (its byte of `locks/destroy.lock`), without waiting.
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
    /// Takes the deployment's drive lock (its byte of `locks/drive.lock`) without waiting: `None` when
    /// a live process drives the deployment.
    pub fn take(data_dir: &Path, deployment: DeploymentId) -> Result<Option<Self>, std::io::Error> {
        deployment_lock(data_dir, "drive", deployment)
            .map(|file| file.map(|file| Self { _file: file }))
            .map_err(|(_, source)| source)
    }
}

/// Takes the deployment's lock of `purpose` exclusively without waiting: `None` when another
/// process holds it; on failure, the folder and the error.
///
/// Every deployment's lock of one purpose is a byte of one file, `locks/<purpose>.lock`, at an
/// offset made from the deployment's id, locked with an open file description lock (which the
/// kernel, like a `flock`, ties to this open file and releases when the process dies). A file
/// per deployment left a file behind for every deployment ever driven, and creating one cost 15
/// to 40 µs where locking a byte costs about 3.
fn deployment_lock(
    data_dir: &Path,
    purpose: &str,
    deployment: DeploymentId,
) -> Result<Option<File>, (String, std::io::Error)> {
    let dir = data_dir.join("locks");
    let io = |source| (dir.display().to_string(), source);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(&dir)
        .map_err(io)?;
    let file = File::options()
        .mode(FILE_MODE)
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(format!("{purpose}.lock")))
        .map_err(io)?;
    // SAFETY: a plain C struct, all of whose fields are integers; zero is valid for each.
    let mut range: libc::flock = unsafe { std::mem::zeroed() };
    range.l_type = libc::F_WRLCK as libc::c_short;
    range.l_whence = libc::SEEK_SET as libc::c_short;
    range.l_start = lock_offset(deployment);
    range.l_len = 1;
    // SAFETY: fcntl on a descriptor this function owns, with a pointer to a live `flock` it
    // only reads.
    let taken = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &range) };
    if taken == 0 {
        return Ok(Some(file));
    }
    let error = std::io::Error::last_os_error();
    match error.raw_os_error() {
        Some(libc::EAGAIN | libc::EACCES) => Ok(None),
        _ => Err(io(error)),
    }
}

/// Where a deployment's byte is in a lock file: its id's two halves folded together, within
/// the offsets a file may have. Two deployments meet on one byte once in 2^62.
fn lock_offset(deployment: DeploymentId) -> libc::off_t {
    let bits = deployment.uuid().as_u128();
    let folded = (bits as u64) ^ ((bits >> 64) as u64);
    libc::off_t::try_from(folded >> 2).unwrap_or_default()
}

/// Opens (creating) `path` and takes a `flock` of `mode` on it without waiting: `None` when
/// another process holds a conflicting one.
fn try_flock(path: &Path, mode: libc::c_int) -> std::io::Result<Option<File>> {
    let file = File::options()
        .mode(FILE_MODE)
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)?;
    // SAFETY: flock on a descriptor this function owns; no memory is shared with the kernel.
    let taken = unsafe { libc::flock(file.as_raw_fd(), mode | libc::LOCK_NB) };
    Ok((taken == 0).then_some(file))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment() -> DeploymentId {
        DeploymentId::from_uuid(uuid::Uuid::now_v7())
    }

    #[test]
    fn a_deployment_lock_is_held_once_and_free_again_when_dropped() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let (one, other) = (deployment(), deployment());
        let held = DriveLock::take(dir.path(), one).expect("lockable");
        assert!(held.is_some(), "a free lock is taken");
        assert!(
            DriveLock::take(dir.path(), one)
                .expect("lockable")
                .is_none(),
            "a held lock is not taken again, in this process or another"
        );
        assert!(
            DriveLock::take(dir.path(), other)
                .expect("lockable")
                .is_some(),
            "another deployment's lock is free"
        );
        assert!(
            DestroyLock::take(dir.path(), one).is_ok(),
            "a lock of another purpose is free"
        );
        drop(held);
        assert!(DriveLock::take(dir.path(), one)
            .expect("lockable")
            .is_some());
        let files = std::fs::read_dir(dir.path().join("locks")).expect("the locks folder");
        assert_eq!(
            files.count(),
            2,
            "one file per purpose, however many deployments"
        );
    }
}
