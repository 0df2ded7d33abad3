//! The projector's trigger on AWS, `on_stream_records`, fed a DynamoDB stream batch from a JSON
//! fixture in the shape AWS delivers (two deployments' events and an item that is not an event),
//! on a read-model store held in memory.

use async_trait::async_trait;
use aws_lambda_events::event::dynamodb::Event;
use aws_lambda_events::event::streams::DynamoDbEventResponse;
use overture_events::{DeploymentId, Envelope};
use overture_kit::batch::BatchFailed;
use overture_kit::{LogError, ReadStream};
use overture_projector::contract::MemoryViews;
use overture_projector::{on_stream_records, DeploymentViews};

fn batch() -> Event {
    serde_json::from_str(include_str!("fixtures/stream-records.json")).expect("the fixture")
}

fn deployment(n: u8) -> DeploymentId {
    format!("01a20800-0000-7000-8000-00000000000{n}")
        .parse()
        .expect("an id")
}

/// The records a batch's answer gives back; the batch must not have failed as a whole.
fn failed(response: &Result<DynamoDbEventResponse, BatchFailed>) -> Vec<String> {
    response
        .as_ref()
        .expect("answered with partial failures, not failed as a whole")
        .batch_item_failures
        .iter()
        .filter_map(|f| f.item_identifier.clone())
        .collect()
}

/// A registry in which nobody waits for a service, and a queue that takes nothing: the
/// fixture's records register no service.
struct Nobody;

#[async_trait]
impl overture_kit::registry::ReadServiceRegistry for Nobody {
    async fn service_instances(
        &self,
        _: &str,
    ) -> Result<
        Vec<overture_domain::services::RegisteredInstance>,
        overture_kit::registry::RegistryError,
    > {
        Ok(vec![])
    }

    async fn interested_deployments(
        &self,
        _: &str,
        _: &str,
    ) -> Result<Vec<DeploymentId>, overture_kit::registry::RegistryError> {
        Ok(vec![])
    }
}

#[async_trait]
impl overture_kit::queue::SendJobs for Nobody {
    fn max_delay(&self) -> Option<std::time::Duration> {
        None
    }

    async fn send(
        &self,
        jobs: Vec<overture_kit::queue::Job>,
    ) -> Result<(), overture_kit::queue::QueueError> {
        assert!(jobs.is_empty(), "nobody is woken: {jobs:?}");
        Ok(())
    }
}

const NOBODY_WAITS: overture_projector::stream::Wakes<'static> =
    overture_projector::stream::Wakes {
        registry: &Nobody,
        timers: &Nobody,
    };

/// The log: the batch holds every record, so nothing is read from it.
struct NoLog;

#[async_trait]
impl ReadStream for NoLog {
    async fn read_stream(&self, _: DeploymentId, _: u64) -> Result<Vec<Envelope>, LogError> {
        Ok(Vec::new())
    }
}

#[tokio::test]
async fn a_batch_folds_into_each_deployments_view_and_the_tenants_summary() {
    let views = MemoryViews::default();
    let response = on_stream_records(&batch(), &NoLog, &views, &NOBODY_WAITS).await;
    assert!(failed(&response).is_empty(), "{response:?}");

    let first = views
        .view(deployment(1))
        .await
        .expect("loads")
        .expect("a view");
    assert_eq!(first.revision, 1, "both of its records folded");
    assert!(first.steps.contains_key("a"), "{first:?}");
    let second = views
        .view(deployment(2))
        .await
        .expect("loads")
        .expect("a view");
    assert_eq!(second.revision, 0);
    let tenant = views
        .tenant("acme")
        .await
        .expect("loads")
        .expect("a summary");
    assert_eq!(tenant.total, 2);
}

#[tokio::test]
async fn a_batch_delivered_again_changes_nothing() {
    let views = MemoryViews::default();
    let first = on_stream_records(&batch(), &NoLog, &views, &NOBODY_WAITS).await;
    assert!(failed(&first).is_empty(), "{first:?}");
    let before = (
        views.view(deployment(1)).await.expect("loads"),
        views.view(deployment(2)).await.expect("loads"),
        views.tenant("acme").await.expect("loads"),
    );
    let response = on_stream_records(&batch(), &NoLog, &views, &NOBODY_WAITS).await;
    assert!(failed(&response).is_empty(), "{response:?}");
    let after = (
        views.view(deployment(1)).await.expect("loads"),
        views.view(deployment(2)).await.expect("loads"),
        views.tenant("acme").await.expect("loads"),
    );
    assert_eq!(before, after, "the tenant's counters are not counted twice");
}

#[tokio::test]
async fn a_deployment_whose_view_cannot_be_saved_is_delivered_again_from_its_first_record() {
    let views = MemoryViews::throttled_for(deployment(1));
    let response = on_stream_records(&batch(), &NoLog, &views, &NOBODY_WAITS).await;
    assert_eq!(
        failed(&response),
        ["222200000000000000000001"],
        "its first record, not its last; the other deployment and the foreign item are not retried"
    );
    assert!(views.view(deployment(2)).await.expect("loads").is_some());
}

#[tokio::test]
async fn a_batch_none_of_whose_deployments_can_be_folded_fails_its_invocation_as_retryable() {
    let mut one = batch();
    one.records
        .retain(|r| r.change.sequence_number.as_deref() != Some("222200000000000000000002"));
    let views = MemoryViews::throttled_for(deployment(1));
    let outcome = on_stream_records(&one, &NoLog, &views, &NOBODY_WAITS).await;
    let failed = outcome.expect_err("no deployment of the batch was folded");
    assert_eq!(failed.error_type(), "Retryable", "{failed}");
}

/// The log: the events of the fixture's records, as the log itself reads them.
struct FixtureLog;

#[async_trait]
impl ReadStream for FixtureLog {
    async fn read_stream(
        &self,
        deployment: DeploymentId,
        from: u64,
    ) -> Result<Vec<Envelope>, LogError> {
        Ok(batch()
            .records
            .iter()
            .filter_map(overture_kit::stream_record::envelope_of)
            .filter(|e| e.stream == deployment.stream() && e.revision >= from)
            .collect())
    }
}

#[tokio::test]
async fn a_record_the_trigger_cannot_read_is_folded_from_the_log() {
    let mut garbled = batch();
    // The first deployment's second record, its data cut short.
    garbled.records[2].change.new_image.insert(
        "data".into(),
        serde_dynamo::AttributeValue::S("{\"step\":".into()),
    );
    let views = MemoryViews::default();
    let response = on_stream_records(&garbled, &FixtureLog, &views, &NOBODY_WAITS).await;
    assert!(failed(&response).is_empty(), "{response:?}");
    let first = views
        .view(deployment(1))
        .await
        .expect("loads")
        .expect("a view");
    assert_eq!(first.revision, 1, "not skipped");
}
