//! The data directory's engine lock.
//!
//! Every process that drives deployments holds `engine.lock` shared; `overture resume` needs it
//! exclusive, because only when no other engine is alive may it treat every in-flight job and
//! every running attempt as orphaned.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;

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
        let file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(data_dir.join("engine.lock"))
            .map_err(|source| LockError::Io {
                dir: dir.clone(),
                source,
            })?;
        let mode = if exclusive {
            libc::LOCK_EX
        } else {
            libc::LOCK_SH
        };
        // SAFETY: flock on a descriptor this function owns; no memory is shared with the kernel.
        let taken = unsafe { libc::flock(file.as_raw_fd(), mode | libc::LOCK_NB) };
        if taken == 0 {
            Ok(Self { _file: file })
        } else {
            Err(LockError::Busy(dir))
        }
    }
}
