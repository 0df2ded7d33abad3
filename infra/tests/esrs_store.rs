//! The SQLite log behind esrs's own `AggregateManager`: the same aggregate code, the same log.

use std::collections::BTreeMap;
use std::sync::Arc;

use esrs::manager::AggregateManager;
use esrs::AggregateState;
use overture_domain::blueprint::parse;
use overture_domain::{DeploymentCommand, DeploymentError};
use overture_events::DeploymentId;
use overture_infra::clock::SystemClock;
use overture_infra::sqlite::{
    Database, EsrsDeploymentStore, EsrsStoreError, EventLog, SqliteDeployments,
};
use overture_kit::{Cause, LogError};
use uuid::Uuid;

fn request() -> DeploymentCommand {
    DeploymentCommand::Request {
        tenant: "acme".into(),
        requested_by: "ada".into(),
        trigger: "test".into(),
        source: "inline".into(),
        blueprint: parse("name: x\nsteps:\n  a: { run: noop }\n")
            .expect("valid")
            .snapshot,
        blueprint_hash: "h".into(),
        params: BTreeMap::new(),
        cloud: None,
        sealed: None,
    }
}

#[tokio::test]
async fn esrs_commands_are_recorded_in_the_log_and_conflicts_are_typed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = EventLog::new(Database::open(dir.path().join("o.db")).await.expect("open"));
    let deployments = SqliteDeployments::new(log.clone(), Arc::new(SystemClock));
    let id = Uuid::now_v7();
    let store = EsrsDeploymentStore::new(
        deployments,
        "acme",
        Cause::new("esrs-test", DeploymentId::from_uuid(id), id),
    );
    let manager = AggregateManager::new(store);

    let state = manager
        .handle_command(AggregateState::with_id(id), request())
        .await
        .expect("recorded")
        .expect("accepted");
    assert_eq!(state.tenant, "acme");
    let envelopes = log
        .read_stream(&DeploymentId::from_uuid(id).stream(), 0)
        .await
        .expect("read");
    assert_eq!(envelopes.len(), 1);
    assert_eq!(envelopes[0].event_type, "DeploymentRequested");
    assert_eq!(envelopes[0].metadata.actor, "esrs-test");

    let loaded = manager.load(id).await.expect("loads").expect("exists");
    assert_eq!(*loaded.sequence_number(), 1);
    // The aggregate refuses a second request: a domain error, not a store error.
    let refused = manager
        .handle_command(loaded, request())
        .await
        .expect("no store error");
    assert_eq!(refused.err(), Some(DeploymentError::AlreadyRequested));

    // A writer holding a stale state loses the race with a typed conflict.
    let stale = manager.load(id).await.expect("loads").expect("exists");
    let fresh = manager.load(id).await.expect("loads").expect("exists");
    manager
        .handle_command(
            fresh,
            DeploymentCommand::Advance {
                now: chrono::Utc::now(),
            },
        )
        .await
        .expect("recorded")
        .expect("accepted");
    let lost = manager
        .handle_command(
            stale,
            DeploymentCommand::Advance {
                now: chrono::Utc::now(),
            },
        )
        .await;
    assert!(
        matches!(lost, Err(EsrsStoreError::Log(LogError::Conflict { .. }))),
        "{lost:?}"
    );

    assert!(
        matches!(manager.delete(id).await, Err(EsrsStoreError::AppendOnly(_))),
        "nothing is ever deleted"
    );
}
