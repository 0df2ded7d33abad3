//! The DynamoDB event log against the local AWS emulator: the deployment-log contract that the
//! SQLite log keeps too, and what only a DynamoDB table can get wrong (the transaction limit).

mod support;

use std::sync::Arc;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use overture_aws::dynamodb::{create_events_table, DynamoDeployments, MAX_EVENTS_PER_APPEND};
use overture_events::chain::ChainCheck;
use overture_events::{DeploymentEvent, DeploymentId, Timestamp};
use overture_kit::SystemClock;
use overture_kit::{Cause, DeploymentLog, LogError, ReadStream};

const TABLE: &str = "overture-events";

/// A client of the table itself.
async fn table() -> Client {
    let config = overture_aws::config::for_endpoint(support::emulator(), "eu-west-1").await;
    let client = Client::new(&config);
    create_events_table(&client, TABLE)
        .await
        .expect("the events table");
    client
}

/// A client of its own, as a separate process would have.
async fn client() -> DynamoDeployments {
    DynamoDeployments::new(table().await, TABLE, Arc::new(SystemClock))
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

fn scheduled(attempt: u32) -> DeploymentEvent {
    DeploymentEvent::StepScheduled {
        step: "build".into(),
        attempt,
        not_before: Timestamp::UNIX_EPOCH,
    }
}

#[tokio::test]
async fn events_an_older_version_recorded_without_links_are_attested_by_the_next_append() {
    let deployment = DeploymentId::from_uuid(uuid::Uuid::now_v7());
    // Two items as an Overture that did not chain wrote them: metadata without links.
    let metadata = serde_json::json!({
        "tenant": "acme", "actor": "ada", "recorded_at": "2024-05-01T10:00:00Z",
        "$correlationId": deployment.to_string(), "$causationId": deployment.to_string(),
    });
    let table = table().await;
    for (revision, event) in [(0, scheduled(1)), (1, scheduled(2))] {
        table
            .put_item()
            .table_name(TABLE)
            .item("stream", AttributeValue::S(deployment.stream()))
            .item("revision", AttributeValue::N(revision.to_string()))
            .item("id", AttributeValue::S(uuid::Uuid::now_v7().to_string()))
            .item("type", AttributeValue::S(event.event_type().into()))
            .item("data", AttributeValue::S(event.data().to_string()))
            .item("metadata", AttributeValue::S(metadata.to_string()))
            .send()
            .await
            .expect("an old item");
    }

    let log = client().await;
    let cause = Cause::new("tester", deployment, uuid::Uuid::now_v7());
    log.append(deployment, "acme", Some(1), vec![scheduled(3)], &cause)
        .await
        .expect("appended after the old items");

    let stored = log.read_stream(deployment, 0).await.expect("read");
    let mut check = ChainCheck::default();
    for envelope in &stored {
        check.check(envelope).expect("the chain holds");
    }
    assert_eq!(
        (check.sealed, check.unsealed),
        (1, 2),
        "the new event attests both"
    );

    // Had an old item been changed since, the new event would not follow it.
    let mut edited = stored.clone();
    edited[0].metadata.actor = "mallory".into();
    let mut check = ChainCheck::default();
    let broken = edited
        .iter()
        .find_map(|e| check.check(e).err().map(|b| (e.revision, b)));
    assert!(
        matches!(
            broken,
            Some((2, overture_events::chain::Break::DoesNotFollow { .. }))
        ),
        "{broken:?}"
    );
}
