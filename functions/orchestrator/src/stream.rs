//! The orchestrator's trigger on AWS: a batch of the event table's stream records.
//!
//! Each record is one event as the DynamoDB log stores it (its new image: `stream`, `revision`,
//! `id`, ...). Every deployment the batch touches is moved on once, caused by its last event in
//! the batch. A deployment that could not be moved on is reported as a batch item failure at its
//! first record in the batch, so the stream delivers it again from there; moving on is
//! idempotent, so the records of it that were handled before change nothing the second time.

use aws_lambda_events::event::dynamodb::{Event, EventRecord};
use aws_lambda_events::event::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use overture_events::DeploymentId;

use crate::{orchestrate, OrchestratorPorts};

/// One deployment touched by a batch.
struct Touched<'a> {
    deployment: DeploymentId,
    /// Its first record in the batch, where the stream resumes if it fails.
    first: &'a EventRecord,
    /// Its last event's id, the cause of moving it on.
    last_event: uuid::Uuid,
}

/// The deployment and event id a record carries; `None` for an item that is not an event of a
/// deployment stream (another writer's, or a removal), which is not the orchestrator's business.
fn event_of(record: &EventRecord) -> Option<(DeploymentId, uuid::Uuid)> {
    let text = |name: &str| match record.change.new_image.get(name) {
        Some(serde_dynamo::AttributeValue::S(text)) => Some(text.as_str()),
        _ => None,
    };
    let deployment = DeploymentId::from_stream(text("stream")?).ok()?;
    let id = uuid::Uuid::try_parse(text("id")?).ok()?;
    Some((deployment, id))
}

/// Moves every deployment of the batch on; returns the records to deliver again.
pub async fn on_stream_records(
    batch: &Event,
    ports: &OrchestratorPorts<'_>,
) -> DynamoDbEventResponse {
    let mut touched: Vec<Touched<'_>> = Vec::new();
    for record in &batch.records {
        let Some((deployment, id)) = event_of(record) else {
            tracing::warn!(
                event_id = record.event_id,
                "a stream record that is not a deployment's event; left alone"
            );
            continue;
        };
        match touched.iter_mut().find(|t| t.deployment == deployment) {
            Some(seen) => seen.last_event = id,
            None => touched.push(Touched {
                deployment,
                first: record,
                last_event: id,
            }),
        }
    }
    let mut response = DynamoDbEventResponse::default();
    for Touched {
        deployment,
        first,
        last_event,
    } in touched
    {
        if let Err(error) = orchestrate(deployment, last_event, ports).await {
            tracing::warn!(%deployment, %error, "could not move the deployment on; the stream delivers it again");
            let mut failure = DynamoDbBatchItemFailure::default();
            failure.item_identifier = first.change.sequence_number.clone();
            response.batch_item_failures.push(failure);
        }
    }
    response
}
