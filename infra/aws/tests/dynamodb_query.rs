//! The query port on DynamoDB ([`DynamoQueries`]) in the local AWS emulator: the contract every
//! query adapter answers (`overture_kit::query_contract`), read by a client other than the one
//! that wrote; attempts' output is not on this backend yet, and says so.

mod support;

use std::sync::Arc;

use overture_aws::dynamodb::{create_events_table, DynamoDeployments};
use overture_aws::query::DynamoQueries;
use overture_aws::read_models::{create_read_model_tables, DynamoReadModels};
use overture_events::DeploymentId;
use overture_kit::query::{AttemptLog, QueryDeployments, QueryError};
use overture_kit::query_contract::{self, fresh_tenant, Written};
use overture_kit::SystemClock;
use overture_kit::{Cause, DeploymentLog, ReadStream};

const EVENTS: &str = "query-events";
const DEPLOYMENTS: &str = "query-deployments";
const TENANTS: &str = "query-tenants";

async fn tables() -> (DynamoDeployments, DynamoReadModels) {
    let config = overture_aws::config::for_endpoint(support::emulator(), "eu-west-1").await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&config);
    create_events_table(&dynamodb, EVENTS).await.expect("table");
    create_read_model_tables(&dynamodb, DEPLOYMENTS, TENANTS)
        .await
        .expect("tables");
    (
        DynamoDeployments::new(dynamodb.clone(), EVENTS, Arc::new(SystemClock)),
        DynamoReadModels::new(dynamodb, DEPLOYMENTS, TENANTS),
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
    let (log, views) = tables().await;
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
    let (log, views) = tables().await;
    query_contract::check(
        &DynamoQueries::new(views, log),
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
async fn an_attempts_output_is_not_available_on_aws_yet_and_says_so() {
    let (log, views) = tables().await;
    let queries = DynamoQueries::new(views, log);
    let id = DeploymentId::from_uuid(uuid::Uuid::now_v7());
    let error = queries
        .attempt_log(id, "build", AttemptLog::Attempt(1))
        .await
        .expect_err("not on this backend yet");
    assert!(matches!(error, QueryError::NotAvailable(_)), "{error:?}");
    assert!(!error.is_retryable());
    assert!(error
        .to_string()
        .contains("not available on the aws backend"));
}
