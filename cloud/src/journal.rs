//! The resources journal: one JSON line per resource the cloud is *about to* create, and one per
//! resource it removed. Whatever is recorded and not removed is what a clean-up must undo, even
//! after the cloud was killed with SIGKILL: the journal lives in the state directory, and the
//! kernel keeps a killed process's writes.
//!
//! A namespace is recorded before it exists, a process right after it is spawned (its pid is
//! known only then); a process not yet recorded is still found, because [`undo`] kills whatever
//! runs in the instance's namespaces before deleting them.

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::network;
use crate::process::ProcessId;

/// Something the cloud creates on the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Resource {
    /// A network namespace (a server).
    Namespace {
        /// Its name.
        name: String,
    },
    /// A link on the host: a project's bridge or a server's veth.
    Link {
        /// Its name.
        name: String,
    },
    /// A process (a server's bubblewrap, whose death ends every process of the server).
    Process {
        /// Its pid.
        pid: u32,
        /// Its start time, so a reused pid is never killed.
        start_time: u64,
    },
    /// The instance's claim on its id and network in the host-wide registry.
    Claim {
        /// The claim file.
        path: PathBuf,
    },
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
enum Entry {
    Creating { resource: Resource },
    Removed { resource: Resource },
}

/// The journal could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// Reading or writing the file failed.
    #[error("the resources journal {path}: {source}")]
    Io {
        /// The journal file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A line in the middle of the journal is not an entry.
    #[error("the resources journal {path}, line {line}: {message}; remove what it lists by hand (`ip netns list`, `ip link`)")]
    Corrupt {
        /// The journal file.
        path: PathBuf,
        /// The line number (1-based).
        line: usize,
        /// What was wrong.
        message: String,
    },
    /// Some recorded resources could not be removed; the journal is kept for another try.
    #[error("could not remove everything the cloud created: {}", .0.join("; "))]
    LeftBehind(Vec<String>),
}

/// The journal of one running cloud.
#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    file: Mutex<File>,
}

impl Journal {
    /// Opens (or starts) the journal at `path` for appending.
    pub fn open(path: &Path) -> Result<Self, JournalError> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(path)
            .map_err(|source| io_error(path, source))?;
        Ok(Self {
            path: path.to_owned(),
            file: Mutex::new(file),
        })
    }

    /// Records that `resource` is about to be created.
    pub fn creating(&self, resource: &Resource) -> Result<(), JournalError> {
        self.append(Entry::Creating {
            resource: resource.clone(),
        })
    }

    /// Records that `resource` was removed.
    pub fn removed(&self, resource: &Resource) -> Result<(), JournalError> {
        self.append(Entry::Removed {
            resource: resource.clone(),
        })
    }

    fn append(&self, entry: Entry) -> Result<(), JournalError> {
        let mut line = serde_json::to_string(&entry).map_err(|e| JournalError::Io {
            path: self.path.clone(),
            source: e.into(),
        })?;
        line.push('\n');
        let mut file = self
            .file
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        // One write per line: a process killed mid-way leaves whole lines, or a torn last one.
        file.write_all(line.as_bytes())
            .map_err(|source| io_error(&self.path, source))
    }
}

fn io_error(path: &Path, source: std::io::Error) -> JournalError {
    JournalError::Io {
        path: path.to_owned(),
        source,
    }
}

/// What the journal at `path` records as created and not removed, oldest first.
pub fn outstanding(path: &Path) -> Result<Vec<Resource>, JournalError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(io_error(path, source)),
    };
    let lines: Vec<&str> = text.lines().collect();
    let mut live: Vec<Resource> = Vec::new();
    for (at, line) in lines.iter().enumerate() {
        match serde_json::from_str::<Entry>(line) {
            Ok(Entry::Creating { resource }) => {
                if !live.contains(&resource) {
                    live.push(resource);
                }
            }
            Ok(Entry::Removed { resource }) => live.retain(|r| *r != resource),
            // A torn last line is a write the kill interrupted; its resource was not created yet.
            Err(_) if at + 1 == lines.len() => {}
            Err(error) => {
                return Err(JournalError::Corrupt {
                    path: path.to_owned(),
                    line: at + 1,
                    message: error.to_string(),
                })
            }
        }
    }
    Ok(live)
}

/// Removes everything the journal at `path` records, then the journal itself. Idempotent:
/// what is already gone is skipped. Blocking (it runs `ip`).
pub fn undo(path: &Path) -> Result<(), JournalError> {
    let resources = outstanding(path)?;
    let mut left = Vec::new();
    // Processes first: a server's bubblewrap takes every process of the server with it.
    for resource in &resources {
        if let Resource::Process { pid, start_time } = resource {
            let process = ProcessId {
                pid: *pid,
                start_time: *start_time,
            };
            if !process.kill(Duration::from_secs(5)) {
                left.push(format!("process {pid} (still running after SIGKILL)"));
            }
        }
    }
    for resource in &resources {
        match resource {
            Resource::Namespace { name } => {
                match network::namespace_pids(name).run_blocking() {
                    Ok(pids) => network::kill_listed(&pids),
                    Err(error) if error.is_missing() => {}
                    Err(error) => left.push(format!("namespace {name}: {error}")),
                }
                if let Err(error) =
                    network::ignore_missing(network::delete_namespace(name).run_blocking())
                {
                    left.push(format!("namespace {name}: {error}"));
                }
            }
            Resource::Link { name } => {
                if let Err(error) =
                    network::ignore_missing(network::delete_link(name).run_blocking())
                {
                    left.push(format!("link {name}: {error}"));
                }
            }
            Resource::Process { .. } | Resource::Claim { .. } => {}
        }
    }
    // The claim goes last: while it exists, no other instance takes this instance's id.
    if left.is_empty() {
        for resource in &resources {
            if let Resource::Claim { path: claim } = resource {
                match std::fs::remove_file(claim) {
                    Ok(()) => {}
                    Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                    Err(error) => left.push(format!("claim {}: {error}", claim.display())),
                }
            }
        }
    }
    if !left.is_empty() {
        return Err(JournalError::LeftBehind(left));
    }
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(io_error(path, source)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(name: &str) -> Resource {
        Resource::Link { name: name.into() }
    }

    #[test]
    fn outstanding_is_what_was_created_and_not_removed() {
        let Ok(dir) = tempfile::tempdir() else {
            panic!("no temp dir")
        };
        let path = dir.path().join("journal");
        let Ok(journal) = Journal::open(&path) else {
            panic!("cannot open")
        };
        for (created, resource) in [
            (true, link("a")),
            (true, Resource::Namespace { name: "n".into() }),
            (true, link("b")),
            (false, link("a")),
        ] {
            let written = if created {
                journal.creating(&resource)
            } else {
                journal.removed(&resource)
            };
            assert!(written.is_ok());
        }
        let found = outstanding(&path).unwrap_or_default();
        assert_eq!(
            found,
            vec![Resource::Namespace { name: "n".into() }, link("b")]
        );
    }

    #[test]
    fn a_torn_last_line_is_skipped_but_a_corrupt_middle_is_an_error() {
        let Ok(dir) = tempfile::tempdir() else {
            panic!("no temp dir")
        };
        let path = dir.path().join("journal");
        let whole = r#"{"op":"creating","resource":{"kind":"link","name":"x"}}"#;
        let _ = std::fs::write(&path, format!("{whole}\n{{\"op\":\"crea"));
        assert_eq!(outstanding(&path).unwrap_or_default(), vec![link("x")]);
        let _ = std::fs::write(&path, format!("garbage\n{whole}\n"));
        assert!(matches!(
            outstanding(&path),
            Err(JournalError::Corrupt { line: 1, .. })
        ));
        assert_eq!(
            outstanding(&dir.path().join("none")).unwrap_or_default(),
            vec![]
        );
    }

    #[test]
    fn undoing_what_is_already_gone_succeeds_and_removes_the_journal() {
        let Ok(dir) = tempfile::tempdir() else {
            panic!("no temp dir")
        };
        let path = dir.path().join("journal");
        let claim = dir.path().join("claim");
        let _ = std::fs::write(&claim, "{}");
        let Ok(journal) = Journal::open(&path) else {
            panic!("cannot open")
        };
        assert!(journal
            .creating(&Resource::Claim {
                path: claim.clone()
            })
            .is_ok());
        // A pid that cannot be this process: the start time does not match.
        let me = std::process::id();
        assert!(journal
            .creating(&Resource::Process {
                pid: me,
                start_time: 1
            })
            .is_ok());
        assert!(undo(&path).is_ok());
        assert!(!claim.exists());
        assert!(!path.exists());
        assert!(undo(&path).is_ok());
    }
}
