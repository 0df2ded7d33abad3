//! Deliveries: a record delivered again, before its predecessor, or to two projectors at once
//! changes the view and the tenant's summary once.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use overture_domain::projection::{DeploymentStatus, DeploymentView, TenantDelta, TenantView};
use overture_domain::registry::Registry;
use overture_events::DeploymentId;
use tokio::sync::Barrier;

use super::{at, counts, deliver, deployment, new_tenant, summary, view, Store};
use crate::{project_stream, DeploymentViews, StreamProjectionError, ViewError};

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
