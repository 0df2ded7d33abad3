//! Servers: their names, groups, addresses and statuses.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{Project, State, StateError};
use crate::cloud_init::UserData;

/// A server's status, as Nova shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerStatus {
    /// Its namespace, address or sshd is not up yet.
    Build,
    /// Up: it has its address, and its sshd listens (unless a never-boot fault says otherwise).
    Active,
    /// Booting it failed.
    Error,
}

impl ServerStatus {
    /// The name Nova gives the status.
    pub fn as_str(self) -> &'static str {
        match self {
            ServerStatus::Build => "BUILD",
            ServerStatus::Active => "ACTIVE",
            ServerStatus::Error => "ERROR",
        }
    }
}

/// A server of a project.
#[derive(Debug, Clone)]
pub struct Server {
    /// Its id.
    pub id: Uuid,
    /// Its name; several servers may share one.
    pub name: String,
    /// Its number in the instance: names its namespace and link; never reused.
    pub slot: u32,
    /// The last byte of its address in the project's /24.
    pub host: u8,
    /// Its status.
    pub status: ServerStatus,
    /// Its metadata; `role: bastion` allows TCP forwarding through its sshd.
    pub metadata: BTreeMap<String, String>,
    /// The ids of its security groups.
    pub groups: Vec<String>,
    /// What its cloud-init does.
    pub user_data: UserData,
    /// When it was created.
    pub created: DateTime<Utc>,
    /// When its status last changed.
    pub updated: DateTime<Utc>,
    /// A never-boot fault named it when it was created: its sshd never starts.
    pub never_boot: bool,
    /// An unreachable fault: it refuses every packet.
    pub unreachable: bool,
    /// Its namespace exists, so its firewall must follow the project's rules.
    pub wired: bool,
    /// The host pid of the bubblewrap that runs its sshd.
    pub sshd_pid: Option<u32>,
    /// Why it is in `ERROR`.
    pub fault: Option<String>,
}

impl Server {
    /// Whether its metadata makes it a bastion (sshd allows TCP forwarding).
    pub fn is_bastion(&self) -> bool {
        self.metadata.get("role").map(String::as_str) == Some("bastion")
    }
}

/// A server to create.
#[derive(Debug, Clone, Default)]
pub struct NewServer {
    /// Its name.
    pub name: String,
    /// Its metadata.
    pub metadata: BTreeMap<String, String>,
    /// Its security groups, by name or id; empty: the project's `default`.
    pub groups: Vec<String>,
    /// Its parsed `user_data`.
    pub user_data: UserData,
}

impl State {
    /// Records a new server in `BUILD`, with an address and a slot.
    pub fn create_server(
        &mut self,
        project_id: &str,
        new: NewServer,
        now: DateTime<Utc>,
    ) -> Result<Server, StateError> {
        let name = new.name.trim();
        if name.is_empty() || new.name.len() > 255 {
            return Err(StateError::Invalid(
                "server name: give 1 to 255 characters, not only spaces".into(),
            ));
        }
        if let Some((key, _)) = new
            .metadata
            .iter()
            .find(|(k, v)| k.is_empty() || k.len() > 255 || v.len() > 255)
        {
            return Err(StateError::Invalid(format!(
                "metadata `{key}`: keys take 1 to 255 characters, values at most 255"
            )));
        }
        let slot = self.next_slot;
        let project = self.project_mut(project_id)?;
        let groups = resolve_groups(project, &new.groups)?;
        let host = (2..=254u8)
            .find(|host| project.servers.iter().all(|s| s.host != *host))
            .ok_or_else(|| {
                StateError::Exhausted(
                    "Quota exceeded for instances: a project holds at most 253 servers".into(),
                )
            })?;
        let server = Server {
            id: Uuid::new_v4(),
            name: new.name.clone(),
            slot,
            host,
            status: ServerStatus::Build,
            metadata: new.metadata,
            groups,
            user_data: new.user_data,
            created: now,
            updated: now,
            never_boot: project
                .faults
                .never_boot
                .iter()
                .any(|named| answers_to(&new.name, named)),
            unreachable: false,
            wired: false,
            sshd_pid: None,
            fault: None,
        };
        project.servers.push(server.clone());
        self.next_slot += 1;
        Ok(server)
    }

    /// The project's server with that id.
    pub fn server(&self, project_id: &str, id: &str) -> Result<&Server, StateError> {
        self.project(project_id)?
            .servers
            .iter()
            .find(|s| s.id.to_string() == id)
            .ok_or_else(|| StateError::ServerNotFound(id.to_owned()))
    }

    pub(crate) fn server_mut(
        &mut self,
        project_id: &str,
        id: Uuid,
    ) -> Result<&mut Server, StateError> {
        self.project_mut(project_id)?
            .servers
            .iter_mut()
            .find(|s| s.id == id)
            .ok_or_else(|| StateError::ServerNotFound(id.to_string()))
    }

    /// The project's servers, oldest first; only those named exactly `name` if given.
    pub fn servers(
        &self,
        project_id: &str,
        name: Option<&str>,
    ) -> Result<Vec<&Server>, StateError> {
        Ok(self
            .project(project_id)?
            .servers
            .iter()
            .filter(|s| name.is_none_or(|name| s.name == name))
            .collect())
    }

    /// Forgets a server (its namespace is gone).
    pub fn remove_server(&mut self, project_id: &str, id: Uuid) -> Result<Server, StateError> {
        let project = self.project_mut(project_id)?;
        let at = project
            .servers
            .iter()
            .position(|s| s.id == id)
            .ok_or_else(|| StateError::ServerNotFound(id.to_string()))?;
        Ok(project.servers.remove(at))
    }

    /// Marks whether a server's namespace exists (its firewall follows the rules from then on).
    pub fn set_wired(&mut self, project_id: &str, id: Uuid, wired: bool) -> Result<(), StateError> {
        self.server_mut(project_id, id)?.wired = wired;
        Ok(())
    }

    /// Records the pid of a server's new sshd (after its host keys were changed).
    pub fn set_sshd_pid(&mut self, project_id: &str, id: Uuid, pid: u32) -> Result<(), StateError> {
        self.server_mut(project_id, id)?.sshd_pid = Some(pid);
        Ok(())
    }

    /// A server's boot ended: `ACTIVE` (with its sshd's pid, if one runs), or `ERROR` and why.
    pub fn finish_boot(
        &mut self,
        project_id: &str,
        id: Uuid,
        outcome: Result<Option<u32>, String>,
        now: DateTime<Utc>,
    ) -> Result<(), StateError> {
        let server = self.server_mut(project_id, id)?;
        match outcome {
            Ok(pid) => {
                server.status = ServerStatus::Active;
                server.sshd_pid = pid;
            }
            Err(why) => {
                server.status = ServerStatus::Error;
                server.fault = Some(why);
            }
        }
        server.updated = now;
        Ok(())
    }
}

/// Whether a server's name is `named`, or ends with `-named`: deployments prefix the names of
/// their servers, which a fault set before the deployment cannot know.
fn answers_to(name: &str, named: &str) -> bool {
    name == named
        || name
            .strip_suffix(named)
            .is_some_and(|prefix| prefix.ends_with('-'))
}

/// The ids of the groups a new server names (by id first, then by name).
fn resolve_groups(project: &Project, wanted: &[String]) -> Result<Vec<String>, StateError> {
    if wanted.is_empty() {
        return Ok(vec![project.groups[0].id.clone()]);
    }
    let mut ids: Vec<String> = Vec::new();
    for reference in wanted {
        let id = match project.groups.iter().find(|g| g.id == *reference) {
            Some(group) => group.id.clone(),
            None => {
                let mut named = project.groups.iter().filter(|g| g.name == *reference);
                match (named.next(), named.next()) {
                    (Some(group), None) => group.id.clone(),
                    (Some(_), Some(_)) => {
                        return Err(StateError::AmbiguousGroup(reference.clone()))
                    }
                    (None, _) => return Err(StateError::UnknownServerGroup(reference.clone())),
                }
            }
        };
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{t0, two_projects};
    use super::*;

    fn new(name: &str, groups: &[&str]) -> NewServer {
        NewServer {
            name: name.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            ..NewServer::default()
        }
    }

    #[test]
    fn servers_get_the_lowest_free_address_and_a_fresh_slot() {
        let (mut state, a, b) = two_projects();
        let first = state.create_server(&a, new("one", &[]), t0());
        let second = state.create_server(&a, new("two", &[]), t0());
        let other = state.create_server(&b, new("one", &[]), t0());
        let (Ok(first), Ok(second), Ok(other)) = (first, second, other) else {
            panic!("refused")
        };
        assert_eq!((first.host, second.host, other.host), (2, 3, 2));
        assert_eq!((first.slot, second.slot, other.slot), (1, 2, 3));
        assert_eq!(first.status, ServerStatus::Build);
        let default = state
            .project(&a)
            .map(|p| p.groups[0].id.clone())
            .unwrap_or_default();
        assert_eq!(first.groups, vec![default]);
        assert!(state.remove_server(&a, first.id).is_ok());
        let third = state.create_server(&a, new("three", &[]), t0());
        assert_eq!(third.map(|s| (s.host, s.slot)), Ok((2, 4)));
    }

    #[test]
    fn a_server_names_only_its_projects_groups() {
        let (mut state, a, b) = two_projects();
        let b_default = state
            .project(&b)
            .map(|p| p.groups[0].id.clone())
            .unwrap_or_default();
        assert_eq!(
            state
                .create_server(&a, new("x", &[&b_default]), t0())
                .map(|_| ()),
            Err(StateError::UnknownServerGroup(b_default))
        );
        assert_eq!(
            state
                .create_server(&a, new("x", &["web"]), t0())
                .map(|_| ()),
            Err(StateError::UnknownServerGroup("web".into()))
        );
        assert!(state
            .create_server(&a, new("x", &["default"]), t0())
            .is_ok());
    }

    #[test]
    fn another_projects_server_is_not_found() {
        let (mut state, a, b) = two_projects();
        let Ok(server) = state.create_server(&a, new("x", &[]), t0()) else {
            panic!("refused")
        };
        let id = server.id.to_string();
        assert!(state.server(&a, &id).is_ok());
        assert_eq!(
            state.server(&b, &id).map(|_| ()),
            Err(StateError::ServerNotFound(id.clone()))
        );
        assert_eq!(state.servers(&b, None).map(|s| s.len()), Ok(0));
        assert_eq!(state.servers(&a, Some("x")).map(|s| s.len()), Ok(1));
        assert_eq!(state.servers(&a, Some("y")).map(|s| s.len()), Ok(0));
    }
}
