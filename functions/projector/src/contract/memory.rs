//! A read-model store held in memory: the store the contract suite is shown passable on, and
//! the fake the projector's own tests fold into.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use overture_domain::projection::{DeploymentView, TenantDelta, TenantView};
use overture_domain::registry::{still_interested, Registry};
use overture_domain::services::RegisteredInstance;
use overture_events::DeploymentId;
use overture_kit::registry::{ReadServiceRegistry, RegistryError};

use crate::{DeploymentViews, ViewError};

/// Views, summaries and the service registry in memory; clones share them, as two clients of
/// one store would.
#[derive(Clone, Debug, Default)]
pub struct MemoryViews {
    views: Arc<Mutex<HashMap<DeploymentId, DeploymentView>>>,
    tenants: Arc<Mutex<HashMap<String, TenantView>>>,
    registry: Arc<Mutex<Registry>>,
    throttled: Option<DeploymentId>,
}

/// Why a throttled store refused a save.
#[derive(Debug, thiserror::Error)]
#[error("the table is throttled")]
pub struct Throttled;

impl MemoryViews {
    /// A store whose every save of `deployment`'s view fails as a throttled table's would.
    pub fn throttled_for(deployment: DeploymentId) -> Self {
        Self {
            throttled: Some(deployment),
            ..Self::default()
        }
    }
}

#[async_trait]
impl DeploymentViews for MemoryViews {
    async fn view(&self, deployment: DeploymentId) -> Result<Option<DeploymentView>, ViewError> {
        let views = self.views.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(views.get(&deployment).cloned())
    }

    async fn view_of_steps(
        &self,
        deployment: DeploymentId,
        steps: &BTreeSet<String>,
    ) -> Result<Option<DeploymentView>, ViewError> {
        let views = self.views.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(views.get(&deployment).map(|view| {
            let mut view = view.clone();
            view.steps.retain(|name, _| steps.contains(name));
            view
        }))
    }

    async fn save(
        &self,
        view: &DeploymentView,
        loaded_at: Option<u64>,
        delta: &TenantDelta,
        steps: &BTreeSet<String>,
        written: &Registry,
    ) -> Result<(), ViewError> {
        if self.throttled == Some(view.id) {
            return Err(ViewError::Unavailable(Box::new(Throttled)));
        }
        // Every lock, views first, held together: the save is all or nothing.
        let mut views = self.views.lock().unwrap_or_else(PoisonError::into_inner);
        let mut tenants = self.tenants.lock().unwrap_or_else(PoisonError::into_inner);
        let mut registry = self.registry.lock().unwrap_or_else(PoisonError::into_inner);
        if views.get(&view.id).map(|v| v.revision) != loaded_at {
            return Err(ViewError::Conflict {
                deployment: view.id,
                loaded_at,
            });
        }
        // The header replaced, and only the named steps: the others stay as stored.
        let mut stored = view.clone();
        stored.steps = views.remove(&view.id).map(|v| v.steps).unwrap_or_default();
        for (name, step) in view.steps.iter().filter(|(name, _)| steps.contains(*name)) {
            stored.steps.insert(name.clone(), step.clone());
        }
        views.insert(view.id, stored);
        let summary = delta.apply_to(tenants.remove(&view.tenant), &view.tenant);
        tenants.insert(view.tenant.clone(), summary);
        registry.merge(written.clone());
        Ok(())
    }

    async fn tenant(&self, tenant: &str) -> Result<Option<TenantView>, ViewError> {
        let tenants = self.tenants.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(tenants.get(tenant).cloned())
    }
}

#[async_trait]
impl ReadServiceRegistry for MemoryViews {
    async fn service_instances(
        &self,
        tenant: &str,
    ) -> Result<Vec<RegisteredInstance>, RegistryError> {
        let registry = self.registry.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(registry.service_instances(tenant))
    }

    async fn interested_deployments(
        &self,
        tenant: &str,
        service: &str,
    ) -> Result<Vec<DeploymentId>, RegistryError> {
        let registry = self.registry.lock().unwrap_or_else(PoisonError::into_inner);
        let views = self.views.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(registry
            .interested(tenant, service)
            .filter(|(id, watched)| {
                views.get(id).is_some_and(|view| {
                    let destroy = view.destroy.as_ref().map(|d| d.status);
                    still_interested(view.status, destroy, *watched)
                })
            })
            .map(|(id, _)| id)
            .collect())
    }
}
