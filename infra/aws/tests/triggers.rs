//! The triggers function's adapters against the local AWS emulator: the DynamoDB ledger keeps
//! the contract the SQLite ledger keeps; the published bundle reads back; an event sent for a
//! tenant arrives with the tenant attribute the function reads.

mod support;

use std::collections::BTreeMap;

use overture_aws::sqs::create_queue;
use overture_aws::triggers::{
    create_triggers_table, DynamoTriggerLedger, S3TriggerBundle, SqsEvents,
};
use overture_triggers::bundle::{LoadBundle, TriggerBundle};
use overture_triggers::queue::TENANT_ATTRIBUTE;
use overture_triggers::BlueprintSource;

async fn config() -> aws_config::SdkConfig {
    overture_aws::config::for_endpoint(support::emulator(), "eu-west-1").await
}

#[tokio::test]
async fn the_dynamodb_ledger_keeps_the_contract() {
    let client = aws_sdk_dynamodb::Client::new(&config().await);
    // A table of its own per run: the contract starts from an empty ledger.
    let table = format!("triggers-{}", uuid::Uuid::new_v4());
    create_triggers_table(&client, &table)
        .await
        .expect("the table");
    let ledger = DynamoTriggerLedger::new(client, table);
    overture_triggers::contract::ledger_keeps_its_contract(&ledger).await;
}

#[tokio::test]
async fn a_published_bundle_reads_back_and_none_reads_as_nothing_published() {
    let config = config().await;
    let client = overture_aws::s3::client(&config);
    let bucket = format!("bundle-{}", uuid::Uuid::new_v4());
    overture_aws::s3::create_payloads_bucket(&client, &bucket)
        .await
        .expect("the bucket");
    let store = S3TriggerBundle::new(client, bucket);
    assert_eq!(store.load().await.expect("loaded"), None);

    let bundle = TriggerBundle {
        triggers: "triggers:\n  - name: t\n    on: { source: s, type: t }\n    deploy: a.yaml\n    tenant: acme\n".into(),
        blueprints: BTreeMap::from([(
            "a.yaml".into(),
            BlueprintSource {
                source: "examples/a.yaml".into(),
                text: "name: a\nsteps:\n  x: { run: noop }\n".into(),
                files: BTreeMap::from([("files/run.sh".into(), "echo hi\n".into())]),
            },
        )]),
    };
    store.publish(&bundle).await.expect("published");
    assert_eq!(store.load().await.expect("loaded"), Some(bundle));
}

#[tokio::test]
async fn an_event_sent_for_a_tenant_carries_the_tenant_attribute() {
    let config = config().await;
    let client = aws_sdk_sqs::Client::new(&config);
    let url = create_queue(&client, &format!("events-{}", uuid::Uuid::new_v4()))
        .await
        .expect("the queue");
    let events = SqsEvents::new(client.clone(), url.clone());
    events
        .send(
            r#"{"specversion":"1.0","id":"1","source":"s","type":"t"}"#,
            Some("acme"),
        )
        .await
        .expect("sent");
    let received = client
        .receive_message()
        .queue_url(&url)
        .message_attribute_names("All")
        .wait_time_seconds(1)
        .send()
        .await
        .expect("received");
    let message = &received.messages()[0];
    assert!(message.body().unwrap_or("").contains("\"id\":\"1\""));
    let tenant = message
        .message_attributes()
        .and_then(|attributes| attributes.get(TENANT_ATTRIBUTE))
        .and_then(|attribute| attribute.string_value());
    assert_eq!(tenant, Some("acme"));
}
