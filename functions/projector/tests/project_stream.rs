//! The per-stream projector on a read-model store held in memory: the contract every store
//! keeps (so the suite itself is shown passable), and how the projector gives up.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use overture_domain::projection::{DeploymentView, TenantDelta, TenantView};
use overture_domain::registry::{still_interested, Registry};
use overture_domain::services::RegisteredInstance;
use overture_events::{DeploymentId, Envelope, Metadata, Timestamp};
use overture_kit::registry::{ReadServiceRegistry, RegistryError};
use overture_kit::{LogError, ReadStream};
use overture_projector::{project_stream, DeploymentViews, StreamProjectionError, ViewError};
use uuid::Uuid;

/// Views and summaries in memory; clones share them, as two clients of one store would.
#[derive(Clone, Default)]
struct MemoryViews {
    views: Arc<Mutex<HashMap<DeploymentId, DeploymentView>>>,
    tenants: Arc<Mutex<HashMap<String, TenantView>>>,
    registry: Arc<Mutex<Registry>>,
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

async fn clients() -> (MemoryViews, MemoryViews) {
    let store = MemoryViews::default();
    (store.clone(), store)
}

overture_projector::read_model_contract_tests!(clients());

/// A store on which another projector always saves first.
struct AlwaysRaced {
    saves: AtomicUsize,
}

#[async_trait]
impl DeploymentViews for AlwaysRaced {
    async fn view(&self, _: DeploymentId) -> Result<Option<DeploymentView>, ViewError> {
        Ok(None)
    }

    async fn view_of_steps(
        &self,
        _: DeploymentId,
        _: &BTreeSet<String>,
    ) -> Result<Option<DeploymentView>, ViewError> {
        Ok(None)
    }

    async fn save(
        &self,
        view: &DeploymentView,
        loaded_at: Option<u64>,
        _: &TenantDelta,
        _: &BTreeSet<String>,
        _: &overture_domain::registry::Registry,
    ) -> Result<(), ViewError> {
        self.saves.fetch_add(1, Ordering::SeqCst);
        Err(ViewError::Conflict {
            deployment: view.id,
            loaded_at,
        })
    }

    async fn tenant(&self, _: &str) -> Result<Option<TenantView>, ViewError> {
        Ok(None)
    }
}

struct NoLog;

#[async_trait]
impl ReadStream for NoLog {
    async fn read_stream(&self, _: DeploymentId, _: u64) -> Result<Vec<Envelope>, LogError> {
        Ok(Vec::new())
    }
}

fn record(
    deployment: DeploymentId,
    revision: u64,
    event_type: &str,
    data: serde_json::Value,
) -> Envelope {
    Envelope {
        stream: deployment.stream(),
        revision,
        id: Uuid::now_v7(),
        event_type: event_type.into(),
        data,
        metadata: Metadata {
            tenant: "acme".into(),
            actor: "tester".into(),
            correlation_id: deployment.uuid(),
            causation_id: deployment.uuid(),
            recorded_at: Timestamp::UNIX_EPOCH,
        },
    }
}

fn requested(deployment: DeploymentId) -> Envelope {
    let blueprint = overture_domain::blueprint::parse("name: app\nsteps:\n  a: { run: noop }\n")
        .expect("valid")
        .snapshot;
    let event = overture_events::DeploymentEvent::DeploymentRequested {
        triggered_by: None,
        tenant: "acme".into(),
        requested_by: "ada".into(),
        trigger: "cli".into(),
        source: "app.yaml".into(),
        blueprint,
        blueprint_hash: "0".repeat(64),
        params: Default::default(),
        cloud: None,
    };
    record(deployment, 0, event.event_type(), event.data())
}

#[tokio::test]
async fn a_projector_that_always_loses_the_race_gives_up_with_a_retryable_error() {
    let deployment = DeploymentId::from_uuid(Uuid::now_v7());
    let store = AlwaysRaced {
        saves: AtomicUsize::new(0),
    };
    let outcome = project_stream(deployment, &[requested(deployment)], &NoLog, &store).await;
    assert!(
        matches!(&outcome, Err(error @ StreamProjectionError::Contended { .. }) if error.is_retryable()),
        "{outcome:?}"
    );
    assert_eq!(
        store.saves.load(Ordering::SeqCst),
        overture_projector::MAX_ROUNDS as usize
    );
}

#[tokio::test]
async fn a_record_that_does_not_fold_saves_nothing_and_is_not_worth_retrying() {
    let deployment = DeploymentId::from_uuid(Uuid::now_v7());
    let store = MemoryViews::default();
    let bad = record(
        deployment,
        0,
        "DeploymentRequested",
        serde_json::json!({ "tenant": 3 }),
    );
    let outcome = project_stream(deployment, &[bad], &NoLog, &store).await;
    assert!(
        matches!(&outcome, Err(error @ StreamProjectionError::Projection { .. }) if !error.is_retryable()),
        "{outcome:?}"
    );
    assert_eq!(store.view(deployment).await.expect("loads"), None);
    assert_eq!(store.tenant("acme").await.expect("loads"), None);
}
