//! The orchestrator's trigger on AWS, `on_stream_records`, fed a DynamoDB stream batch from a
//! JSON fixture in the shape AWS delivers, on in-memory fakes of its ports.

mod support;

use async_trait::async_trait;
use overture_domain::testing::events::{blueprint, requested};
use overture_events::{DeploymentEvent, DeploymentId, Timestamp};
use overture_kit::memory::MemoryLog;
use overture_kit::{Cause, DeploymentLog, Loaded, LogError};
use overture_orchestrator::on_stream_records;
use support::{deployment, ports, record, Nothing, Queued};

/// The id of the fixture's last event of that deployment.
const LAST_EVENT: &str = "01a20800-0000-7000-8000-0000000000a1";

fn batch() -> aws_lambda_events::event::dynamodb::Event {
    serde_json::from_str(include_str!("fixtures/stream-records.json")).expect("the fixture")
}

/// A log that cannot be reached.
struct Unreachable;

#[derive(Debug, thiserror::Error)]
#[error("the table is throttled")]
struct Throttled;

#[async_trait]
impl DeploymentLog for Unreachable {
    async fn load(&self, _: DeploymentId) -> Result<Loaded, LogError> {
        Err(LogError::Unavailable(Box::new(Throttled)))
    }
    async fn append(
        &self,
        _: DeploymentId,
        _: &str,
        _: Option<u64>,
        _: Vec<DeploymentEvent>,
        _: &Cause,
    ) -> Result<(), LogError> {
        Err(LogError::Unavailable(Box::new(Throttled)))
    }
}

async fn requested_log() -> MemoryLog {
    let log = MemoryLog::new(Timestamp::UNIX_EPOCH);
    let blueprint = blueprint("name: x\nsteps:\n  build: { run: noop }\n");
    record(
        &log,
        deployment(),
        "test",
        vec![requested("x.yaml", blueprint)],
    )
    .await;
    log
}

#[tokio::test]
async fn each_deployment_of_a_batch_is_moved_on_once_caused_by_its_last_event() {
    let log = requested_log().await;
    let queued = Queued::default();
    let ports = ports(&log, &queued, &Nothing);
    let response = on_stream_records(&batch(), &ports)
        .await
        .expect("answered with partial failures");
    assert!(response.batch_item_failures.is_empty(), "{response:?}");

    let queued = queued.attempts.lock().expect("queue");
    assert_eq!(
        queued.len(),
        1,
        "moved on once, not once per record: {queued:?}"
    );
    let (id, attempts, cause) = &queued[0];
    assert_eq!(*id, deployment());
    assert_eq!(attempts[0].step, "build");
    assert_eq!(cause.to_string(), LAST_EVENT);
    let types: Vec<_> = log
        .events(deployment())
        .iter()
        .map(DeploymentEvent::event_type)
        .collect();
    assert_eq!(types, ["DeploymentRequested", "StepScheduled"]);
}

#[tokio::test]
async fn a_batch_whose_every_deployment_cannot_be_moved_on_fails_its_invocation_as_retryable() {
    let queued = Queued::default();
    let ports = ports(&Unreachable, &queued, &Nothing);
    // The batch's one deployment failed (its foreign item is no deployment's, left alone): the
    // invocation fails, so Lambda counts an error and the stream delivers the batch again.
    let failed = on_stream_records(&batch(), &ports)
        .await
        .expect_err("no deployment of the batch was moved on");
    assert_eq!(failed.error_type(), "Retryable", "{failed}");
    assert_eq!(failed.failed, 1, "{failed}");
}
