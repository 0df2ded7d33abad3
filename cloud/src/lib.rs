//! The local cloud: the OpenStack subset Overture uses, on one machine (see `API.md`).
//!
//! Servers are real: each is a network namespace on its project's bridge, running its own sshd
//! under bubblewrap; security groups are nftables inside each server's namespace. Everything is
//! served on 127.0.0.1, and every name the cloud creates carries its instance id, so several
//! clouds run side by side.
//!
//! - This file: [`start`] and [`serve`] a cloud on a state directory, [`clean_up`] after one.
//! - `state`: what the cloud knows and the API's rules, pure (no I/O).
//! - `cloud`: the running cloud, carrying each change of the state out on the host.
//! - `api`: the HTTP API, one module per service (`keystone`, `nova`, `neutron`, `admin`).
//! - `firewall`: security groups as one nft script per server.
//! - `network`: bridges, namespaces, veths and firewalls through `ip` and `nft`.
//! - `server`: a server's files and its sshd; `cloud_init`: its `user_data`.
//! - `journal`: every resource recorded before it is created, and undoing them all.
//! - `instance`: picking a free instance id and /16 on a host shared with other clouds.
//! - [`dir`]: the state directory's files; [`process`]: processes by pid and start time.
//! - `command`: external commands, run async or blocking; `cidr`, `secret`: small helpers.

mod api;
mod cidr;
mod cloud;
mod cloud_init;
mod command;
pub mod dir;
mod error;
mod firewall;
mod instance;
mod journal;
mod network;
pub mod process;
mod secret;
mod server;
mod state;

use std::fs::{File, OpenOptions};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::task::JoinHandle;

use crate::cloud::Cloud;
use crate::journal::Journal;

pub use dir::{CloudInfo, StateDir};
pub use error::CloudError;
pub use instance::DEFAULT_REGISTRY;
pub use journal::JournalError;

/// How to run a cloud.
#[derive(Debug, Clone)]
pub struct CloudConfig {
    /// The state directory (created if missing).
    pub dir: PathBuf,
    /// The port on 127.0.0.1; 0 picks a free one.
    pub port: u16,
    /// The host-wide registry where clouds claim their ids and networks.
    pub registry: PathBuf,
}

impl CloudConfig {
    /// A cloud on `dir`, on any free port, registered in [`DEFAULT_REGISTRY`].
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            port: 0,
            registry: PathBuf::from(DEFAULT_REGISTRY),
        }
    }
}

/// A cloud serving in this process. [`Running::shutdown`] stops it and cleans up; dropping it
/// asks for the same and lets it happen in the background (the directory stays locked until it
/// is done, so [`clean_up`] answers [`CloudError::AlreadyRunning`] meanwhile). If the runtime
/// stops first, what is left is for [`clean_up`].
#[derive(Debug)]
pub struct Running {
    info: CloudInfo,
    dir: PathBuf,
    admin_token: String,
    cloud: Arc<Cloud>,
    task: Option<JoinHandle<Result<(), CloudError>>>,
}

/// Stops a running cloud from elsewhere (a signal handler, say).
#[derive(Debug, Clone)]
pub struct Stopper(Arc<Cloud>);

impl Stopper {
    /// Asks the cloud to stop; it then removes everything it created.
    pub fn stop(&self) {
        self.0.request_shutdown();
    }
}

impl Running {
    /// What `DIR/cloud.json` holds.
    pub fn info(&self) -> &CloudInfo {
        &self.info
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        &self.info.url
    }

    /// Keystone's URL, for `OS_AUTH_URL`.
    pub fn auth_url(&self) -> &str {
        &self.info.auth_url
    }

    /// The admin API's token.
    pub fn admin_token(&self) -> &str {
        &self.admin_token
    }

    /// The state directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A handle that stops the cloud.
    pub fn stopper(&self) -> Stopper {
        Stopper(Arc::clone(&self.cloud))
    }

    /// Stops the cloud and removes everything it created.
    pub async fn shutdown(self) -> Result<(), CloudError> {
        self.cloud.request_shutdown();
        self.wait().await
    }

    /// Serves until a shutdown is asked for (admin API or [`Stopper`]), then cleans up.
    pub async fn wait(mut self) -> Result<(), CloudError> {
        let Some(task) = self.task.take() else {
            return Ok(());
        };
        match task.await {
            Ok(outcome) => outcome,
            Err(error) => Err(CloudError::Crashed(error.to_string())),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.task.is_some() {
            self.cloud.request_shutdown();
        }
    }
}

/// Starts a cloud on `config.dir` and returns once it answers on 127.0.0.1.
///
/// What a previous cloud left in the directory (it was killed, say) is cleaned up first.
pub async fn start(config: CloudConfig) -> Result<Running, CloudError> {
    let dir = StateDir::new(&config.dir);
    dir.create()?;
    let lock = take_lock(&dir)?;
    let leftovers = dir.clone();
    blocking(move || remove_everything(&leftovers)).await??;
    let journal = Journal::open(&dir.journal())?;
    let (registry, root) = (config.registry.clone(), dir.root().to_owned());
    let (journal, claimed) = blocking(move || {
        let claimed = instance::claim(&registry, &journal, &root);
        (journal, claimed)
    })
    .await?;
    // The serving task holds a duplicate of the lock (an flock belongs to the open file, which
    // stays locked while any duplicate is open); this one keeps it through a failed start.
    let outcome = match (claimed, lock.try_clone()) {
        (Ok(instance), Ok(held)) => launch(&config, &dir, journal, instance, held).await,
        (Err(error), _) => Err(error),
        (_, Err(source)) => Err(dir.error(source)),
    };
    if outcome.is_err() {
        let dir = dir.clone();
        let _ = blocking(move || remove_everything(&dir)).await;
    }
    outcome
}

async fn launch(
    config: &CloudConfig,
    dir: &StateDir,
    journal: Journal,
    instance: instance::Instance,
    lock: File,
) -> Result<Running, CloudError> {
    let admin_token = secret::random_hex(32);
    dir.write_private(&dir.admin_token(), &admin_token)?;
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, config.port))
        .await
        .map_err(|source| CloudError::Listen {
            port: config.port,
            source,
        })?;
    let port = listener
        .local_addr()
        .map_err(|source| CloudError::Listen {
            port: config.port,
            source,
        })?
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let pid = std::process::id();
    let info = CloudInfo {
        pid,
        pid_start_time: process::ProcessId::of(pid)
            .map(|p| p.start_time)
            .unwrap_or_default(),
        auth_url: format!("{url}/identity/v3"),
        url: url.clone(),
        instance: instance.names.id().to_owned(),
        network: instance.network.to_string(),
    };
    let text = serde_json::to_string_pretty(&info).map_err(|e| dir.error(e.into()))?;
    let cloud = Arc::new(Cloud::new(
        state::State::new(instance.network),
        journal,
        instance.names.clone(),
        dir.clone(),
        url,
        admin_token.clone(),
    ));
    // Written before serving starts, but after the listener is bound: whoever reads cloud.json
    // can connect at once.
    dir.write_private(&dir.info(), &text)?;
    let router = api::router(Arc::clone(&cloud));
    let serving = Arc::clone(&cloud);
    let task = tokio::spawn(async move {
        // Held until everything is removed: no clean-up or other cloud races the tear-down.
        let _held = (lock, instance);
        let stop = Arc::clone(&serving);
        let served = axum::serve(listener, router)
            .with_graceful_shutdown(async move { stop.shutdown_requested().await })
            .await;
        let torn_down = serving.tear_down().await;
        served.map_err(CloudError::Serve)?;
        torn_down
    });
    tracing::info!(
        url = %info.url,
        instance = %info.instance,
        network = %info.network,
        "cloud serving"
    );
    Ok(Running {
        info,
        dir: dir.root().to_owned(),
        admin_token,
        cloud,
        task: Some(task),
    })
}

/// Runs a cloud on `config.dir` until it is shut down through the admin API, SIGTERM or SIGINT;
/// then removes everything it created.
pub async fn serve(config: CloudConfig) -> Result<(), CloudError> {
    let running = start(config).await?;
    let stopper = running.stopper();
    let signals = tokio::spawn(async move {
        use tokio::signal::unix::{signal, SignalKind};
        match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            (Ok(mut terminate), Ok(mut interrupt)) => {
                tokio::select! {
                    _ = terminate.recv() => {}
                    _ = interrupt.recv() => {}
                }
                tracing::info!("signal received: shutting down");
                stopper.stop();
            }
            _ => tracing::warn!("cannot listen for signals; stop the cloud through its admin API"),
        }
    });
    let outcome = running.wait().await;
    signals.abort();
    outcome
}

/// Removes everything a cloud on `dir` created (namespaces, links, processes, its claim), from
/// its journal, and its state files. For a cloud that was killed: refused while one serves `dir`.
/// Idempotent; blocking.
pub fn clean_up(dir: &Path) -> Result<(), CloudError> {
    let dir = StateDir::new(dir);
    if !dir.root().is_dir() {
        return Ok(());
    }
    let _lock = take_lock(&dir)?;
    remove_everything(&dir)
}

/// Takes `DIR/serve.lock`, or says that a cloud serves `DIR`.
fn take_lock(dir: &StateDir) -> Result<File, CloudError> {
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.lock())
        .map_err(|source| dir.error(source))?;
    match instance::flock(&file, libc::LOCK_EX | libc::LOCK_NB) {
        Ok(()) => Ok(file),
        Err(error) if error.raw_os_error() == Some(libc::EWOULDBLOCK) => {
            Err(CloudError::AlreadyRunning(dir.root().to_owned()))
        }
        Err(source) => Err(dir.error(source)),
    }
}

/// Undoes the journal and removes the state files (the log stays). The caller holds the lock.
fn remove_everything(dir: &StateDir) -> Result<(), CloudError> {
    journal::undo(&dir.journal())?;
    let removed = |outcome: std::io::Result<()>| match outcome {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => Err(dir.error(error)),
        _ => Ok(()),
    };
    removed(std::fs::remove_dir_all(dir.servers()))?;
    removed(std::fs::remove_file(dir.info()))?;
    removed(std::fs::remove_file(dir.admin_token()))?;
    Ok(())
}

async fn blocking<R: Send + 'static>(
    work: impl FnOnce() -> R + Send + 'static,
) -> Result<R, CloudError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| CloudError::Crashed(e.to_string()))
}
