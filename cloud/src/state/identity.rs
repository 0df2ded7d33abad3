//! Projects, their one user each (named as the project), and project-scoped tokens.

use chrono::{DateTime, Duration, Utc};

use super::{Faults, Project, SecurityGroup, State, StateError};
use crate::secret;

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

/// How a password authentication names the project to scope the token to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProjectScope {
    /// By name (in the Default domain).
    Name(String),
    /// By id.
    Id(String),
}

/// What a project name may be: it is also a user name and a path segment of the admin API.
fn valid_project_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

impl State {
    /// The project named `name`, created with its user and `default` group if missing.
    pub fn ensure_project(&mut self, name: &str) -> Result<&Project, StateError> {
        if !valid_project_name(name) {
            return Err(StateError::Invalid(format!(
                "project name `{name}`: use 1 to 64 letters, digits, '-', '_' or '.'"
            )));
        }
        if let Some(at) = self.projects.iter().position(|p| p.name == name) {
            return Ok(&self.projects[at]);
        }
        let index = (1..=254u8)
            .find(|index| self.projects.iter().all(|p| p.index != *index))
            .ok_or_else(|| {
                StateError::Exhausted(
                    "this cloud holds at most 254 projects; start another cloud".into(),
                )
            })?;
        let id = secret::random_hex(16);
        self.projects.push(Project {
            groups: vec![SecurityGroup::default_group()],
            id,
            name: name.to_owned(),
            user_id: secret::random_hex(16),
            password: secret::random_hex(16),
            index,
            servers: Vec::new(),
            rules: Vec::new(),
            faults: Faults::default(),
        });
        Ok(&self.projects[self.projects.len() - 1])
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
        user: &str,
        password: &str,
        scope: &ProjectScope,
        now: DateTime<Utc>,
    ) -> Result<(String, Token), StateError> {
        let project = self
            .projects
            .iter()
            .find(|p| p.name == user)
            .ok_or(StateError::Unauthenticated)?;
        // The password is compared even when the scope is wrong, so both fail alike.
        let password_ok = secret::same(password, &project.password);
        let scope_ok = match scope {
            ProjectScope::Name(name) => *name == project.name,
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
    use super::*;

    #[test]
    fn a_project_is_created_once_with_its_user_and_default_group() {
        let mut state = state();
        let first = state.ensure_project("tenant-a").cloned();
        let again = state.ensure_project("tenant-a").cloned();
        let (Ok(first), Ok(again)) = (first, again) else {
            panic!("not created")
        };
        assert_eq!(first.id, again.id);
        assert_eq!(first.password, again.password);
        assert_eq!(first.index, 1);
        assert_eq!(first.groups.len(), 1);
        assert_eq!(first.groups[0].name, "default");
        assert_eq!(state.subnet(&first).to_string(), "10.77.1.0/24");
        assert_eq!(state.gateway(&first).to_string(), "10.77.1.1");
        assert!(matches!(
            state.ensure_project("a b"),
            Err(StateError::Invalid(_))
        ));
    }

    #[test]
    fn tokens_need_the_password_and_the_users_own_project_and_expire() {
        let mut state = state();
        let (id, password) = match state.ensure_project("a") {
            Ok(p) => (p.id.clone(), p.password.clone()),
            Err(e) => panic!("{e}"),
        };
        let _ = state.ensure_project("b");
        let by_name = ProjectScope::Name("a".into());
        assert_eq!(
            state.password_auth("a", "wrong", &by_name, t0()),
            Err(StateError::Unauthenticated)
        );
        assert_eq!(
            state.password_auth("a", &password, &ProjectScope::Name("b".into()), t0()),
            Err(StateError::Unauthenticated)
        );
        assert_eq!(
            state.password_auth("nobody", &password, &by_name, t0()),
            Err(StateError::Unauthenticated)
        );
        let Ok((value, token)) =
            state.password_auth("a", &password, &ProjectScope::Id(id.clone()), t0())
        else {
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
            .ensure_project("a")
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
}
