//! The deployment-log contract ([`overture_kit::contract`]) on the SQLite log: two clients are
//! two handles on one database file, as two processes would hold.

use std::sync::Arc;

use overture_infra::sqlite::{Database, EventLog, SqliteDeployments};
use overture_kit::SystemClock;

async fn client(path: &std::path::Path) -> SqliteDeployments {
    let db = Database::open(path).await.expect("database opens");
    SqliteDeployments::new(EventLog::new(db), Arc::new(SystemClock))
}

async fn clients() -> (SqliteDeployments, SqliteDeployments) {
    // Kept for the whole test run: every test has deployments of its own in it.
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    let dir = DIR.get_or_init(|| tempfile::tempdir().expect("temp dir"));
    let path = dir.path().join("overture.db");
    (client(&path).await, client(&path).await)
}

overture_kit::log_contract_tests!(clients());

#[tokio::test]
async fn tasks_of_one_process_take_turns_on_a_deployment_and_only_on_it() {
    use futures_util::FutureExt;
    use overture_events::DeploymentId;
    use overture_kit::DeploymentLog;

    let (log, other_process) = clients().await;
    let (deployment, another) = (
        DeploymentId::from_uuid(uuid::Uuid::now_v7()),
        DeploymentId::from_uuid(uuid::Uuid::now_v7()),
    );
    let turn = log
        .turn(deployment)
        .await
        .expect("the SQLite log takes turns");

    let mut next = Box::pin(log.turn(deployment));
    assert!(next.as_mut().now_or_never().is_none(), "the next waits");
    assert!(
        log.turn(another).now_or_never().is_some(),
        "another deployment's turn is free"
    );
    assert!(
        other_process.turn(deployment).now_or_never().is_some(),
        "another process is kept apart by the revision check, not by turns"
    );
    drop(turn);
    assert!(
        next.now_or_never().is_some(),
        "the next goes once the turn is over"
    );
}
