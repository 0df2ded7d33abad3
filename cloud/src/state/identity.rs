//! Domains, projects, their one user each (named as the project, in the project's domain), and
//! project-scoped tokens. Names are unique only within a domain, as in Keystone: two projects
//! may share a name in two domains, and a project deleted and made again is a new project.

use chrono::{DateTime, Duration, Utc};

use super::{Domain, Faults, Project, SecurityGroup, State, StateError};
use crate::secret;

/// The domain every cloud starts with (id `default`), where a name given without a domain is.
pub const DEFAULT_DOMAIN: &str = "Default";

/// An issued token: which project and user it speaks for, and until when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    /// The project it is scoped to.
    pub project_id: String,
    /// Its user.
    pub user_id: String,
    /// When it was issued.
    pub issued_at: DateTime<Utc>,
    /// When it stops being valid.
    pub expires_at: DateTime<Utc>,
}

/// How a request names a domain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DomainRef {
    /// By id (`default` for `Default`).
    Id(String),
    /// By name.
    Name(String),
}

/// How a password authentication names its user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UserRef {
    /// By id.
    Id(String),
    /// By name, in a domain (`Default` when none is given).
    Name {
        /// The user's name.
        name: String,
        /// Its domain.
        domain: Option<DomainRef>,
    },
}

/// How a password authentication names the project to scope the token to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProjectScope {
    /// By name, in a domain (`Default` when none is given).
    Name {
        /// The project's name.
        name: String,
        /// Its domain.
        domain: Option<DomainRef>,
    },
    /// By id.
    Id(String),
}

impl Domain {
    /// Whether a request's domain (none: `Default`) is this one.
    fn is(&self, given: Option<&DomainRef>) -> bool {
        match given {
            None => self.name == DEFAULT_DOMAIN,
            Some(DomainRef::Id(id)) => self.id == *id,
            Some(DomainRef::Name(name)) => self.name == *name,
        }
    }
}

/// What a project or domain name may be: it is also a user name and a path segment of the admin
/// API.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

impl State {
    /// The domain named `name`, created if missing.
    fn ensure_domain(&mut self, name: &str) -> Result<Domain, StateError> {
        if !valid_name(name) {
            return Err(StateError::Invalid(format!(
                "domain name `{name}`: use 1 to 64 letters, digits, '-', '_' or '.'"
            )));
        }
        if let Some(domain) = self.domains.iter().find(|d| d.name == name) {
            return Ok(domain.clone());
        }
        let domain = Domain {
            id: secret::random_hex(16),
            name: name.to_owned(),
        };
        self.domains.push(domain.clone());
        Ok(domain)
    }

    /// The project named `name` in the domain named `domain`, created (with the domain, its
    /// user and its `default` group) if missing.
    pub fn ensure_project(&mut self, name: &str, domain: &str) -> Result<&Project, StateError> {
        if !valid_name(name) {
            return Err(StateError::Invalid(format!(
                "project name `{name}`: use 1 to 64 letters, digits, '-', '_' or '.'"
            )));
        }
        let domain = self.ensure_domain(domain)?;
        if let Some(at) = self
            .projects
            .iter()
            .position(|p| p.name == name && p.domain == domain)
        {
            return Ok(&self.projects[at]);
        }
        let index = (1..=254u8)
            .find(|index| {
                self.projects.iter().all(|p| p.index != *index) && !self.retired.contains(index)
            })
            .ok_or_else(|| {
                StateError::Exhausted(
                    "this cloud holds at most 254 projects over its life; start another cloud"
                        .into(),
                )
            })?;
        let id = secret::random_hex(16);
        self.projects.push(Project {
            groups: vec![SecurityGroup::default_group()],
            id,
            name: name.to_owned(),
            domain,
            user_id: secret::random_hex(16),
            password: secret::random_hex(16),
            index,
            servers: Vec::new(),
            rules: Vec::new(),
            faults: Faults::default(),
        });
        Ok(&self.projects[self.projects.len() - 1])
    }

    /// Deletes a project without servers, with its user, groups, rules and tokens. Its name may
    /// be taken again, by a new project with a new id and a network of its own.
    pub fn delete_project(&mut self, id: &str) -> Result<Project, StateError> {
        let project = self.project(id)?;
        if !project.servers.is_empty() {
            return Err(StateError::ProjectInUse(project.name.clone()));
        }
        let at = self
            .projects
            .iter()
            .position(|p| p.id == id)
            .ok_or_else(|| StateError::NoSuchProject(id.to_owned()))?;
        let project = self.projects.remove(at);
        self.retired.push(project.index);
        self.tokens
            .retain(|_, token| token.project_id != project.id);
        Ok(project)
    }

    /// Issues a token for the project, valid for `lifetime` from `now` (negative: already expired).
    pub fn issue_token(
        &mut self,
        project_id: &str,
        now: DateTime<Utc>,
        lifetime: Duration,
    ) -> Result<(String, Token), StateError> {
        let project = self.project(project_id)?;
        let token = Token {
            project_id: project.id.clone(),
            user_id: project.user_id.clone(),
            issued_at: now,
            expires_at: now + lifetime,
        };
        // Expired tokens are forgotten here rather than on a timer: they answer 401 either way.
        self.tokens.retain(|_, t| t.expires_at > now);
        let value = secret::new_token();
        self.tokens.insert(value.clone(), token.clone());
        Ok((value, token))
    }

    /// Checks a user's password and scope and issues a token for an hour.
    pub fn password_auth(
        &mut self,
        user: &UserRef,
        password: &str,
        scope: &ProjectScope,
        now: DateTime<Utc>,
    ) -> Result<(String, Token), StateError> {
        let project = self
            .projects
            .iter()
            .find(|p| match user {
                UserRef::Id(id) => p.user_id == *id,
                UserRef::Name { name, domain } => p.name == *name && p.domain.is(domain.as_ref()),
            })
            .ok_or(StateError::Unauthenticated)?;
        // The password is compared even when the scope is wrong, so both fail alike.
        let password_ok = secret::same(password, &project.password);
        let scope_ok = match scope {
            ProjectScope::Name { name, domain } => {
                *name == project.name && project.domain.is(domain.as_ref())
            }
            ProjectScope::Id(id) => *id == project.id,
        };
        if !(password_ok && scope_ok) {
            return Err(StateError::Unauthenticated);
        }
        let id = project.id.clone();
        self.issue_token(&id, now, Duration::hours(1))
    }

    /// The token with that value, if it is valid at `now`.
    pub fn token(&self, value: &str, now: DateTime<Utc>) -> Result<&Token, StateError> {
        self.tokens
            .get(value)
            .filter(|t| t.expires_at > now)
            .ok_or(StateError::Unauthenticated)
    }

    /// Revokes a token; revoking an unknown token is refused like an unknown token.
    pub fn revoke(&mut self, value: &str) -> Result<(), StateError> {
        self.tokens
            .remove(value)
            .map(|_| ())
            .ok_or(StateError::Unauthenticated)
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{state, t0};
    use super::super::NewServer;
    use super::*;

    #[test]
    fn a_project_is_created_once_with_its_user_and_default_group() {
        let mut state = state();
        let first = state.ensure_project("tenant-a", DEFAULT_DOMAIN).cloned();
        let again = state.ensure_project("tenant-a", DEFAULT_DOMAIN).cloned();
        let (Ok(first), Ok(again)) = (first, again) else {
            panic!("not created")
        };
        assert_eq!(first.id, again.id);
        assert_eq!(first.password, again.password);
        assert_eq!(first.index, 1);
        assert_eq!(first.domain.id, "default");
        assert_eq!(first.groups.len(), 1);
        assert_eq!(first.groups[0].name, "default");
        assert_eq!(state.subnet(&first).to_string(), "10.77.1.0/24");
        assert_eq!(state.gateway(&first).to_string(), "10.77.1.1");
        assert!(matches!(
            state.ensure_project("a b", DEFAULT_DOMAIN),
            Err(StateError::Invalid(_))
        ));
    }

    #[test]
    fn tokens_need_the_password_and_the_users_own_project_and_expire() {
        let mut state = state();
        let (id, password) = match state.ensure_project("a", DEFAULT_DOMAIN) {
            Ok(p) => (p.id.clone(), p.password.clone()),
            Err(e) => panic!("{e}"),
        };
        let _ = state.ensure_project("b", DEFAULT_DOMAIN);
        let by_name = scope("a", None);
        assert_eq!(
            state.password_auth(&user("a", None), "wrong", &by_name, t0()),
            Err(StateError::Unauthenticated)
        );
        assert_eq!(
            state.password_auth(&user("a", None), &password, &scope("b", None), t0()),
            Err(StateError::Unauthenticated)
        );
        assert_eq!(
            state.password_auth(&user("nobody", None), &password, &by_name, t0()),
            Err(StateError::Unauthenticated)
        );
        let Ok((value, token)) = state.password_auth(
            &user("a", None),
            &password,
            &ProjectScope::Id(id.clone()),
            t0(),
        ) else {
            panic!("refused")
        };
        assert_eq!(token.project_id, id);
        assert_eq!(token.expires_at - token.issued_at, Duration::hours(1));
        assert!(state.token(&value, t0() + Duration::minutes(59)).is_ok());
        assert_eq!(
            state.token(&value, t0() + Duration::hours(1)),
            Err(StateError::Unauthenticated)
        );
    }

    #[test]
    fn a_revoked_token_is_unknown() {
        let mut state = state();
        let id = state
            .ensure_project("a", DEFAULT_DOMAIN)
            .map(|p| p.id.clone())
            .unwrap_or_default();
        let Ok((value, _)) = state.issue_token(&id, t0(), Duration::hours(1)) else {
            panic!("refused")
        };
        assert!(state.revoke(&value).is_ok());
        assert_eq!(state.token(&value, t0()), Err(StateError::Unauthenticated));
        assert_eq!(state.revoke(&value), Err(StateError::Unauthenticated));
        let Ok((expired, _)) = state.issue_token(&id, t0(), Duration::seconds(-1)) else {
            panic!("refused")
        };
        assert_eq!(
            state.token(&expired, t0()),
            Err(StateError::Unauthenticated)
        );
    }

    fn user(name: &str, domain: Option<&str>) -> UserRef {
        UserRef::Name {
            name: name.into(),
            domain: domain.map(|d| DomainRef::Name(d.into())),
        }
    }

    fn scope(name: &str, domain: Option<&str>) -> ProjectScope {
        ProjectScope::Name {
            name: name.into(),
            domain: domain.map(|d| DomainRef::Name(d.into())),
        }
    }

    fn password(state: &State, id: &str) -> String {
        state
            .project(id)
            .map(|p| p.password.clone())
            .unwrap_or_default()
    }

    #[test]
    fn two_projects_share_a_name_in_two_domains_and_each_user_signs_in_to_its_own() {
        let mut state = state();
        let id_of = |state: &mut State, domain: &str| {
            state
                .ensure_project("acme", domain)
                .map(|p| p.id.clone())
                .unwrap_or_else(|e| panic!("{e}"))
        };
        let ours = id_of(&mut state, DEFAULT_DOMAIN);
        let theirs = id_of(&mut state, "Other");
        assert_ne!(ours, theirs);
        assert_eq!(id_of(&mut state, "Other"), theirs, "made once");
        let other_domain = state
            .project(&theirs)
            .map(|p| p.domain.clone())
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(other_domain.name, "Other");
        assert_ne!(other_domain.id, "default");

        let (our_password, their_password) = (password(&state, &ours), password(&state, &theirs));
        let signed_in = |state: &mut State, user: UserRef, password: &str, scope: ProjectScope| {
            state
                .password_auth(&user, password, &scope, t0())
                .map(|(_, token)| token.project_id)
        };
        assert_eq!(
            signed_in(
                &mut state,
                user("acme", None),
                &our_password,
                scope("acme", None)
            ),
            Ok(ours.clone())
        );
        let by_id = Some(DomainRef::Id(other_domain.id.clone()));
        assert_eq!(
            signed_in(
                &mut state,
                UserRef::Name {
                    name: "acme".into(),
                    domain: by_id.clone()
                },
                &their_password,
                ProjectScope::Name {
                    name: "acme".into(),
                    domain: by_id
                },
            ),
            Ok(theirs.clone())
        );
        // One domain's password does not open the other's project of the same name.
        assert_eq!(
            signed_in(
                &mut state,
                user("acme", Some("Other")),
                &our_password,
                scope("acme", Some("Other"))
            ),
            Err(StateError::Unauthenticated)
        );
        assert_eq!(
            signed_in(
                &mut state,
                user("acme", None),
                &our_password,
                scope("acme", Some("Other"))
            ),
            Err(StateError::Unauthenticated)
        );
        assert_eq!(
            signed_in(
                &mut state,
                user("acme", Some("Nowhere")),
                &our_password,
                scope("acme", Some("Nowhere"))
            ),
            Err(StateError::Unauthenticated)
        );
        assert!(matches!(
            state.project_in("Nowhere", "acme"),
            Err(StateError::NoSuchProjectIn { .. })
        ));
    }

    #[test]
    fn a_project_made_again_under_its_name_is_a_new_project_and_its_old_tokens_are_gone() {
        let mut state = state();
        let Ok(old) = state.ensure_project("acme", DEFAULT_DOMAIN).cloned() else {
            panic!("not created")
        };
        let Ok((old_token, _)) = state.issue_token(&old.id, t0(), Duration::hours(1)) else {
            panic!("refused")
        };
        let server = NewServer {
            name: "web".into(),
            ..NewServer::default()
        };
        let Ok(server) = state.create_server(&old.id, server, t0()).map(|s| s.id) else {
            panic!("no server")
        };
        assert_eq!(
            state.delete_project(&old.id).map(|p| p.id),
            Err(StateError::ProjectInUse("acme".into())),
            "not while it has servers"
        );
        assert!(state.remove_server(&old.id, server).is_ok());
        assert!(state.delete_project(&old.id).is_ok());
        assert_eq!(
            state.token(&old_token, t0()),
            Err(StateError::Unauthenticated)
        );
        assert!(matches!(
            state.delete_project(&old.id),
            Err(StateError::NoSuchProject(_))
        ));

        let Ok(new) = state.ensure_project("acme", DEFAULT_DOMAIN).cloned() else {
            panic!("not made again")
        };
        assert_ne!(new.id, old.id);
        assert_ne!(new.password, old.password);
        assert_ne!(new.index, old.index, "a network of its own");
        assert_eq!(
            state.password_auth(
                &user("acme", None),
                &old.password,
                &scope("acme", None),
                t0()
            ),
            Err(StateError::Unauthenticated)
        );
    }
}
