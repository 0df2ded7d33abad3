//! The query port on DynamoDB ([`DynamoQueries`]) in the local AWS emulator: the contract every
//! query adapter answers (`overture_kit::query_contract`), read by a client other than the one
//! that wrote; attempts' output is not on this backend yet, and says so.

mod support;

use std::io::Write;
use std::sync::Arc;

use overture_aws::dynamodb::{create_events_table, DynamoDeployments};
use overture_aws::query::DynamoQueries;
use overture_aws::read_models::{create_read_model_tables, DynamoReadModels};
use overture_events::DeploymentId;

use overture_aws::logs::S3AttemptLogs;
use overture_aws::s3::create_payloads_bucket;
use overture_kit::query::{AttemptLog, QueryDeployments};
use overture_kit::query_contract::{self, fresh_tenant, Written};
use overture_kit::SystemClock;
use overture_kit::{Cause, DeploymentLog, ReadStream};
use overture_runner::logs::{AttemptLogs, LogName};

const EVENTS: &str = "query-events";
const DEPLOYMENTS: &str = "query-deployments";
const TENANTS: &str = "query-tenants";
const PAYLOADS: &str = "query-payloads";

async fn tables() -> (DynamoDeployments, DynamoReadModels, S3AttemptLogs) {
    let config = overture_aws::config::for_endpoint(support::emulator(), "eu-west-1").await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&config);
    let s3 = overture_aws::s3::client(&config);
    create_payloads_bucket(&s3, PAYLOADS).await.expect("bucket");
    create_events_table(&dynamodb, EVENTS).await.expect("table");
    create_read_model_tables(&dynamodb, DEPLOYMENTS, TENANTS)
        .await
        .expect("tables");
    (
        DynamoDeployments::new(dynamodb.clone(), EVENTS, Arc::new(SystemClock)),
        DynamoReadModels::new(dynamodb, DEPLOYMENTS, TENANTS),
        S3AttemptLogs::new(s3, PAYLOADS),
    )
}

async fn write(
    log: &DynamoDeployments,
    views: &DynamoReadModels,
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
async fn dynamodb_answers_the_query_contract() {
    let (log, views, _) = tables().await;
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
    // Another client, as the command line is.
    let (log, views, outputs) = tables().await;
    query_contract::check(
        &DynamoQueries::new(views, log, Some(outputs)),
        &Written {
            ended,
            ended_tenant,
            running,
            running_tenant,
        },
    )
    .await;
}

// The runner's log writer uploads on flush from within the runtime, as the Lambda's does.
#[tokio::test(flavor = "multi_thread")]
async fn an_attempts_output_is_read_back_as_the_runner_kept_it() {
    let (log, views, outputs) = tables().await;
    let id = DeploymentId::from_uuid(uuid::Uuid::now_v7());
    let mut written = outputs
        .create(id, "build", LogName::Attempt(1))
        .expect("a log");
    written.write_all(b"compiling\ndone\n").expect("written");
    written.flush().expect("kept");
    drop(written);

    let queries = DynamoQueries::new(views, log, Some(outputs));
    let read = queries
        .attempt_log(id, "build", AttemptLog::Attempt(1))
        .await
        .expect("read");
    assert_eq!(read.as_deref(), Some(&b"compiling\ndone\n"[..]));
    let none = queries
        .attempt_log(id, "build", AttemptLog::Attempt(2))
        .await
        .expect("read");
    assert_eq!(none, None, "an attempt that never ran has no log");
}
