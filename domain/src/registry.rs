//! The tenants' service registry as a fold over the log: the instances steps registered, and
//! which deployments take an interest in which services.
//!
//! [`Registry`] is what folding records sets: each instance put (`ServiceRegistered`) or removed
//! (`ServiceDeregistered`), and an interest row per service a deployment's steps `require` or
//! `watch` (`DeploymentRequested`). Folding a whole log into an empty one gives the whole
//! registry; folding a deployment's new records gives what a store writes over what it holds:
//! the instances put, the instances removed ([`Registry::removed`]) and the interests. The
//! projection folds it with the deployment's view ([`crate::projection::project`],
//! [`crate::projection::ReadModels`]), so it is applied once per revision, as the view is.
//! Every write is keyed in full, so writing it again changes nothing.
//!
//! [`still_interested`] is the rule that says which interested deployments still care about a
//! service's members changing; stores answer [`interested`](Registry::interested) with it.

use std::collections::{BTreeMap, BTreeSet};

use overture_events::{DeploymentId, Timestamp};

use crate::projection::{Change, DeploymentStatus, DestroyStatus};
use crate::services::{RegisteredInstance, ServiceInstance};

/// What identifies a registered instance: its tenant, service, address and port, and the
/// deployment that registered it. The order (derived) is the order the registry lists in.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct InstanceKey {
    /// The tenant.
    pub tenant: String,
    /// The service.
    pub service: String,
    /// Where it answers.
    pub address: String,
    /// Its port.
    pub port: u16,
    /// The deployment whose step registered it.
    pub deployment: DeploymentId,
}

/// What identifies an interest row: a deployment's interest in one service of its tenant.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct InterestKey {
    /// The tenant.
    pub tenant: String,
    /// The service.
    pub service: String,
    /// The deployment some of whose steps require or watch it.
    pub deployment: DeploymentId,
}

/// The registry rows that folds set. Two registries are equal when they hold the same
/// instances and interests: [`Registry::removed`] only tells a store what to delete.
#[derive(Clone, Debug, Default)]
pub struct Registry {
    /// The registered instances.
    pub instances: BTreeMap<InstanceKey, RegisteredInstance>,
    /// Instances the folds removed (none of them is in `instances`): a store deletes them.
    pub removed: BTreeSet<InstanceKey>,
    /// Each deployment's interest in a service: `true` when one of its steps watches it,
    /// `false` when its steps only require it.
    pub interests: BTreeMap<InterestKey, bool>,
}

impl PartialEq for Registry {
    fn eq(&self, other: &Self) -> bool {
        self.instances == other.instances && self.interests == other.interests
    }
}

impl Registry {
    /// Whether the folds set nothing.
    pub fn is_empty(&self) -> bool {
        self.instances.is_empty() && self.removed.is_empty() && self.interests.is_empty()
    }

    /// Folds one record of `deployment` (of `tenant`), recorded `at`, in. Records that say
    /// nothing about services change nothing.
    pub fn fold(&mut self, tenant: &str, deployment: DeploymentId, change: &Change, at: Timestamp) {
        match change {
            Change::Requested { services, .. } => {
                for (service, watched) in services {
                    self.interest(tenant, deployment, service, *watched);
                }
            }
            Change::ServiceRegistered {
                service,
                step,
                host,
                address,
                port,
            } => {
                let instance = ServiceInstance {
                    service: service.clone(),
                    step: step.clone(),
                    host: host.clone(),
                    address: address.clone(),
                    port: *port,
                };
                self.register(tenant, deployment, instance, at);
            }
            Change::ServiceDeregistered {
                service,
                address,
                port,
            } => {
                let key = InstanceKey {
                    tenant: tenant.to_owned(),
                    service: service.clone(),
                    address: address.clone(),
                    port: *port,
                    deployment,
                };
                self.instances.remove(&key);
                self.removed.insert(key);
            }
            _ => {}
        }
    }

    /// Puts an instance, registered `at` (a later registration of the same one replaces it).
    pub fn register(
        &mut self,
        tenant: &str,
        deployment: DeploymentId,
        instance: ServiceInstance,
        at: Timestamp,
    ) {
        let key = InstanceKey {
            tenant: tenant.to_owned(),
            service: instance.service.clone(),
            address: instance.address.clone(),
            port: instance.port,
            deployment,
        };
        self.removed.remove(&key);
        self.instances.insert(
            key,
            RegisteredInstance {
                deployment,
                instance,
                registered_at: at,
            },
        );
    }

    /// Records a deployment's interest in a service; watching it wins over requiring it.
    pub fn interest(
        &mut self,
        tenant: &str,
        deployment: DeploymentId,
        service: &str,
        watched: bool,
    ) {
        let key = InterestKey {
            tenant: tenant.to_owned(),
            service: service.to_owned(),
            deployment,
        };
        *self.interests.entry(key).or_default() |= watched;
    }

    /// Folds in what `later` set after what this one did.
    pub fn merge(&mut self, later: Registry) {
        for key in later.removed {
            self.instances.remove(&key);
            self.removed.insert(key);
        }
        for (key, instance) in later.instances {
            self.removed.remove(&key);
            self.instances.insert(key, instance);
        }
        for (key, watched) in later.interests {
            *self.interests.entry(key).or_default() |= watched;
        }
    }

    /// The tenant's registered instances, by service, then address, then port (then
    /// deployment).
    pub fn service_instances(&self, tenant: &str) -> Vec<RegisteredInstance> {
        self.instances
            .iter()
            .filter(|(key, _)| key.tenant == tenant)
            .map(|(_, instance)| instance.clone())
            .collect()
    }

    /// The tenant's deployments interested in `service`, with whether they watch it.
    pub fn interested<'a>(
        &'a self,
        tenant: &'a str,
        service: &'a str,
    ) -> impl Iterator<Item = (DeploymentId, bool)> + 'a {
        self.interests
            .iter()
            .filter(move |(key, _)| key.tenant == tenant && key.service == service)
            .map(|(key, watched)| (key.deployment, *watched))
    }

    /// Every tenant with an instance or an interest.
    pub fn tenants(&self) -> BTreeSet<&str> {
        self.instances
            .keys()
            .map(|key| key.tenant.as_str())
            .chain(self.interests.keys().map(|key| key.tenant.as_str()))
            .collect()
    }
}

/// Whether a deployment with an interest in a service still cares about its members: it is
/// running (its steps may yet wait for them), or it succeeded, watches the service and is not
/// being torn down (a watching step runs again when the members change). A deployment whose
/// tear-down failed is still counted: one interested deployment too many is harmless, as its
/// callers are idempotent, and one too few is not.
pub fn still_interested(
    status: DeploymentStatus,
    destroy: Option<DestroyStatus>,
    watched: bool,
) -> bool {
    match status {
        DeploymentStatus::Running => true,
        DeploymentStatus::Succeeded => {
            watched
                && !matches!(
                    destroy,
                    Some(DestroyStatus::Destroying | DestroyStatus::Destroyed)
                )
        }
        DeploymentStatus::Failed | DeploymentStatus::Cancelled => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u128) -> DeploymentId {
        DeploymentId::from_uuid(uuid::Uuid::from_u128(n))
    }

    fn registered(service: &str, address: &str, port: u16) -> Change {
        Change::ServiceRegistered {
            service: service.into(),
            step: "app".into(),
            host: format!("host-{address}"),
            address: address.into(),
            port,
        }
    }

    #[test]
    fn a_deregistration_removes_only_its_own_instance() {
        let at = Timestamp::UNIX_EPOCH;
        let mut registry = Registry::default();
        registry.fold("acme", id(1), &registered("app", "10.0.0.9", 80), at);
        registry.fold("acme", id(2), &registered("app", "10.0.0.9", 80), at);
        registry.fold("acme", id(1), &registered("app", "10.0.0.9", 81), at);
        let gone = Change::ServiceDeregistered {
            service: "app".into(),
            address: "10.0.0.9".into(),
            port: 80,
        };
        registry.fold("acme", id(1), &gone, at);
        let left: Vec<(DeploymentId, u16)> = registry
            .service_instances("acme")
            .into_iter()
            .map(|r| (r.deployment, r.instance.port))
            .collect();
        assert_eq!(left, [(id(2), 80), (id(1), 81)]);
        assert_eq!(registry.removed.len(), 1);
    }

    #[test]
    fn a_later_fold_merged_in_wins() {
        let at = Timestamp::UNIX_EPOCH;
        let mut earlier = Registry::default();
        earlier.fold("acme", id(1), &registered("app", "10.0.0.9", 80), at);
        let mut later = Registry::default();
        later.fold(
            "acme",
            id(1),
            &Change::ServiceDeregistered {
                service: "app".into(),
                address: "10.0.0.9".into(),
                port: 80,
            },
            at,
        );
        later.interest("acme", id(1), "db", true);
        earlier.merge(later);
        assert!(earlier.service_instances("acme").is_empty());
        assert_eq!(earlier.removed.len(), 1);
        assert_eq!(
            earlier.interested("acme", "db").collect::<Vec<_>>(),
            [(id(1), true)]
        );
    }

    #[test]
    fn who_still_cares_about_a_service() {
        use DeploymentStatus as S;
        use DestroyStatus as D;
        assert!(still_interested(S::Running, None, false));
        assert!(still_interested(S::Running, None, true));
        assert!(!still_interested(S::Succeeded, None, false));
        assert!(still_interested(S::Succeeded, None, true));
        assert!(still_interested(S::Succeeded, Some(D::Failed), true));
        assert!(!still_interested(S::Succeeded, Some(D::Destroying), true));
        assert!(!still_interested(S::Succeeded, Some(D::Destroyed), true));
        assert!(!still_interested(S::Failed, None, true));
        assert!(!still_interested(S::Cancelled, None, true));
    }
}
