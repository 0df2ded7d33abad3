//! The query port on a data directory ([`EmbeddedQueries`]): the contract every query adapter
//! answers (`overture_kit::query_contract`), and attempts' output read from their files.

use std::io::Write;
use std::sync::Arc;

use overture_events::DeploymentId;
use overture_infra::logs::LogFiles;
use overture_infra::query::EmbeddedQueries;
use overture_infra::sqlite::{Database, EventLog, SqliteDeployments, SqliteReadModels};
use overture_kit::query::{AttemptLog, QueryDeployments};
use overture_kit::query_contract::{self, fresh_tenant, Written};
use overture_kit::SystemClock;
use overture_kit::{Cause, DeploymentLog, ReadStream};
use overture_runner::logs::{AttemptLogs, LogName};

async fn write(
    log: &SqliteDeployments,
    views: &SqliteReadModels,
    tenant: &str,
    events: Vec<overture_events::DeploymentEvent>,
) -> DeploymentId {
    let id = DeploymentId::from_uuid(uuid::Uuid::now_v7());
    log.append(id, tenant, None, events, &Cause::new("ada", id, id.uuid()))
        .await
        .expect("appended");
    let records = log.read_stream(id, 0).await.expect("read");
    overture_projector::project_stream(id, &records, log, views)
        .await
        .expect("projected");
    id
}

#[tokio::test]
async fn the_data_directory_answers_the_query_contract() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = Database::open(dir.path().join("overture.db"))
        .await
        .expect("database");
    let log = SqliteDeployments::new(EventLog::new(db.clone()), Arc::new(SystemClock));
    let views = SqliteReadModels::new(db.clone());
    let (ended_tenant, running_tenant) = (fresh_tenant("acme"), fresh_tenant("globex"));
    let ended = write(
        &log,
        &views,
        &ended_tenant,
        query_contract::ended(&ended_tenant),
    )
    .await;
    let running = write(
        &log,
        &views,
        &running_tenant,
        query_contract::running(&running_tenant),
    )
    .await;
    let logs = LogFiles::new(dir.path().join("logs"));
    let queries = EmbeddedQueries::new(views, log.log().clone(), logs);
    query_contract::check(
        &queries,
        &Written {
            ended,
            ended_tenant,
            running,
            running_tenant,
        },
    )
    .await;
}

#[tokio::test]
async fn an_attempts_output_is_read_from_its_file_and_a_missing_one_is_none() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = Database::open(dir.path().join("overture.db"))
        .await
        .expect("database");
    let logs = LogFiles::new(dir.path().join("logs"));
    let id = DeploymentId::from_uuid(uuid::Uuid::now_v7());
    logs.create(id, "build", LogName::Attempt(2))
        .expect("created")
        .write_all(b"compiling\ndone\n")
        .expect("written");
    let queries = EmbeddedQueries::new(SqliteReadModels::new(db.clone()), EventLog::new(db), logs);
    assert_eq!(
        queries
            .attempt_log(id, "build", AttemptLog::Attempt(2))
            .await
            .expect("read"),
        Some(b"compiling\ndone\n".to_vec())
    );
    for missing in [AttemptLog::Attempt(1), AttemptLog::Destroy] {
        assert_eq!(
            queries
                .attempt_log(id, "build", missing)
                .await
                .expect("read"),
            None
        );
    }
}
