//! Whose a deployment is. The tenant is the cloud project's *id*: Keystone names a project
//! uniquely only within its domain, and a project deleted and made again under the same name
//! is another project with another id. The name and the domain are kept beside the id for
//! people ([`ProjectLabel`]), never compared.
//!
//! Records made before the tenant was the id name the project by its name; those made with a
//! token also recorded the token's `project_id`. [`tenant_of`] reads such a record as the
//! project's id, so every read model, the service registry and every ownership check key on
//! the id whenever the record says it. A record made without a token (a local `deploy` with
//! `--tenant`) belongs to no cloud project and keeps its name: no API caller's tenant is ever
//! a name, so none sees it.

use overture_events::CloudAccount;
use serde::{Deserialize, Serialize};

/// The tenant a record belongs to: its cloud account's project id when it has one, else the
/// tenant it recorded.
pub fn tenant_of<'a>(recorded: &'a str, cloud: Option<&'a CloudAccount>) -> &'a str {
    match cloud {
        Some(account) if !account.project_id.is_empty() => &account.project_id,
        _ => recorded,
    }
}

/// Whether a caller whose tenant is `caller` (its token's project id) may see or act on what
/// belongs to `tenant`. An empty caller owns nothing, so a missing id cannot match a record
/// that has none either.
pub fn owns(caller: &str, tenant: &str) -> bool {
    !caller.is_empty() && caller == tenant
}

/// The project a tenant id stands for, as people know it: its name and its domain's name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ProjectLabel {
    /// The project's name (unique only within its domain).
    pub name: String,
    /// Its domain's name; empty when the record did not keep it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub domain: String,
}

impl ProjectLabel {
    /// The label of a record's cloud account; none for a record made without a token.
    pub fn of(cloud: Option<&CloudAccount>) -> Option<Self> {
        cloud.map(|account| Self {
            name: account.project.clone(),
            domain: account.domain.clone(),
        })
    }
}

impl std::fmt::Display for ProjectLabel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.domain.is_empty() {
            write!(f, "{}", self.name)
        } else {
            write!(f, "{} in domain {}", self.name, self.domain)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn account(project_id: &str, project: &str, domain: &str) -> CloudAccount {
        CloudAccount {
            auth_url: "http://127.0.0.1:5000/identity/v3".into(),
            project_id: project_id.into(),
            project: project.into(),
            domain: domain.into(),
            user: project.into(),
            endpoints: Vec::new(),
        }
    }

    #[test]
    fn a_record_made_with_a_token_belongs_to_its_project_id_whatever_tenant_it_recorded() {
        let new = account("9f1c", "acme", "Default");
        assert_eq!(tenant_of("9f1c", Some(&new)), "9f1c");
        // Before the tenant was the id, the name was recorded; the account kept the id.
        assert_eq!(tenant_of("acme", Some(&new)), "9f1c");
        let other_domain = account("77ab", "acme", "Other");
        assert_ne!(
            tenant_of("acme", Some(&new)),
            tenant_of("acme", Some(&other_domain)),
            "two projects named alike are two tenants"
        );
    }

    #[test]
    fn a_record_without_a_cloud_account_keeps_its_name_and_no_caller_owns_it_by_name() {
        assert_eq!(tenant_of("default", None), "default");
        let no_id = account("", "acme", "");
        assert_eq!(tenant_of("acme", Some(&no_id)), "acme");
        assert!(!owns("9f1c", "acme"));
        assert!(!owns("", ""), "a missing id owns nothing");
        assert!(owns("9f1c", "9f1c"));
    }

    #[test]
    fn the_label_names_the_domain_beside_the_project() {
        let label = ProjectLabel::of(Some(&account("9f1c", "acme", "Other"))).expect("a label");
        assert_eq!(label.to_string(), "acme in domain Other");
        let old = ProjectLabel::of(Some(&account("9f1c", "acme", ""))).expect("a label");
        assert_eq!(old.to_string(), "acme");
        assert_eq!(ProjectLabel::of(None), None);
    }
}
