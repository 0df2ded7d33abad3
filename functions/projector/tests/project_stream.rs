//! The per-stream projector on a read-model store held in memory: the contract every store
//! keeps (so the suite itself is shown passable), and how the projector gives up.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use overture_domain::projection::{DeploymentView, TenantDelta, TenantView};
use overture_events::{DeploymentId, Envelope, Metadata, Timestamp};
use overture_kit::{LogError, ReadStream};
use overture_projector::contract::MemoryViews;
use overture_projector::{project_stream, DeploymentViews, StreamProjectionError, ViewError};
use uuid::Uuid;

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
            previous: None,
            hash: None,
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
        name: None,
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
