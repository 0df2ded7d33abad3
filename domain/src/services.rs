//! Services across hosts: the instances steps register, the members a step sees, and what a
//! step's templates take of them.
//!
//! A step that `provides` a service registers one instance per host once it succeeded and the
//! service answered its check; the tenant's registry is every deployment's instances. A step
//! that `requires` services waits until each has enough members, and one that `watch`es them
//! runs again when their members change. The members a step's attempt sees are recorded with it
//! (`ServicesResolved`), so its templates render from the log alone.

use std::collections::{BTreeMap, BTreeSet};

use overture_events::{ServiceRequirement, ServiceShortfall, StepSpec};

use crate::blueprint::strings_in;
use crate::template::{Reference, ServiceField, Template};

/// How long a step waits for the services it requires, unless the blueprint says.
pub const DEFAULT_SERVICE_WAIT: std::time::Duration = std::time::Duration::from_secs(600);

/// One registered instance of a service: a host of a step that answered the service's check.
#[derive(
    Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ServiceInstance {
    /// The service.
    pub service: String,
    /// The step that configured the host.
    pub step: String,
    /// The server: its name in the step that made it, or its address.
    pub host: String,
    /// Where the service answers.
    pub address: String,
    /// Its port.
    pub port: u16,
}

impl ServiceInstance {
    /// The instance as a member of its service: `ADDRESS:PORT` (`[ADDRESS]:PORT` for IPv6).
    pub fn member(&self) -> String {
        if self.address.contains(':') {
            format!("[{}]:{}", self.address, self.port)
        } else {
            format!("{}:{}", self.address, self.port)
        }
    }
}

/// An instance in the tenant's registry, with the deployment that registered it (as
/// `GET /v1/services` answers it).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RegisteredInstance {
    /// The deployment whose step registered it.
    pub deployment: overture_events::DeploymentId,
    /// The instance.
    pub instance: ServiceInstance,
    /// When it was registered.
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub registered_at: overture_events::Timestamp,
}

/// Each service's members, sorted and without repeats: two deployments registering the same
/// address and port make one member.
pub type Members = BTreeMap<String, BTreeSet<String>>;

/// The members of every service these instances belong to.
pub fn members<'a>(instances: impl IntoIterator<Item = &'a ServiceInstance>) -> Members {
    let mut members = Members::new();
    for instance in instances {
        members
            .entry(instance.service.clone())
            .or_default()
            .insert(instance.member());
    }
    members
}

/// The members of one service, sorted (none when nothing is registered).
pub fn members_of(members: &Members, service: &str) -> Vec<String> {
    members
        .get(service)
        .map(|set| set.iter().cloned().collect())
        .unwrap_or_default()
}

/// The step's requirements that the members do not meet yet.
pub fn shortfalls(requires: &[ServiceRequirement], members: &Members) -> Vec<ServiceShortfall> {
    requires
        .iter()
        .filter_map(|need| {
            let registered = members
                .get(&need.service)
                .map_or(0, |set| u32::try_from(set.len()).unwrap_or(u32::MAX));
            (registered < need.count).then(|| ServiceShortfall {
                service: need.service.clone(),
                count: need.count,
                registered,
            })
        })
        .collect()
}

/// What a step waits for, as people read it: "service `app` (1 of 2 registered), ...".
pub fn shortfalls_text(shortfalls: &[ServiceShortfall]) -> String {
    shortfalls
        .iter()
        .map(|short| {
            format!(
                "service `{}` ({} of {} registered)",
                short.service, short.registered, short.count
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The services a step's templates refer to, in its settings.
pub fn referenced_services(spec: &StepSpec) -> BTreeSet<String> {
    spec.with
        .values()
        .flat_map(strings_in)
        .filter_map(|text| Template::parse(text).ok())
        .flat_map(|template| {
            template
                .references()
                .filter_map(|reference| match reference {
                    Reference::Service { service, .. } => Some(service.clone()),
                    _ => None,
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The services whose members a step's attempts see: those it requires, watches, or its
/// templates name. A step with none starts without looking at the registry.
pub fn seen_services(spec: &StepSpec) -> BTreeSet<String> {
    let mut seen = referenced_services(spec);
    seen.extend(spec.requires.iter().map(|need| need.service.clone()));
    seen.extend(spec.watch.iter().cloned());
    seen
}

/// What a template's reference to a service stands for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServiceValue {
    /// Text: one member, or the count.
    Text(String),
    /// Every member: a list where a setting is just the reference, else joined with commas.
    List(Vec<String>),
}

impl ServiceValue {
    /// The value as text: a list's members joined with commas.
    pub fn into_text(self) -> String {
        match self {
            ServiceValue::Text(text) => text,
            ServiceValue::List(members) => members.join(","),
        }
    }
}

/// The value of `field` for a service with these members (sorted), or why there is none.
pub fn field_value(
    service: &str,
    members: &[String],
    field: ServiceField,
) -> Result<ServiceValue, String> {
    match field {
        ServiceField::Addresses => Ok(ServiceValue::List(members.to_vec())),
        ServiceField::Count => Ok(ServiceValue::Text(members.len().to_string())),
        ServiceField::Address(at) => members
            .get(at)
            .cloned()
            .map(ServiceValue::Text)
            .ok_or_else(|| {
                format!(
                    "`{{{{ services.{service}.addresses[{at}] }}}}`: service `{service}` has {} member(s)",
                    members.len()
                )
            }),
    }
}

/// The members of the services a step sees, as `ServicesResolved` records them.
pub fn resolved(spec: &StepSpec, members: &Members) -> BTreeMap<String, Vec<String>> {
    seen_services(spec)
        .into_iter()
        .map(|service| {
            let list = members_of(members, &service);
            (service, list)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn instance(service: &str, address: &str, port: u16) -> ServiceInstance {
        ServiceInstance {
            service: service.into(),
            step: "s".into(),
            host: address.into(),
            address: address.into(),
            port,
        }
    }

    #[test]
    fn members_are_sorted_and_counted_once() {
        let instances = [
            instance("app", "10.0.0.9", 8000),
            instance("app", "10.0.0.10", 8000),
            instance("app", "10.0.0.9", 8000),
            instance("db", "fd00::1", 5432),
        ];
        let members = members(&instances);
        assert_eq!(
            members_of(&members, "app"),
            ["10.0.0.10:8000", "10.0.0.9:8000"]
        );
        assert_eq!(members_of(&members, "db"), ["[fd00::1]:5432"]);
        assert!(members_of(&members, "cache").is_empty());
    }

    #[test]
    fn a_shortfall_names_what_is_missing() {
        let members = members(&[instance("app", "10.0.0.9", 8000)]);
        let need = |service: &str, count| ServiceRequirement {
            service: service.into(),
            count,
            timeout_ms: 1,
        };
        assert_eq!(
            shortfalls(&[need("app", 1), need("app", 2), need("db", 1)], &members),
            vec![
                ServiceShortfall {
                    service: "app".into(),
                    count: 2,
                    registered: 1
                },
                ServiceShortfall {
                    service: "db".into(),
                    count: 1,
                    registered: 0
                },
            ]
        );
    }

    #[test]
    fn fields_render_from_the_members() {
        let members = vec!["10.0.0.3:8000".to_owned(), "10.0.0.4:8000".to_owned()];
        assert_eq!(
            field_value("app", &members, ServiceField::Addresses)
                .expect("a list")
                .into_text(),
            "10.0.0.3:8000,10.0.0.4:8000"
        );
        assert_eq!(
            field_value("app", &members, ServiceField::Count),
            Ok(ServiceValue::Text("2".into()))
        );
        assert_eq!(
            field_value("app", &members, ServiceField::Address(1)),
            Ok(ServiceValue::Text("10.0.0.4:8000".into()))
        );
        let beyond = field_value("app", &members, ServiceField::Address(2)).expect_err("beyond");
        assert!(beyond.contains("has 2 member(s)"), "{beyond}");
    }
}
