//! What the cloud knows: projects and their users, tokens, servers, security groups and rules,
//! and the faults asked for. Pure data and decisions: nothing here runs a command or reads the
//! clock (the time is passed in), so every rule of the API is tested without a network.
//!
//! - This file: [`State`], [`Project`], [`StateError`].
//! - `identity`: domains, projects, their one user, tokens.
//! - `compute`: servers, their addresses and statuses.
//! - `security`: security groups and rules.
//! - `faults`: the faults a test injects.

mod compute;
mod faults;
mod identity;
mod security;

use std::collections::HashMap;
use std::net::Ipv4Addr;

use chrono::{DateTime, Utc};

use crate::cidr::Ipv4Net;

pub use compute::{NewServer, Server, ServerStatus};
pub use faults::Faults;
pub use identity::{DomainRef, ProjectScope, Token, UserRef, DEFAULT_DOMAIN};
pub use security::{NewRule, Rule, SecurityGroup};

/// Everything the cloud holds, for one instance.
#[derive(Debug)]
pub struct State {
    /// The instance's /16; project `index` gets `10.X.index.0/24`.
    network: Ipv4Net,
    /// Keystone domains, `Default` first; projects and users are named within one.
    domains: Vec<Domain>,
    projects: Vec<Project>,
    /// The network indexes of deleted projects: never given again, so a project made again
    /// under an old name gets a network (and bridge) of its own.
    retired: Vec<u8>,
    tokens: HashMap<String, Token>,
    /// The one role every user has in its project, as Keystone shows it.
    role_id: String,
    /// The next server number: names the server's namespace and link, never reused.
    next_slot: u32,
}

/// A Keystone domain: names of projects and users are unique only within one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Domain {
    /// `default` for `Default`; 32 hex characters for the others.
    pub id: String,
    /// Its name.
    pub name: String,
}

/// A project (tenant), its one user, and its resources.
#[derive(Debug, Clone)]
pub struct Project {
    /// 32 hex characters, as Keystone's ids.
    pub id: String,
    /// The project's name, which is also its user's name (unique within its domain).
    pub name: String,
    /// The domain of the project and of its user.
    pub domain: Domain,
    /// The user's id.
    pub user_id: String,
    /// The user's password.
    pub password: String,
    /// Which /24 of the instance's /16 the project's network is (1 to 254).
    pub index: u8,
    /// The servers, oldest first.
    pub servers: Vec<Server>,
    /// The security groups, oldest first; `default` is the first.
    pub groups: Vec<SecurityGroup>,
    /// Every rule of every group, oldest first.
    pub rules: Vec<Rule>,
    /// The faults injected into this project.
    pub faults: Faults,
}

/// A request the state refuses; the API turns each into its service's error shape.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// Bad credentials, or a token that is missing, unknown, revoked or expired.
    #[error("The request you have made requires authentication.")]
    Unauthenticated,
    /// No project has that name.
    #[error("no project named `{0}`; create it with POST /admin/projects")]
    NoSuchProject(String),
    /// No project has that name in that domain (other than `Default`).
    #[error("no project named `{name}` in domain `{domain}`; create it with POST /admin/projects")]
    NoSuchProjectIn {
        /// The project's name.
        name: String,
        /// The domain's name.
        domain: String,
    },
    /// A project that still has servers is not deleted.
    #[error("project `{0}` still has servers; delete them first")]
    ProjectInUse(String),
    /// No server with that id in the caller's project.
    #[error("Instance {0} could not be found.")]
    ServerNotFound(String),
    /// No security group with that id in the caller's project.
    #[error("Security group {0} does not exist")]
    GroupNotFound(String),
    /// No rule with that id in the caller's project.
    #[error("Security group rule {0} does not exist")]
    RuleNotFound(String),
    /// A server names a security group the project does not have.
    #[error("Unable to find security_group with name or id '{0}'")]
    UnknownServerGroup(String),
    /// A server names a security group by a name several groups have.
    #[error(
        "Multiple security_group matches found for name '{0}', use an ID to be more specific."
    )]
    AmbiguousGroup(String),
    /// The same rule exists already.
    #[error("Security group rule already exists. Rule id is {0}.")]
    RuleExists(String),
    /// A server uses the group.
    #[error("Security Group {0} in use.")]
    GroupInUse(String),
    /// The `default` group is kept as long as its project.
    #[error("Insufficient rights for removing default security group.")]
    DefaultGroup,
    /// The request is malformed; the message says what is expected.
    #[error("{0}")]
    Invalid(String),
    /// No room left: projects in the instance, or addresses in a project.
    #[error("{0}")]
    Exhausted(String),
}

impl State {
    /// An empty cloud on `network` (a /16).
    pub fn new(network: Ipv4Net) -> Self {
        Self {
            network,
            domains: vec![Domain {
                id: "default".into(),
                name: DEFAULT_DOMAIN.into(),
            }],
            projects: Vec::new(),
            retired: Vec::new(),
            tokens: HashMap::new(),
            role_id: crate::secret::random_hex(16),
            next_slot: 1,
        }
    }

    /// Every project, oldest first.
    pub fn projects(&self) -> &[Project] {
        &self.projects
    }

    /// The project with that id.
    pub fn project(&self, id: &str) -> Result<&Project, StateError> {
        self.projects
            .iter()
            .find(|p| p.id == id)
            .ok_or_else(|| StateError::NoSuchProject(id.to_owned()))
    }

    fn project_mut(&mut self, id: &str) -> Result<&mut Project, StateError> {
        self.projects
            .iter_mut()
            .find(|p| p.id == id)
            .ok_or_else(|| StateError::NoSuchProject(id.to_owned()))
    }

    /// The project with that name in the `Default` domain.
    pub fn project_named(&self, name: &str) -> Result<&Project, StateError> {
        self.project_in(DEFAULT_DOMAIN, name)
    }

    /// The project with that name in the domain of that name.
    pub fn project_in(&self, domain: &str, name: &str) -> Result<&Project, StateError> {
        self.projects
            .iter()
            .find(|p| p.name == name && p.domain.name == domain)
            .ok_or_else(|| match domain {
                DEFAULT_DOMAIN => StateError::NoSuchProject(name.to_owned()),
                _ => StateError::NoSuchProjectIn {
                    name: name.to_owned(),
                    domain: domain.to_owned(),
                },
            })
    }

    /// The id of the role every user holds.
    pub fn role_id(&self) -> &str {
        &self.role_id
    }

    /// The project's network, `10.X.index.0/24`.
    pub fn subnet(&self, project: &Project) -> Ipv4Net {
        let [a, b, _, _] = self.network.network().octets();
        Ipv4Net::new(Ipv4Addr::new(a, b, project.index, 0), 24).unwrap_or(self.network)
    }

    /// The host's address on the project's network (`.1`).
    pub fn gateway(&self, project: &Project) -> Ipv4Addr {
        self.address(project, 1)
    }

    /// The address numbered `host` in the project's network.
    pub fn address(&self, project: &Project, host: u8) -> Ipv4Addr {
        let [a, b, c, _] = self.subnet(project).network().octets();
        Ipv4Addr::new(a, b, c, host)
    }

    /// A server's address.
    pub fn server_address(&self, project: &Project, server: &Server) -> Ipv4Addr {
        self.address(project, server.host)
    }
}

/// The time as the APIs write it.
pub fn timestamp(time: DateTime<Utc>) -> String {
    time.format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

#[cfg(test)]
pub(crate) mod test_support {
    use super::*;

    /// A state on 10.77.0.0/16.
    pub fn state() -> State {
        State::new(Ipv4Net::new(Ipv4Addr::new(10, 77, 0, 0), 16).unwrap_or_else(|e| panic!("{e}")))
    }

    /// The start of every test's clock.
    pub fn t0() -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).unwrap_or_default()
    }

    /// A state with projects `a` and `b`; returns their ids.
    pub fn two_projects() -> (State, String, String) {
        let mut state = state();
        let a = state
            .ensure_project("a", DEFAULT_DOMAIN)
            .map(|p| p.id.clone());
        let b = state
            .ensure_project("b", DEFAULT_DOMAIN)
            .map(|p| p.id.clone());
        match (a, b) {
            (Ok(a), Ok(b)) => (state, a, b),
            other => panic!("{other:?}"),
        }
    }
}
