//! Deployment names on the SQLite log: claimed with the request's own append, so of two
//! requests for one name exactly one is recorded, however they race (on one handle or on two
//! handles to the same file, as two processes); released when the deployment is destroyed.

use std::path::Path;
use std::sync::Arc;

use overture_domain::testing::events::{blueprint, requested};
use overture_events::{DeploymentEvent, DeploymentId};
use overture_infra::sqlite::{Database, EventLog, SqliteDeployments};
use overture_kit::{Cause, DeploymentLog, LogError, SystemClock};
use tokio::sync::Barrier;
use uuid::Uuid;

async fn open(path: &Path) -> SqliteDeployments {
    let log = EventLog::new(Database::open(path).await.expect("database opens"));
    SqliteDeployments::new(log, Arc::new(SystemClock))
}

fn named_request(tenant: &str, name: &str) -> DeploymentEvent {
    let mut event = requested("b.yaml", blueprint("name: b\nsteps:\n  a: { run: noop }\n"));
    if let DeploymentEvent::DeploymentRequested {
        name: slot,
        tenant: owner,
        ..
    } = &mut event
    {
        *slot = Some(name.to_owned());
        *owner = tenant.to_owned();
    }
    event
}

async fn request(
    log: &SqliteDeployments,
    tenant: &str,
    name: &str,
) -> (DeploymentId, Result<(), LogError>) {
    let id = DeploymentId::from_uuid(Uuid::now_v7());
    let cause = Cause::new("ada", id, id.uuid());
    let appended = log
        .append(id, tenant, None, vec![named_request(tenant, name)], &cause)
        .await;
    (id, appended)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn of_requests_racing_for_one_name_exactly_one_is_recorded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("overture.db");
    // Two handles to one file, as two `overture deploy` processes have.
    let logs = [open(&path).await, open(&path).await];
    let racers = 8;
    let barrier = Arc::new(Barrier::new(racers));
    let tasks: Vec<_> = (0..racers)
        .map(|i| {
            let log = logs[i % 2].clone();
            let barrier = Arc::clone(&barrier);
            tokio::spawn(async move {
                barrier.wait().await;
                request(&log, "acme", "prod-web").await
            })
        })
        .collect();
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.push(task.await.expect("task"));
    }
    let winners: Vec<DeploymentId> = outcomes
        .iter()
        .filter(|(_, appended)| appended.is_ok())
        .map(|(id, _)| *id)
        .collect();
    assert_eq!(winners.len(), 1, "{outcomes:?}");
    for (id, appended) in &outcomes {
        if *id == winners[0] {
            continue;
        }
        assert!(
            matches!(appended, Err(LogError::NameTaken { holder, name, tenant })
                if *holder == winners[0] && name == "prod-web" && tenant == "acme"),
            "{appended:?}"
        );
        // Nothing of a refused request is recorded.
        assert_eq!(logs[0].load(*id).await.expect("loads").revision, None);
    }
}

#[tokio::test]
async fn a_name_is_free_again_once_its_deployment_is_destroyed_and_other_tenants_have_their_own() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open(&dir.path().join("overture.db")).await;
    let (first, recorded) = request(&log, "acme", "prod-web").await;
    recorded.expect("the first is recorded");
    // Another tenant's deployment of the same name is no conflict.
    request(&log, "globex", "prod-web")
        .await
        .1
        .expect("another tenant may use the name");
    // Failed, cancelled or finished: a deployment keeps its name until it is destroyed.
    let cause = Cause::new("ada", first, first.uuid());
    log.append(
        first,
        "acme",
        Some(0),
        vec![DeploymentEvent::DeploymentFailed {
            reason: "a step failed".into(),
        }],
        &cause,
    )
    .await
    .expect("failed");
    assert!(matches!(
        request(&log, "acme", "prod-web").await.1,
        Err(LogError::NameTaken { holder, .. }) if holder == first
    ));
    log.append(
        first,
        "acme",
        Some(1),
        vec![
            DeploymentEvent::DestroyRequested { steps: vec![] },
            DeploymentEvent::DeploymentDestroyed {},
        ],
        &cause,
    )
    .await
    .expect("destroyed");
    request(&log, "acme", "prod-web")
        .await
        .1
        .expect("the destroyed deployment's name is free");
    assert!(log
        .log()
        .named("acme", "prod-web")
        .await
        .expect("reads")
        .is_some());
}
