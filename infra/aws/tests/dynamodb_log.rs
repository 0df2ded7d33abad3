//! The DynamoDB event log against the local AWS emulator: the deployment-log contract that the
//! SQLite log keeps too, and what only a DynamoDB table can get wrong (the transaction limit).

mod support;

use std::sync::Arc;

use aws_sdk_dynamodb::Client;
use overture_aws::dynamodb::{create_events_table, DynamoDeployments, MAX_EVENTS_PER_APPEND};
use overture_events::{DeploymentEvent, DeploymentId, Timestamp};
use overture_kit::SystemClock;
use overture_kit::{Cause, DeploymentLog, LogError};

const TABLE: &str = "overture-events";

/// A client of its own, as a separate process would have.
async fn client() -> DynamoDeployments {
    let config = overture_aws::config::for_endpoint(support::emulator(), "eu-west-1").await;
    let client = Client::new(&config);
    create_events_table(&client, TABLE)
        .await
        .expect("the events table");
    DynamoDeployments::new(client, TABLE, Arc::new(SystemClock))
}

async fn clients() -> (DynamoDeployments, DynamoDeployments) {
    (client().await, client().await)
}

overture_kit::log_contract_tests!(clients());

#[tokio::test]
async fn a_command_beyond_one_transaction_is_refused_whole_and_stores_nothing() {
    let log = client().await;
    let deployment = DeploymentId::from_uuid(uuid::Uuid::now_v7());
    let cause = Cause::new("tester", deployment, uuid::Uuid::now_v7());
    let events: Vec<DeploymentEvent> = (1..=u32::try_from(MAX_EVENTS_PER_APPEND + 1)
        .expect("small"))
        .map(|attempt| DeploymentEvent::StepScheduled {
            step: "build".into(),
            attempt,
            not_before: Timestamp::UNIX_EPOCH,
        })
        .collect();
    let refused = log.append(deployment, "acme", None, events, &cause).await;
    assert!(
        matches!(&refused, Err(error @ LogError::TooLarge { .. }) if !error.is_retryable()),
        "{refused:?}"
    );
    assert_eq!(log.load(deployment).await.expect("load").revision, None);
}
