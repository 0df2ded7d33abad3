//! The contract every read-model store keeps ([`DeploymentViews`]), as tests that each adapter's
//! suite runs against a real store with [`read_model_contract_tests!`](crate::read_model_contract_tests).
//!
//! Each test drives [`project_stream`] as DynamoDB Streams would: records delivered again, out
//! of order, or by two projectors at once. It takes two clients of one store (as two Lambdas
//! would hold) and works on deployments and a tenant of its own, so the tests share a store
//! without a reset. The log is a [`Records`] the test controls, so it can hold a record back.
//! The store's service registry ([`ReadServiceRegistry`]), written by the same saves, is read
//! back through the engine's port.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use chrono::TimeDelta;
use overture_domain::blueprint;
use overture_domain::deployment::StepStatus;
use overture_domain::projection::{
    DeploymentStatus, DeploymentView, ReadModels, TenantDelta, TenantView,
};
use overture_domain::registry::Registry;
use overture_events::{DeploymentEvent, DeploymentId, Envelope, Metadata, Timestamp};
use overture_kit::registry::ReadServiceRegistry;
use overture_kit::{LogError, ReadStream};
use tokio::sync::Barrier;
use uuid::Uuid;

use crate::{project_stream, DeploymentViews, StreamProjectionError, ViewError};

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

/// A record delivered again, alone or with the whole stream, by the same projector or
/// another, changes neither the view nor the tenant's summary.
pub async fn a_replayed_record_changes_nothing<S: Store>(a: &S, b: &S) {
    let tenant = new_tenant();
    let records = deployment(&tenant, 0, Some(DeploymentStatus::Succeeded));
    let last = records.all.len() - 1;
    assert_eq!(
        deliver(a, &records, 0..=last).await.expect("projects"),
        last + 1
    );
    let stored = view(a, &records).await;
    assert_eq!(stored.as_ref(), Some(&records.expected_view()));
    let summed = summary(b, &tenant).await;
    assert_eq!(counts(&summed), [0, 1, 0, 0, 1]);
    assert_eq!(summed.last_deployment_at, Some(at(0)));

    for (client, revisions) in [(a, vec![0]), (b, vec![last]), (b, (0..=last).collect())] {
        let applied = deliver(client, &records, revisions.clone())
            .await
            .expect("a replay is not an error");
        assert_eq!(applied, 0, "replaying {revisions:?}");
        assert_eq!(view(b, &records).await, stored, "replaying {revisions:?}");
        assert_eq!(summary(a, &tenant).await, summed, "replaying {revisions:?}");
    }
}

/// A record delivered before one the log does not hold yet changes nothing (a retryable
/// error says so); once the log holds it, delivering again folds both, and the late
/// predecessor itself then changes nothing.
pub async fn a_record_before_its_predecessor_changes_nothing_until_the_gap_is_filled<S: Store>(
    a: &S,
    b: &S,
) {
    let tenant = new_tenant();
    let records = deployment(&tenant, 0, Some(DeploymentStatus::Failed));
    let last = records.all.len() - 1;
    deliver(a, &records, [0, 1]).await.expect("projects");
    let before = view(a, &records).await;
    let summed = summary(a, &tenant).await;
    assert_eq!(before.as_ref().map(|v| v.revision), Some(1));

    // The ending arrives while the log shows only up to revision 2: 3 is missing.
    records.show(3);
    let held = deliver(b, &records, [last]).await;
    assert!(
        matches!(&held, Err(error @ StreamProjectionError::Gap { missing: 3, .. }) if error.is_retryable()),
        "{held:?}"
    );
    assert_eq!(view(a, &records).await, before, "nothing was saved");
    assert_eq!(summary(b, &tenant).await, summed);

    // Delivered again once the log holds 3: 2 and 3 come from the log, nothing is skipped.
    records.show(last + 1);
    assert_eq!(
        deliver(b, &records, [last]).await.expect("projects"),
        last - 1
    );
    assert_eq!(view(a, &records).await, Some(records.expected_view()));
    let ended = summary(a, &tenant).await;
    assert_eq!(counts(&ended), [0, 0, 1, 0, 1]);

    assert_eq!(deliver(a, &records, [2, 3]).await.expect("projects"), 0);
    assert_eq!(view(b, &records).await, Some(records.expected_view()));
    assert_eq!(summary(b, &tenant).await, ended);
}

/// A client whose first load waits at a barrier until the other projector has loaded too, so
/// both fold from the same view and race to save it; it counts the races it loses.
#[derive(Clone)]
struct Racing<S> {
    inner: S,
    barrier: Arc<Barrier>,
    waited: Arc<AtomicBool>,
    lost: Arc<AtomicUsize>,
}

impl<S> Racing<S> {
    fn pair(a: &S, b: &S) -> (Self, Self, Arc<AtomicUsize>)
    where
        S: Clone,
    {
        let barrier = Arc::new(Barrier::new(2));
        let lost = Arc::new(AtomicUsize::new(0));
        let racer = |inner: &S| Racing {
            inner: inner.clone(),
            barrier: barrier.clone(),
            waited: Arc::default(),
            lost: lost.clone(),
        };
        (racer(a), racer(b), lost)
    }
}

#[async_trait]
impl<S: Store> DeploymentViews for Racing<S> {
    async fn view(&self, deployment: DeploymentId) -> Result<Option<DeploymentView>, ViewError> {
        self.inner.view(deployment).await
    }

    async fn view_of_steps(
        &self,
        deployment: DeploymentId,
        steps: &BTreeSet<String>,
    ) -> Result<Option<DeploymentView>, ViewError> {
        let loaded = self.inner.view_of_steps(deployment, steps).await;
        if !self.waited.swap(true, Ordering::SeqCst) {
            self.barrier.wait().await;
        }
        loaded
    }

    async fn save(
        &self,
        view: &DeploymentView,
        loaded_at: Option<u64>,
        delta: &TenantDelta,
        steps: &BTreeSet<String>,
        registry: &Registry,
    ) -> Result<(), ViewError> {
        let saved = self
            .inner
            .save(view, loaded_at, delta, steps, registry)
            .await;
        if matches!(saved, Err(ViewError::Conflict { .. })) {
            self.lost.fetch_add(1, Ordering::SeqCst);
        }
        saved
    }

    async fn tenant(&self, tenant: &str) -> Result<Option<TenantView>, ViewError> {
        self.inner.tenant(tenant).await
    }
}

/// Two projectors given the same records at once, both folding from the same view (first from
/// none, then from one at a revision): one saves, the other loses, reloads and finds nothing
/// left to do. The view is the stream's and the tenant counts the deployment once.
pub async fn racing_projectors_end_with_the_right_view_and_count_the_tenant_once<S: Store>(
    a: &S,
    b: &S,
) {
    let tenant = new_tenant();
    let records = deployment(&tenant, 0, Some(DeploymentStatus::Succeeded));
    let last = records.all.len() - 1;
    for (round, revisions) in [(0..=1).collect::<Vec<_>>(), (2..=last).collect()]
        .into_iter()
        .enumerate()
    {
        let (first, second, lost) = Racing::pair(a, b);
        let batch = records.at(revisions.clone());
        let (one, two) = tokio::join!(
            project_stream(records.deployment, &batch, &records, &first),
            project_stream(records.deployment, &batch, &records, &second),
        );
        let applied = [
            one.expect("the first projector"),
            two.expect("the second projector"),
        ];
        assert_eq!(
            lost.load(Ordering::SeqCst),
            1,
            "round {round}: exactly one projector lost the race"
        );
        assert_eq!(
            applied.iter().sum::<usize>(),
            revisions.len(),
            "round {round}: the records were saved once: {applied:?}"
        );
        assert_eq!(
            view(a, &records).await.map(|v| v.revision),
            revisions.last().map(|&r| r as u64)
        );
    }
    assert_eq!(view(b, &records).await, Some(records.expected_view()));
    assert_eq!(counts(&summary(a, &tenant).await), [0, 1, 0, 0, 1]);
}

/// Many deployments of one tenant projected at once by two clients, each stream in two
/// deliveries, and the oldest deployment last: every counter is exact and the newest request
/// time is kept.
pub async fn tenant_counters_over_many_deployments_are_exact<S: Store>(a: &S, b: &S) {
    let tenant = new_tenant();
    let endings = [
        None,
        Some(DeploymentStatus::Succeeded),
        Some(DeploymentStatus::Failed),
        Some(DeploymentStatus::Cancelled),
    ];
    let all: Vec<Records> = (0..16)
        .map(|i| deployment(&tenant, i64::from(i) * 100, endings[i as usize % 4]))
        .collect();
    let (oldest, rest) = all.split_first().expect("deployments");
    let mut projectors = tokio::task::JoinSet::new();
    for (i, records) in rest.iter().enumerate() {
        let client = if i % 2 == 0 { a.clone() } else { b.clone() };
        let records = records.clone();
        projectors.spawn(async move {
            let last = records.all.len() - 1;
            deliver(&client, &records, 0..=2).await?;
            deliver(&client, &records, 3..=last).await
        });
    }
    while let Some(done) = projectors.join_next().await {
        done.expect("the projector ran").expect("projects");
    }
    deliver(a, oldest, 0..oldest.all.len())
        .await
        .expect("projects");

    let summed = summary(b, &tenant).await;
    assert_eq!(counts(&summed), [4, 4, 4, 4, 16]);
    assert_eq!(summed.last_deployment_at, Some(at(1500)));
    for records in &all {
        assert_eq!(view(a, records).await, Some(records.expected_view()));
    }
}

/// A save names the steps it changed: it writes the header and those steps, and every other
/// step stays as stored, in its place, whether the view given holds it (changed or not) or
/// not at all. Loading some steps gives the header with only those.
pub async fn saving_one_step_leaves_the_other_steps_as_they_were<S: Store>(a: &S, b: &S) {
    let tenant = new_tenant();
    let records = deployment(&tenant, 0, None);
    deliver(a, &records, 0..=1).await.expect("projects");
    let before = view(b, &records).await.expect("a view");
    let names = |view: &DeploymentView| view.steps.keys().cloned().collect::<Vec<_>>();
    assert_eq!(names(&before), ["a", "b"]);
    let only = |name: &str| BTreeSet::from([name.to_owned()]);

    // Step `a` starts; the view given also holds `b` changed, which is not named.
    let mut changed = before.clone();
    changed.revision = 2;
    let started = changed.steps.get_mut("a").expect("step a");
    started.status = StepStatus::Running;
    started.attempts = 1;
    changed.steps.get_mut("b").expect("step b").status = StepStatus::Failed;
    a.save(
        &changed,
        Some(1),
        &TenantDelta::default(),
        &only("a"),
        &Registry::default(),
    )
    .await
    .expect("saved");
    let stored = view(b, &records).await.expect("a view");
    assert_eq!(stored.revision, 2);
    assert_eq!(names(&stored), ["a", "b"]);
    assert_eq!(stored.steps["a"], changed.steps["a"]);
    assert_eq!(
        stored.steps["b"], before.steps["b"],
        "step b stays as it was"
    );

    // Loading step `b` alone gives the header and `b`; saving it leaves `a` as it was.
    let mut partial = b
        .view_of_steps(records.deployment, &only("b"))
        .await
        .expect("load")
        .expect("a view");
    assert_eq!(names(&partial), ["b"]);
    assert_eq!(partial.revision, 2);
    partial.revision = 3;
    partial.steps.get_mut("b").expect("step b").status = StepStatus::Scheduled;
    b.save(
        &partial,
        Some(2),
        &TenantDelta::default(),
        &only("b"),
        &Registry::default(),
    )
    .await
    .expect("saved");
    let stored = view(a, &records).await.expect("a view");
    assert_eq!(stored.revision, 3);
    assert_eq!(names(&stored), ["a", "b"]);
    assert_eq!(
        stored.steps["a"], changed.steps["a"],
        "step a stays as it was"
    );
    assert_eq!(stored.steps["b"].status, StepStatus::Scheduled);
    assert_eq!(summary(a, &tenant).await.total, 1);
}

/// A blueprint whose step `b` requires `app`.
const REQUIRES_APP: &str =
    "name: contract\nsteps:\n  a: { run: noop }\n  b: { run: noop, requires: [{ service: app }] }\n";

/// A blueprint whose step `b` watches `app` and requires `db`.
const WATCHES_APP: &str = "name: contract\nsteps:\n  a: { run: noop }\n  b: { run: noop, watch: [app], requires: [{ service: db }] }\n";

/// The deployment's records and then these events, each recorded a second after the last.
fn then(records: &Records, events: Vec<DeploymentEvent>) -> Records {
    let mut all = records.all.as_ref().clone();
    for event in events {
        let mut envelope = all[all.len() - 1].clone();
        envelope.revision += 1;
        envelope.id = Uuid::now_v7();
        envelope.event_type = event.event_type().into();
        envelope.data = event.data();
        envelope.metadata.recorded_at += TimeDelta::seconds(1);
        all.push(envelope);
    }
    Records::new(records.deployment, all)
}

fn registered(service: &str, address: &str, port: u16) -> DeploymentEvent {
    DeploymentEvent::ServiceRegistered {
        service: service.into(),
        step: "a".into(),
        host: format!("{service}-{address}"),
        address: address.into(),
        port,
    }
}

fn deregistered(service: &str, address: &str, port: u16) -> DeploymentEvent {
    DeploymentEvent::ServiceDeregistered {
        service: service.into(),
        step: "a".into(),
        host: format!("{service}-{address}"),
        address: address.into(),
        port,
        reason: "destroying the deployment".into(),
    }
}

/// The tenant's instances as (service, address, port, deployment, host, step, registered at).
type Listed = (String, String, u16, DeploymentId, String, String, Timestamp);

async fn instances<S: Store>(store: &S, tenant: &str) -> Vec<Listed> {
    store
        .service_instances(tenant)
        .await
        .expect("read the registry")
        .into_iter()
        .map(|r| {
            (
                r.instance.service,
                r.instance.address,
                r.instance.port,
                r.deployment,
                r.instance.host,
                r.instance.step,
                r.registered_at,
            )
        })
        .collect()
}

fn listed(service: &str, address: &str, port: u16, records: &Records, revision: usize) -> Listed {
    (
        service.into(),
        address.into(),
        port,
        records.deployment,
        format!("{service}-{address}"),
        "a".into(),
        records.all[revision].metadata.recorded_at,
    )
}

/// Registrations put instances in their tenant's registry, listed by service, then address,
/// then port, with the deployment, host, step and the time each was recorded; two deployments
/// registering the same address and port are two instances; a deregistration removes only
/// the instance of its deployment, service, address and port; other tenants see none of it.
pub async fn the_registry_holds_each_registered_instance_until_it_is_deregistered<S: Store>(
    a: &S,
    b: &S,
) {
    let tenant = new_tenant();
    let first = deployment_of(
        &tenant,
        REQUIRES_APP,
        0,
        None,
        vec![
            registered("web", "10.0.0.9", 80),
            registered("app", "10.0.0.9", 8000),
            registered("app", "10.0.0.10", 8000),
            registered("app", "10.0.0.9", 7000),
        ],
    );
    let second = deployment_of(
        &tenant,
        REQUIRES_APP,
        100,
        None,
        vec![registered("app", "10.0.0.9", 8000)],
    );
    let last = first.all.len() - 1;
    deliver(a, &first, 0..=last).await.expect("projects");
    deliver(b, &second, 0..second.all.len())
        .await
        .expect("projects");
    assert!(
        instances(a, &new_tenant()).await.is_empty(),
        "another tenant's registry is empty"
    );

    let mut expected = vec![
        listed("app", "10.0.0.10", 8000, &first, 6),
        listed("app", "10.0.0.9", 7000, &first, 7),
        listed("app", "10.0.0.9", 8000, &first, 5),
        listed("app", "10.0.0.9", 8000, &second, 4),
        listed("web", "10.0.0.9", 80, &first, 4),
    ];
    // The same address and port of two deployments: in the order of the deployments' ids.
    expected[2..4].sort_by_key(|row| row.3);
    assert_eq!(instances(b, &tenant).await, expected);

    // The first deployment's 10.0.0.9:8000 leaves; the second's stays, as do the others.
    let first = then(&first, vec![deregistered("app", "10.0.0.9", 8000)]);
    deliver(a, &first, [last + 1]).await.expect("projects");
    expected.retain(|row| !(row.1 == "10.0.0.9" && row.2 == 8000 && row.3 == first.deployment));
    assert_eq!(instances(a, &tenant).await, expected);
}

/// A stream's registrations delivered again, alone or with the stream, by the same projector
/// or another, change nothing; a deregistration is not undone by its registration delivered
/// again; registrations after a gap are written once the gap is filled, and not before.
pub async fn registrations_delivered_again_or_after_a_gap_are_written_once<S: Store>(a: &S, b: &S) {
    let tenant = new_tenant();
    let records = deployment_of(
        &tenant,
        WATCHES_APP,
        0,
        Some(DeploymentStatus::Succeeded),
        vec![
            registered("app", "10.0.0.1", 8000),
            registered("app", "10.0.0.2", 8000),
            deregistered("app", "10.0.0.1", 8000),
            registered("app", "10.0.0.3", 8000),
        ],
    );
    let last = records.all.len() - 1;
    // Up to the first registration; then the rest arrives while revision 5 is missing.
    deliver(a, &records, 0..=4).await.expect("projects");
    assert_eq!(
        instances(b, &tenant).await,
        [listed("app", "10.0.0.1", 8000, &records, 4)]
    );
    records.show(5);
    let held = deliver(b, &records, 6..=last).await;
    assert!(
        matches!(&held, Err(StreamProjectionError::Gap { missing: 5, .. })),
        "{held:?}"
    );
    assert_eq!(
        instances(a, &tenant).await,
        [listed("app", "10.0.0.1", 8000, &records, 4)],
        "nothing after the gap was written"
    );
    records.show(last + 1);
    deliver(b, &records, 6..=last).await.expect("projects");
    let expected = vec![
        listed("app", "10.0.0.2", 8000, &records, 5),
        listed("app", "10.0.0.3", 8000, &records, 7),
    ];
    assert_eq!(instances(a, &tenant).await, expected);

    for (client, revisions) in [(a, vec![4]), (b, vec![4, 5]), (a, (0..=last).collect())] {
        let applied = deliver(client, &records, revisions.clone())
            .await
            .expect("a replay is not an error");
        assert_eq!(applied, 0, "replaying {revisions:?}");
        assert_eq!(
            instances(b, &tenant).await,
            expected,
            "replaying {revisions:?}"
        );
    }
    assert_eq!(
        a.interested_deployments(&tenant, "app")
            .await
            .expect("read the registry"),
        [records.deployment]
    );
}

/// Interest rows come from the blueprints' `requires` and `watch`; of the deployments with one
/// for a service, those still running are interested, and those that succeeded only if a step
/// watches it and they are not being torn down. Those that failed or were cancelled are not.
pub async fn interested_deployments_are_those_that_still_care_about_the_service<S: Store>(
    a: &S,
    b: &S,
) {
    let tenant = new_tenant();
    let destroying = vec![DeploymentEvent::DestroyRequested {
        steps: vec!["a".into()],
    }];
    let destroyed = vec![
        DeploymentEvent::DestroyRequested {
            steps: vec!["a".into()],
        },
        DeploymentEvent::DeploymentDestroyed {},
    ];
    let running = deployment_of(&tenant, REQUIRES_APP, 0, None, Vec::new());
    let running_watching = deployment_of(&tenant, WATCHES_APP, 10, None, Vec::new());
    let failed = deployment_of(
        &tenant,
        WATCHES_APP,
        20,
        Some(DeploymentStatus::Failed),
        Vec::new(),
    );
    let cancelled = deployment_of(
        &tenant,
        REQUIRES_APP,
        30,
        Some(DeploymentStatus::Cancelled),
        Vec::new(),
    );
    let succeeded_requiring = deployment_of(
        &tenant,
        REQUIRES_APP,
        40,
        Some(DeploymentStatus::Succeeded),
        Vec::new(),
    );
    let succeeded_watching = deployment_of(
        &tenant,
        WATCHES_APP,
        50,
        Some(DeploymentStatus::Succeeded),
        Vec::new(),
    );
    let uninterested = deployment(&tenant, 60, None);
    // The tear-downs come after the deployments ended.
    let ended = |requested| {
        deployment_of(
            &tenant,
            WATCHES_APP,
            requested,
            Some(DeploymentStatus::Succeeded),
            Vec::new(),
        )
    };
    let being_destroyed = then(&ended(70), destroying);
    let gone = then(&ended(80), destroyed);
    let every = [
        &running,
        &running_watching,
        &failed,
        &cancelled,
        &succeeded_requiring,
        &succeeded_watching,
        &uninterested,
        &being_destroyed,
        &gone,
    ];
    for (i, records) in every.iter().enumerate() {
        let client = if i % 2 == 0 { a } else { b };
        deliver(client, records, 0..records.all.len())
            .await
            .expect("projects");
    }
    let mut app = vec![
        running.deployment,
        running_watching.deployment,
        succeeded_watching.deployment,
    ];
    app.sort();
    assert_eq!(
        a.interested_deployments(&tenant, "app")
            .await
            .expect("read the registry"),
        app
    );
    // `db` is required by the watching blueprint only: the running one of those.
    assert_eq!(
        b.interested_deployments(&tenant, "db")
            .await
            .expect("read the registry"),
        [running_watching.deployment]
    );
    assert!(b
        .interested_deployments(&tenant, "cache")
        .await
        .expect("read the registry")
        .is_empty());
    assert!(a
        .interested_deployments(&new_tenant(), "app")
        .await
        .expect("read the registry")
        .is_empty());

    // The running deployment that required `app` fails: it no longer cares.
    let failure = DeploymentEvent::DeploymentFailed {
        reason: "step `b` failed".into(),
    };
    let running = then(&running, vec![failure]);
    deliver(a, &running, [running.all.len() - 1])
        .await
        .expect("projects");
    app.retain(|id| *id != running.deployment);
    assert_eq!(
        b.interested_deployments(&tenant, "app")
            .await
            .expect("read the registry"),
        app
    );
}
