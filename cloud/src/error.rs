//! What can stop a cloud from starting, serving or cleaning up.

use std::path::PathBuf;

use crate::command::CommandError;
use crate::journal::JournalError;

/// A cloud could not start, serve or clean up.
#[derive(Debug, thiserror::Error)]
pub enum CloudError {
    /// Another process serves this state directory.
    #[error("a cloud is already running in {0}; stop it first (`overture cloud down --dir {0}`)")]
    AlreadyRunning(PathBuf),
    /// The state directory or one of its files could not be used.
    #[error("cannot use the cloud's state directory {path}: {source}")]
    Dir {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// `cloud.json` is not what the cloud writes.
    #[error("{path} is not a cloud's cloud.json ({message}); remove it if no cloud runs there")]
    BadInfo {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        message: String,
    },
    /// The host-wide registry of clouds could not be used.
    #[error("cannot use the registry of clouds in {path}: {source}")]
    Registry {
        /// The registry directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Every instance id seems taken (claims are never this many: the registry is broken).
    #[error("no free instance id; remove stale claims from the registry (/run/overture-cloud)")]
    NoInstanceId,
    /// Every /16 of 10.0.0.0/8 overlaps an address or route of the host, or another cloud.
    #[error("no free /16 in 10.0.0.0/8: each overlaps an address or a route of this machine or another running cloud")]
    NoNetwork,
    /// The resources journal failed.
    #[error(transparent)]
    Journal(#[from] JournalError),
    /// An `ip` or `nft` command failed.
    #[error(transparent)]
    Command(#[from] CommandError),
    /// The HTTP listener could not be opened.
    #[error("cannot listen on 127.0.0.1:{port}: {source}")]
    Listen {
        /// The port asked for (0: any).
        port: u16,
        /// Why.
        source: std::io::Error,
    },
    /// The HTTP server failed.
    #[error("the cloud's HTTP server failed: {0}")]
    Serve(std::io::Error),
    /// The task serving the cloud ended abnormally.
    #[error("the cloud stopped abnormally: {0}")]
    Crashed(String),
}
