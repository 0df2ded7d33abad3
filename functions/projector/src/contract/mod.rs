//! The contract every read-model store keeps ([`DeploymentViews`]), as tests that each adapter's
//! suite runs against a real store with [`read_model_contract_tests!`](crate::read_model_contract_tests).
//!
//! Each test drives [`project_stream`] as DynamoDB Streams would: records delivered again, out
//! of order, or by two projectors at once. It takes two clients of one store (as two Lambdas
//! would hold) and works on deployments and a tenant of its own, so the tests share a store
//! without a reset. The log is a [`Records`] the test controls, so it can hold a record back.
//! The store's service registry ([`ReadServiceRegistry`]), written by the same saves, is read
//! back through the engine's port.
//!
//! The cases by what they check: `delivery` (records delivered again, out of order, or by
//! racing projectors), `saves` (what a save writes: exact tenant counters, only the changed
//! steps), `registry` (the service registry written by the same saves). `memory` holds a
//! store in memory that keeps the contract, for the projector's own tests.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use chrono::TimeDelta;
use overture_domain::blueprint;
use overture_domain::projection::{DeploymentStatus, DeploymentView, ReadModels, TenantView};
use overture_events::{DeploymentEvent, DeploymentId, Envelope, Metadata, Timestamp};
use overture_kit::registry::ReadServiceRegistry;
use overture_kit::{LogError, ReadStream};
use uuid::Uuid;

use crate::{project_stream, DeploymentViews, StreamProjectionError};

pub use delivery::*;
pub use memory::{MemoryViews, Throttled};
pub use registry::*;
pub use saves::*;

mod delivery;
mod memory;
mod registry;
mod saves;

/// A read-model store under test.
pub trait Store: DeploymentViews + ReadServiceRegistry + Clone + 'static {}
impl<T: DeploymentViews + ReadServiceRegistry + Clone + 'static> Store for T {}

/// Generates one `#[tokio::test]` per contract test. `$clients` is an expression (evaluated
/// anew in each test) of a future yielding two clients of one store.
#[macro_export]
macro_rules! read_model_contract_tests {
    ($clients:expr) => {
        $crate::read_model_contract_tests!(@each $clients;
            a_replayed_record_changes_nothing,
            a_record_before_its_predecessor_changes_nothing_until_the_gap_is_filled,
            racing_projectors_end_with_the_right_view_and_count_the_tenant_once,
            tenant_counters_over_many_deployments_are_exact,
            saving_one_step_leaves_the_other_steps_as_they_were,
            the_registry_holds_each_registered_instance_until_it_is_deregistered,
            registrations_delivered_again_or_after_a_gap_are_written_once,
            interested_deployments_are_those_that_still_care_about_the_service,
        );
    };
    (@each $clients:expr; $($test:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $test() {
                let (a, b) = $clients.await;
                $crate::contract::$test(&a, &b).await;
            }
        )*
    };
}

/// A deployment's records as the log holds them, of which the log lets only the first
/// `visible` be read: a test holds a record back to open a gap.
#[derive(Clone)]
pub struct Records {
    deployment: DeploymentId,
    all: Arc<Vec<Envelope>>,
    visible: Arc<AtomicUsize>,
}

impl Records {
    fn new(deployment: DeploymentId, all: Vec<Envelope>) -> Self {
        let visible = Arc::new(AtomicUsize::new(all.len()));
        Self {
            deployment,
            all: Arc::new(all),
            visible,
        }
    }

    fn show(&self, count: usize) {
        self.visible.store(count, Ordering::SeqCst);
    }

    fn at(&self, revisions: impl IntoIterator<Item = usize>) -> Vec<Envelope> {
        revisions.into_iter().map(|r| self.all[r].clone()).collect()
    }

    /// The view the whole stream folds into, in memory.
    fn expected_view(&self) -> DeploymentView {
        let mut models = ReadModels::default();
        for record in self.all.iter() {
            models.apply(record).expect("the test's records fold");
        }
        models.deployments[&self.deployment].clone()
    }
}

#[async_trait]
impl ReadStream for Records {
    async fn read_stream(
        &self,
        deployment: DeploymentId,
        from: u64,
    ) -> Result<Vec<Envelope>, LogError> {
        if deployment != self.deployment {
            return Ok(Vec::new());
        }
        let visible = self.visible.load(Ordering::SeqCst);
        Ok(self.all[..visible]
            .iter()
            .filter(|r| r.revision >= from)
            .cloned()
            .collect())
    }
}

fn at(seconds: i64) -> Timestamp {
    Timestamp::UNIX_EPOCH + TimeDelta::seconds(1_800_000_000 + seconds)
}

fn new_tenant() -> String {
    format!("contract-{}", Uuid::now_v7())
}

/// A deployment of `tenant` requested at `requested`, with two steps, that ends as `ending`
/// says (`None`: still running).
fn deployment(tenant: &str, requested: i64, ending: Option<DeploymentStatus>) -> Records {
    let blueprint = "name: contract\nsteps:\n  a: { run: noop }\n  b: { run: noop }\n";
    deployment_of(tenant, blueprint, requested, ending, Vec::new())
}

/// A deployment of `tenant` of this blueprint (steps `a` and `b`), requested at `requested`:
/// step `a` succeeds, then come `more` events, then it ends as `ending` says.
fn deployment_of(
    tenant: &str,
    blueprint: &str,
    requested: i64,
    ending: Option<DeploymentStatus>,
    more: Vec<DeploymentEvent>,
) -> Records {
    let id = DeploymentId::from_uuid(Uuid::now_v7());
    let blueprint = blueprint::parse(blueprint)
        .map(|parsed| parsed.snapshot)
        .unwrap_or_else(|problems| panic!("the contract's blueprint is valid: {problems}"));
    let mut events = vec![
        DeploymentEvent::DeploymentRequested {
            triggered_by: None,
            tenant: tenant.into(),
            requested_by: "ada".into(),
            trigger: "cli".into(),
            source: "contract.yaml".into(),
            blueprint,
            blueprint_hash: "0".repeat(64),
            params: BTreeMap::new(),
            cloud: None,
            name: None,
        },
        DeploymentEvent::StepScheduled {
            step: "a".into(),
            attempt: 1,
            not_before: at(requested),
        },
        DeploymentEvent::StepStarted {
            step: "a".into(),
            attempt: 1,
            sandbox: "sandbox-a".into(),
            lease_until: None,
            fingerprint: None,
        },
        DeploymentEvent::StepSucceeded {
            step: "a".into(),
            attempt: 1,
            outputs: [("k".to_owned(), "v".to_owned())].into(),
            duration_ms: 1,
        },
    ];
    events.extend(more);
    match ending {
        None | Some(DeploymentStatus::Running) => {}
        Some(DeploymentStatus::Succeeded) => events.push(DeploymentEvent::DeploymentSucceeded {}),
        Some(DeploymentStatus::Failed) => events.push(DeploymentEvent::DeploymentFailed {
            reason: "step `b` failed".into(),
        }),
        Some(DeploymentStatus::Cancelled) => events.push(DeploymentEvent::DeploymentCancelled {
            reason: "cancelled by ada".into(),
            requested_by: "ada".into(),
        }),
    }
    let envelopes = (0..)
        .zip(events)
        .map(|(revision, event)| Envelope {
            stream: id.stream(),
            revision,
            id: Uuid::now_v7(),
            event_type: event.event_type().into(),
            data: event.data(),
            metadata: Metadata {
                tenant: tenant.into(),
                actor: "contract-tester".into(),
                correlation_id: id.uuid(),
                causation_id: id.uuid(),
                recorded_at: at(requested + revision as i64),
                previous: None,
                hash: None,
            },
        })
        .collect();
    Records::new(id, envelopes)
}

async fn deliver<S: Store>(
    store: &S,
    records: &Records,
    revisions: impl IntoIterator<Item = usize>,
) -> Result<usize, StreamProjectionError> {
    project_stream(records.deployment, &records.at(revisions), records, store).await
}

async fn view<S: Store>(store: &S, records: &Records) -> Option<DeploymentView> {
    store.view(records.deployment).await.expect("load the view")
}

async fn summary<S: Store>(store: &S, tenant: &str) -> TenantView {
    store
        .tenant(tenant)
        .await
        .expect("load the tenant")
        .unwrap_or_else(|| TenantView::new(tenant))
}

fn counts(summary: &TenantView) -> [u64; 5] {
    [
        summary.running,
        summary.succeeded,
        summary.failed,
        summary.cancelled,
        summary.total,
    ]
}
