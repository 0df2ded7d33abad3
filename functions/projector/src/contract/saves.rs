//! What a save writes: exact tenant counters over many deployments, and only the steps it
//! names.

use std::collections::BTreeSet;

use overture_domain::deployment::StepStatus;
use overture_domain::projection::{DeploymentStatus, DeploymentView, TenantDelta};
use overture_domain::registry::Registry;

use super::{at, counts, deliver, deployment, new_tenant, summary, view, Records, Store};

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
