//! The running cloud: the [`State`] behind a lock, and the effects each change needs (booting and
//! deleting servers, re-applying firewalls). The API handlers parse and render; this acts.
//!
//! Three kinds of locks, always taken in this order and never across an `.await` for the state:
//! - a server's lock (`servers`), held by its boot from creation to `ACTIVE` and by its delete,
//!   so a delete waits for the boot it overlaps;
//! - a project's network lock (`projects`), held while its bridge or a namespace is created or
//!   removed and while its firewalls are re-applied, so that every re-application reads the state
//!   after the change that asked for it and the last one wins;
//! - the state's mutex, held only to read or change the state.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use tokio::sync::{watch, Mutex as AsyncMutex, OwnedMutexGuard};
use uuid::Uuid;

use crate::cloud_init;
use crate::dir::StateDir;
use crate::firewall;
use crate::instance::Names;
use crate::journal::{Journal, Resource};
use crate::network;
use crate::server::{ServerSpec, Sshd};
use crate::state::{NewRule, NewServer, Project, Rule, Server, State, StateError};
use crate::CloudError;

/// A change the cloud did not make.
#[derive(Debug)]
pub enum Failure {
    /// The request breaks a rule of the API.
    Refused(StateError),
    /// The host could not carry the change out (an `ip` or `nft` command failed, say).
    Broken(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Refused(refusal) => refusal.fmt(f),
            Failure::Broken(message) => f.write_str(message),
        }
    }
}

impl From<StateError> for Failure {
    fn from(error: StateError) -> Self {
        Failure::Refused(error)
    }
}

/// What a project's network lock guards.
#[derive(Debug, Default)]
struct ProjectNet {
    /// Whether its bridge exists.
    bridge: bool,
    /// The firewall script last loaded in each server's namespace.
    applied: HashMap<String, String>,
}

/// A server's sshd, if one runs; its lock is the server's lock.
type ServerSlot = Arc<AsyncMutex<Option<Sshd>>>;

/// The shared context of a running cloud.
#[derive(Debug)]
pub struct Cloud {
    state: Mutex<State>,
    journal: Journal,
    names: Names,
    dir: StateDir,
    base_url: String,
    admin_token: String,
    endpoint_ids: [String; 3],
    projects: Mutex<HashMap<String, Arc<AsyncMutex<ProjectNet>>>>,
    servers: Mutex<HashMap<Uuid, ServerSlot>>,
    shutdown: watch::Sender<bool>,
    closing: AtomicBool,
}

impl Cloud {
    /// A cloud with an empty state.
    pub fn new(
        state: State,
        journal: Journal,
        names: Names,
        dir: StateDir,
        base_url: String,
        admin_token: String,
    ) -> Self {
        Self {
            state: Mutex::new(state),
            journal,
            names,
            dir,
            base_url,
            admin_token,
            endpoint_ids: std::array::from_fn(|_| crate::secret::random_hex(16)),
            projects: Mutex::new(HashMap::new()),
            servers: Mutex::new(HashMap::new()),
            shutdown: watch::channel(false).0,
            closing: AtomicBool::new(false),
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The admin API's token.
    pub fn admin_token(&self) -> &str {
        &self.admin_token
    }

    /// The ids of the catalog's identity, compute and network endpoints.
    pub fn endpoint_ids(&self) -> &[String; 3] {
        &self.endpoint_ids
    }

    /// The instance's names.
    pub fn names(&self) -> &Names {
        &self.names
    }

    /// The time now.
    pub fn now() -> DateTime<Utc> {
        Utc::now()
    }

    /// Reads the state.
    pub fn read<R>(&self, read: impl FnOnce(&State) -> R) -> R {
        read(&self.state.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Changes the state.
    pub fn write<R>(&self, write: impl FnOnce(&mut State) -> R) -> R {
        write(&mut self.state.lock().unwrap_or_else(|p| p.into_inner()))
    }

    fn project_net(&self, project_id: &str) -> Arc<AsyncMutex<ProjectNet>> {
        let mut projects = self.projects.lock().unwrap_or_else(|p| p.into_inner());
        projects.entry(project_id.to_owned()).or_default().clone()
    }

    fn server_slot(&self, id: Uuid) -> ServerSlot {
        let mut servers = self.servers.lock().unwrap_or_else(|p| p.into_inner());
        servers.entry(id).or_default().clone()
    }

    fn check_open(&self) -> Result<(), Failure> {
        if self.closing.load(Ordering::SeqCst) {
            Err(Failure::Broken("the cloud is shutting down".into()))
        } else {
            Ok(())
        }
    }

    /// Records a server in `BUILD` and boots it in the background.
    pub async fn create_server(
        self: &Arc<Self>,
        project_id: &str,
        new: NewServer,
    ) -> Result<Server, Failure> {
        self.check_open()?;
        let server = self.write(|state| state.create_server(project_id, new, Self::now()))?;
        // Taken before answering, so a delete that follows at once waits for the boot.
        let guard = self.server_slot(server.id).lock_owned().await;
        tokio::spawn(Arc::clone(self).boot(project_id.to_owned(), server.id, guard));
        Ok(server)
    }

    async fn boot(
        self: Arc<Self>,
        project_id: String,
        server_id: Uuid,
        mut slot: OwnedMutexGuard<Option<Sshd>>,
    ) {
        let outcome = self.bring_up(&project_id, server_id, &mut slot).await;
        let pid = slot.as_ref().map(|sshd| sshd.process.pid);
        let status = match &outcome {
            Ok(()) => Ok(pid),
            Err(failure) => {
                tracing::error!(server = %server_id, "the server did not boot: {failure}");
                Err(failure.to_string())
            }
        };
        let _ = self.write(|state| state.finish_boot(&project_id, server_id, status, Self::now()));
        if outcome.is_ok() {
            tracing::info!(server = %server_id, "server active");
        }
    }

    async fn bring_up(
        &self,
        project_id: &str,
        server_id: Uuid,
        slot: &mut Option<Sshd>,
    ) -> Result<(), Failure> {
        let plan = self.read(|state| -> Result<_, StateError> {
            let project = state.project(project_id)?;
            let server = state.server(project_id, &server_id.to_string())?;
            let spec = self.spec(state, project, server);
            Ok((
                spec,
                self.names.bridge(project.index),
                state.gateway(project),
                self.names.veth(server.slot),
                server.never_boot,
            ))
        })?;
        let (spec, bridge, gateway, veth, never_boot) = plan;
        let broken = |error: &dyn std::fmt::Display| Failure::Broken(error.to_string());

        self.check_open()?;
        {
            let net = self.project_net(project_id);
            let mut net = net.lock().await;
            if !net.bridge {
                network::create_bridge(&self.journal, &bridge, gateway, 24)
                    .await
                    .map_err(|e| broken(&e))?;
                net.bridge = true;
            }
            network::create_namespace(&self.journal, &spec.namespace)
                .await
                .map_err(|e| broken(&e))?;
            self.write(|state| state.set_wired(project_id, server_id, true))?;
        }
        // The firewall is up before the server has an address: it is never open, not even briefly.
        self.enforce(project_id).await?;
        self.check_open()?;
        network::wire(
            &self.journal,
            &spec.namespace,
            &veth,
            &bridge,
            spec.address,
            24,
        )
        .await
        .map_err(|e| broken(&e))?;
        let files = spec.clone();
        tokio::task::spawn_blocking(move || files.write_files())
            .await
            .map_err(|e| broken(&e))?
            .map_err(|e| broken(&e))?;
        if never_boot {
            return Ok(());
        }
        self.check_open()?;
        let sshd = spec
            .start_sshd(|process| {
                self.journal.creating(&Resource::Process {
                    pid: process.pid,
                    start_time: process.start_time,
                })
            })
            .await
            .map_err(|e| broken(&e))?;
        *slot = Some(sshd);
        Ok(())
    }

    fn server_dir(&self, id: Uuid) -> PathBuf {
        self.dir.servers().join(id.to_string())
    }

    /// What a server's files and sshd are made from.
    fn spec(&self, state: &State, project: &Project, server: &Server) -> ServerSpec {
        ServerSpec {
            dir: self.server_dir(server.id),
            namespace: self.names.namespace(server.slot),
            address: state.server_address(project, server),
            hostname: server
                .user_data
                .hostname
                .clone()
                .unwrap_or_else(|| cloud_init::hostname_from_server_name(&server.name)),
            authorized_keys: server.user_data.authorized_keys.clone(),
            bastion: server.is_bastion(),
        }
    }

    /// A server's console log, its last `length` lines if given (`os-getConsoleOutput`).
    pub async fn console_output(
        &self,
        project_id: &str,
        id: &str,
        length: Option<usize>,
    ) -> Result<String, Failure> {
        let path = self.read(|state| {
            state
                .server(project_id, id)
                .map(|server| self.server_dir(server.id).join("console.log"))
        })?;
        let text = match tokio::fs::read_to_string(&path).await {
            Ok(text) => text,
            // A server still booting has printed nothing yet.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(Failure::Broken(format!("cannot read the console: {e}"))),
        };
        Ok(match length {
            None => text,
            Some(length) => {
                let lines: Vec<&str> = text.lines().collect();
                let start = lines.len().saturating_sub(length);
                lines[start..]
                    .iter()
                    .map(|line| format!("{line}\n"))
                    .collect()
            }
        })
    }

    /// Gives every running server of that name (or id) new host keys and restarts its sshd,
    /// as a rebuilt server, or one someone else answers for, would look to a client.
    pub async fn rekey(&self, project_id: &str, server: &str) -> Result<(), Failure> {
        let found: Vec<(Uuid, ServerSpec)> = self.read(|state| -> Result<_, StateError> {
            let project = state.project(project_id)?;
            Ok(project
                .servers
                .iter()
                .filter(|s| s.name == server || s.id.to_string() == server)
                .map(|s| (s.id, self.spec(state, project, s)))
                .collect())
        })?;
        if found.is_empty() {
            return Err(StateError::ServerNotFound(server.to_owned()).into());
        }
        let broken = |error: &dyn std::fmt::Display| Failure::Broken(error.to_string());
        for (server_id, spec) in found {
            let slot = self.server_slot(server_id);
            let mut sshd = slot.lock().await;
            let Some(running) = sshd.take() else {
                return Err(Failure::Broken(format!(
                    "server {server_id} runs no sshd (still booting, or it never boots)"
                )));
            };
            let process = running.process;
            running.stop().await;
            self.journal
                .removed(&Resource::Process {
                    pid: process.pid,
                    start_time: process.start_time,
                })
                .map_err(|e| broken(&e))?;
            let files = spec.clone();
            tokio::task::spawn_blocking(move || files.write_host_key())
                .await
                .map_err(|e| broken(&e))?
                .map_err(|e| broken(&e))?;
            let started = spec
                .start_sshd(|process| {
                    self.journal.creating(&Resource::Process {
                        pid: process.pid,
                        start_time: process.start_time,
                    })
                })
                .await
                .map_err(|e| broken(&e))?;
            let pid = started.process.pid;
            *sshd = Some(started);
            self.write(|state| state.set_sshd_pid(project_id, server_id, pid))?;
            tracing::info!(server = %server_id, "server given new host keys");
        }
        Ok(())
    }

    /// Deletes a server: stops its processes, removes its namespace and link, updates firewalls.
    pub async fn delete_server(&self, project_id: &str, id: &str) -> Result<(), Failure> {
        let server_id = self.read(|state| state.server(project_id, id).map(|s| s.id))?;
        let slot = self.server_slot(server_id);
        let mut sshd = slot.lock().await;
        // A concurrent delete may have won while this one waited.
        let number = self.read(|state| state.server(project_id, id).map(|s| s.slot))?;
        if let Some(sshd) = sshd.take() {
            let process = sshd.process;
            sshd.stop().await;
            self.journal
                .removed(&Resource::Process {
                    pid: process.pid,
                    start_time: process.start_time,
                })
                .map_err(|e| Failure::Broken(e.to_string()))?;
        }
        let namespace = self.names.namespace(number);
        {
            let net = self.project_net(project_id);
            let mut net = net.lock().await;
            network::remove_namespace(&self.journal, &namespace, &self.names.veth(number))
                .await
                .map_err(|e| Failure::Broken(e.to_string()))?;
            net.applied.remove(&namespace);
            self.write(|state| state.remove_server(project_id, server_id))?;
        }
        drop(sshd);
        self.servers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&server_id);
        let dir = self.server_dir(server_id);
        let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(dir)).await;
        tracing::info!(server = %server_id, "server deleted");
        self.enforce(project_id).await
    }

    /// Creates a rule and enforces it before answering.
    pub async fn create_rule(&self, project_id: &str, new: NewRule) -> Result<Rule, Failure> {
        let rule = self.write(|state| state.create_rule(project_id, new))?;
        self.enforce(project_id).await?;
        Ok(rule)
    }

    /// Deletes a rule and enforces that before answering.
    pub async fn delete_rule(&self, project_id: &str, id: &str) -> Result<(), Failure> {
        self.write(|state| state.delete_rule(project_id, id))?;
        self.enforce(project_id).await
    }

    /// Deletes a group (and the rules naming it) and enforces that before answering.
    pub async fn delete_group(&self, project_id: &str, id: &str) -> Result<(), Failure> {
        self.write(|state| state.delete_group(project_id, id))?;
        self.enforce(project_id).await
    }

    /// Makes servers refuse everything, at once.
    pub async fn make_unreachable(&self, project_id: &str, server: &str) -> Result<(), Failure> {
        self.write(|state| state.make_unreachable(project_id, server))?;
        self.enforce(project_id).await
    }

    /// Clears a project's faults, reachability included.
    pub async fn clear_faults(&self, project_id: &str) -> Result<(), Failure> {
        self.write(|state| state.clear_faults(project_id))?;
        self.enforce(project_id).await
    }

    /// Brings every firewall of the project in line with its state (one `nft -f` per server
    /// whose script changed).
    pub async fn enforce(&self, project_id: &str) -> Result<(), Failure> {
        let net = self.project_net(project_id);
        let mut net = net.lock().await;
        let scripts: Vec<(String, String)> = self.read(|state| {
            let Ok(project) = state.project(project_id) else {
                return Vec::new();
            };
            project
                .servers
                .iter()
                .filter(|server| server.wired)
                .map(|server| {
                    let script = firewall::render(&firewall::decide(state, project, server));
                    (self.names.namespace(server.slot), script)
                })
                .collect()
        });
        for (namespace, script) in scripts {
            if net.applied.get(&namespace) == Some(&script) {
                continue;
            }
            network::load_firewall(&namespace, script.clone())
                .run()
                .await
                .map_err(|e| Failure::Broken(e.to_string()))?;
            net.applied.insert(namespace, script);
        }
        Ok(())
    }

    /// Asks the HTTP server to stop; the cloud then removes everything it created.
    pub fn request_shutdown(&self) {
        self.shutdown.send_replace(true);
    }

    /// Resolves once a shutdown is requested.
    pub async fn shutdown_requested(&self) {
        let mut requested = self.shutdown.subscribe();
        let _ = requested.wait_for(|requested| *requested).await;
    }

    /// Refuses new work: boots under way stop at their next step.
    pub fn close(&self) {
        self.closing.store(true, Ordering::SeqCst);
    }

    /// Stops every server and removes everything the journal records, and the state files.
    pub async fn tear_down(&self) -> Result<(), CloudError> {
        self.close();
        let slots: Vec<ServerSlot> = self
            .servers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        for slot in slots {
            if let Some(sshd) = slot.lock().await.take() {
                sshd.stop().await;
            }
        }
        let dir = self.dir.clone();
        tokio::task::spawn_blocking(move || crate::remove_everything(&dir))
            .await
            .map_err(|e| CloudError::Crashed(e.to_string()))?
    }
}
