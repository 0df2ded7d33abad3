//! The payload store of the embedded engine: one file per payload, `payloads/<sha256>` in the
//! data directory.
//!
//! A payload is written to a temporary file of its own beside its final name, synced, then
//! renamed over it, so a reader sees all of it or nothing and two writers of the same bytes
//! cannot tear each other's. Payloads are not secrets, but they are a tenant's (a blueprint's
//! files): like all of the data directory, readable by the engine's user alone, whatever the
//! umask.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use overture_kit::payload::{check_hash, payload_hash, verified, PayloadError, StorePayloads};

use crate::data_dir::{DIR_MODE, FILE_MODE};

/// Payloads as files under one folder (`<data dir>/payloads`).
#[derive(Clone, Debug)]
pub struct DirPayloads {
    root: PathBuf,
}

impl DirPayloads {
    /// A store in `root`, created on the first put.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// Where the payload named `hash` is kept; `hash` must have passed [`check_hash`].
    pub fn path_of(&self, hash: &str) -> PathBuf {
        self.root.join(hash)
    }
}

#[async_trait]
impl StorePayloads for DirPayloads {
    async fn put(&self, bytes: &[u8]) -> Result<String, PayloadError> {
        let hash = payload_hash(bytes);
        let (root, path, bytes) = (self.root.clone(), self.path_of(&hash), bytes.to_vec());
        let name = hash.clone();
        tokio::task::spawn_blocking(move || put_blocking(&root, &path, &name, &bytes))
            .await
            .map_err(|e| PayloadError::Unavailable(e.into()))??;
        Ok(hash)
    }

    async fn get(&self, hash: &str) -> Result<Vec<u8>, PayloadError> {
        check_hash(hash)?;
        let path = self.path_of(hash);
        let read = tokio::task::spawn_blocking(move || std::fs::read(path))
            .await
            .map_err(|e| PayloadError::Unavailable(e.into()))?;
        match read {
            Ok(bytes) => verified(hash, bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(PayloadError::NotFound {
                hash: hash.to_owned(),
            }),
            Err(e) => Err(io_error(e)),
        }
    }
}

fn put_blocking(root: &Path, path: &Path, hash: &str, bytes: &[u8]) -> Result<(), PayloadError> {
    // Already there and whole: nothing to do. A damaged copy is replaced.
    if std::fs::read(path).is_ok_and(|found| payload_hash(&found) == hash) {
        return Ok(());
    }
    std::fs::create_dir_all(root).map_err(io_error)?;
    std::fs::set_permissions(root, std::fs::Permissions::from_mode(DIR_MODE)).map_err(io_error)?;
    let temporary = root.join(format!(".{hash}.{}.tmp", uuid::Uuid::new_v4().simple()));
    let written = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(FILE_MODE)
            .open(&temporary)?;
        // `mode` is filtered by the umask; set it outright so the file is as intended.
        file.set_permissions(std::fs::Permissions::from_mode(FILE_MODE))?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&temporary, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    written.map_err(io_error)
}

/// A refused access will not change by asking again; anything else (a full disk) may.
fn io_error(error: std::io::Error) -> PayloadError {
    if error.kind() == std::io::ErrorKind::PermissionDenied {
        PayloadError::Refused(error.into())
    } else {
        PayloadError::Unavailable(error.into())
    }
}
