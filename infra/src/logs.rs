//! Every attempt's output as files: `logs/<deployment>/<step>/<attempt>.log` (and `destroy.log`)
//! in the data directory, written masked by the runner and read by `overture logs`.

use std::fs::{DirBuilder, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use overture_events::DeploymentId;
use overture_runner::logs::{AttemptLogs, LogName};
use overture_runner::PortError;

/// Attempt logs under one directory.
#[derive(Clone, Debug)]
pub struct LogFiles {
    root: PathBuf,
}

impl LogFiles {
    /// Logs under `root` (the data directory's `logs/`).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The file holding the output of this run of a step.
    pub fn path(&self, deployment: DeploymentId, step: &str, name: LogName) -> PathBuf {
        self.step_dir(deployment, step).join(format!("{name}.log"))
    }

    /// The attempts of a step that have a log, in order.
    pub fn attempts(&self, deployment: DeploymentId, step: &str) -> std::io::Result<Vec<u32>> {
        let dir = self.step_dir(deployment, step);
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
            Err(error) => return Err(error),
        };
        let mut attempts = Vec::new();
        for entry in entries {
            let name = entry?.file_name();
            let attempt = Path::new(&name)
                .file_stem()
                .and_then(|stem| stem.to_str())
                .and_then(|stem| stem.parse::<u32>().ok());
            attempts.extend(attempt);
        }
        attempts.sort_unstable();
        Ok(attempts)
    }

    fn step_dir(&self, deployment: DeploymentId, step: &str) -> PathBuf {
        self.root.join(deployment.to_string()).join(step)
    }
}

impl AttemptLogs for LogFiles {
    fn create(
        &self,
        deployment: DeploymentId,
        step: &str,
        name: LogName,
    ) -> Result<Box<dyn Write + Send + Sync>, PortError> {
        let path = self.path(deployment, step, name);
        let failed = |action: &str, error: std::io::Error| {
            let message = format!("could not {action} {}: {error}", path.display());
            // No right to the data directory stays so; a full disk or a busy one may pass.
            if error.kind() == std::io::ErrorKind::PermissionDenied {
                PortError::refused(message)
            } else {
                PortError::unavailable(message)
            }
        };
        if let Some(dir) = path.parent() {
            DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| failed("create", e))?;
        }
        // Each destroy run adds to the step's destroy log, so the output of a failed run is still
        // there after the one that carried on; an attempt's log is written once.
        let again = name == LogName::Destroy;
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .append(again)
            .truncate(!again)
            .mode(0o600)
            .open(&path)
            .map_err(|e| failed("create", e))?;
        Ok(Box::new(file))
    }
}
