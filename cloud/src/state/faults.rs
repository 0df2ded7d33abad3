//! The faults a test injects into a project through the admin API.

use std::collections::BTreeSet;

use uuid::Uuid;

use super::{State, StateError};

/// A project's faults.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Faults {
    /// How many more Nova or Neutron calls answer 503.
    pub backend_unreachable: u32,
    /// Servers created with one of these names (or `PREFIX-` and one of them) never start sshd.
    pub never_boot: BTreeSet<String>,
}

impl State {
    /// The next `times` Nova or Neutron calls of the project answer 503.
    pub fn fail_backend(&mut self, project_id: &str, times: u32) -> Result<(), StateError> {
        self.project_mut(project_id)?.faults.backend_unreachable = times;
        Ok(())
    }

    /// Counts one Nova or Neutron call: whether it must answer 503.
    pub fn take_backend_fault(&mut self, project_id: &str) -> bool {
        match self.project_mut(project_id) {
            Ok(project) if project.faults.backend_unreachable > 0 => {
                project.faults.backend_unreachable -= 1;
                true
            }
            _ => false,
        }
    }

    /// Servers of that name (or `PREFIX-name`) created from now on never start their sshd.
    pub fn never_boot(&mut self, project_id: &str, name: &str) -> Result<(), StateError> {
        self.project_mut(project_id)?
            .faults
            .never_boot
            .insert(name.to_owned());
        Ok(())
    }

    /// Makes the project's servers with that name or id refuse every packet; returns them.
    pub fn make_unreachable(
        &mut self,
        project_id: &str,
        server: &str,
    ) -> Result<Vec<Uuid>, StateError> {
        let project = self.project_mut(project_id)?;
        let mut hit = Vec::new();
        for s in project
            .servers
            .iter_mut()
            .filter(|s| s.name == server || s.id.to_string() == server)
        {
            s.unreachable = true;
            hit.push(s.id);
        }
        if hit.is_empty() {
            return Err(StateError::ServerNotFound(server.to_owned()));
        }
        Ok(hit)
    }

    /// Clears every fault of the project.
    pub fn clear_faults(&mut self, project_id: &str) -> Result<(), StateError> {
        let project = self.project_mut(project_id)?;
        project.faults = Faults::default();
        for server in &mut project.servers {
            server.unreachable = false;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{t0, two_projects};
    use super::super::NewServer;
    use super::*;

    #[test]
    fn backend_faults_count_down_per_project() {
        let (mut state, a, b) = two_projects();
        assert_eq!(state.fail_backend(&a, 2), Ok(()));
        assert!(!state.take_backend_fault(&b));
        assert!(state.take_backend_fault(&a));
        assert!(state.take_backend_fault(&a));
        assert!(!state.take_backend_fault(&a));
    }

    #[test]
    fn never_boot_marks_later_servers_of_that_name_until_cleared() {
        let (mut state, a, _) = two_projects();
        let new = |name: &str| NewServer {
            name: name.into(),
            ..NewServer::default()
        };
        assert_eq!(state.never_boot(&a, "web-1"), Ok(()));
        let marked = state
            .create_server(&a, new("web-1"), t0())
            .map(|s| s.never_boot);
        let other = state
            .create_server(&a, new("web-2"), t0())
            .map(|s| s.never_boot);
        assert_eq!((marked, other), (Ok(true), Ok(false)));
        let prefixed = state.create_server(&a, new("d1a2-web-1"), t0());
        let glued = state.create_server(&a, new("d1a2web-1"), t0());
        assert_eq!(
            (prefixed.map(|s| s.never_boot), glued.map(|s| s.never_boot)),
            (Ok(true), Ok(false))
        );
        assert_eq!(state.make_unreachable(&a, "web-2").map(|s| s.len()), Ok(1));
        assert_eq!(
            state.make_unreachable(&a, "nope"),
            Err(StateError::ServerNotFound("nope".into()))
        );
        assert_eq!(state.clear_faults(&a), Ok(()));
        let after = state
            .create_server(&a, new("web-1"), t0())
            .map(|s| s.never_boot);
        assert_eq!(after, Ok(false));
        let servers = state.servers(&a, None).unwrap_or_default();
        assert!(servers.iter().all(|s| !s.unreachable));
    }
}
