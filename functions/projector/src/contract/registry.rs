//! The service registry written by the same saves as the views: instances until they are
//! deregistered, written once however delivered, and who is interested in a service.

use chrono::TimeDelta;
use overture_domain::projection::DeploymentStatus;
use overture_events::{DeploymentEvent, DeploymentId, Timestamp};
use uuid::Uuid;

use super::{deliver, deployment, deployment_of, new_tenant, Records, Store};
use crate::StreamProjectionError;

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
