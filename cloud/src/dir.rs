//! The state directory `DIR` of a cloud:
//!
//! - `cloud.json`: how to reach the running cloud ([`CloudInfo`]);
//! - `admin-token`: the admin API's token (mode 0600);
//! - `journal`: what the cloud created and has not removed (see [`journal`](crate::journal));
//! - `serve.lock`: held (`flock`) by the process serving this directory;
//! - `servers/ID/`: each server's own `/root`, `/tmp`, `/var/tmp`, `/srv`, `/run`, and its sshd log;
//! - `cloud.log`: the output of a cloud started by `overture cloud up`.

use std::fs::OpenOptions;
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::process::ProcessId;
use crate::CloudError;

/// The paths of a state directory.
#[derive(Debug, Clone)]
pub struct StateDir {
    root: PathBuf,
}

impl StateDir {
    /// The state directory at `root`.
    pub fn new(root: &Path) -> Self {
        Self {
            root: root.to_owned(),
        }
    }

    /// The directory itself.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `cloud.json`.
    pub fn info(&self) -> PathBuf {
        self.root.join("cloud.json")
    }

    /// `admin-token`.
    pub fn admin_token(&self) -> PathBuf {
        self.root.join("admin-token")
    }

    /// `journal`.
    pub fn journal(&self) -> PathBuf {
        self.root.join("journal")
    }

    /// `serve.lock`.
    pub fn lock(&self) -> PathBuf {
        self.root.join("serve.lock")
    }

    /// `servers/`.
    pub fn servers(&self) -> PathBuf {
        self.root.join("servers")
    }

    /// `cloud.log`.
    pub fn log(&self) -> PathBuf {
        self.root.join("cloud.log")
    }

    /// Creates the directory (mode 0700) if missing.
    pub fn create(&self) -> Result<(), CloudError> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.root)
            .map_err(|source| self.error(source))
    }

    pub(crate) fn error(&self, source: std::io::Error) -> CloudError {
        CloudError::Dir {
            path: self.root.clone(),
            source,
        }
    }

    /// Writes a file atomically (a temporary file renamed over it), readable by root only.
    pub(crate) fn write_private(&self, path: &Path, text: &str) -> Result<(), CloudError> {
        let temporary = path.with_extension("new");
        let write = || -> std::io::Result<()> {
            let mut file = OpenOptions::new()
                .create(true)
                .write(true)
                .truncate(true)
                .mode(0o600)
                .open(&temporary)?;
            file.write_all(text.as_bytes())?;
            std::fs::rename(&temporary, path)
        };
        write().map_err(|source| self.error(source))
    }

    /// The running cloud's `cloud.json`, if there is one.
    pub fn read_info(&self) -> Result<Option<CloudInfo>, CloudError> {
        match std::fs::read_to_string(self.info()) {
            Ok(text) => serde_json::from_str(&text)
                .map(Some)
                .map_err(|e| CloudError::BadInfo {
                    path: self.info(),
                    message: e.to_string(),
                }),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(self.error(source)),
        }
    }

    /// The admin token.
    pub fn read_admin_token(&self) -> Result<String, CloudError> {
        std::fs::read_to_string(self.admin_token())
            .map(|text| text.trim().to_owned())
            .map_err(|source| self.error(source))
    }
}

/// `DIR/cloud.json`: where the cloud serving `DIR` listens, and which process it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CloudInfo {
    /// The serving process.
    pub pid: u32,
    /// Its start time, so that a reused pid is never taken for it.
    pub pid_start_time: u64,
    /// The base URL, `http://127.0.0.1:PORT`.
    pub url: String,
    /// Keystone's URL (`OS_AUTH_URL`).
    pub auth_url: String,
    /// The instance id that prefixes every name it creates.
    pub instance: String,
    /// Its /16.
    pub network: String,
}

impl CloudInfo {
    /// The serving process, as recorded.
    pub fn process(&self) -> ProcessId {
        ProcessId {
            pid: self.pid,
            start_time: self.pid_start_time,
        }
    }
}
