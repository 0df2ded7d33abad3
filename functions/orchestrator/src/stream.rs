//! The orchestrator's trigger on AWS: a batch of the event table's stream records.
//!
//! Each record is one event as the DynamoDB log stores it (its new image: `stream`, `revision`,
//! `id`, `type`, and `data` and `metadata` as JSON text, read by `overture_kit::stream_record`,
//! which the projector's trigger shares). Every deployment the batch touches is
//! moved on once, caused by its last event in the batch, queuing what those events decided (or,
//! if one cannot be read, every waiting attempt: queuing too much is safe, too little is not).
//! A deployment that could not be moved on is reported as a batch item failure at its first
//! record in the batch, so the stream delivers it again from there; moving on is idempotent, so
//! the records of it that were handled before change nothing the second time.

use aws_lambda_events::event::dynamodb::{Event, EventRecord};
use aws_lambda_events::event::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use overture_events::{DeploymentId, Envelope};
use overture_kit::batch::{BatchFailed, BatchTally};
use overture_kit::stream_record::{envelope_of, event_of};

use crate::{orchestrate, OrchestratorPorts, Since};

/// One deployment touched by a batch.
struct Touched<'a> {
    deployment: DeploymentId,
    /// Its first record in the batch, where the stream resumes if it fails.
    first: &'a EventRecord,
    /// Its last event's id, the cause of moving it on.
    last_event: uuid::Uuid,
    /// Its events in the batch, while every one of them could be read.
    records: Option<Vec<Envelope>>,
}

/// Moves every deployment of the batch on; returns the records to deliver again, or fails the
/// invocation when no deployment of the batch could be moved on.
pub async fn on_stream_records(
    batch: &Event,
    ports: &OrchestratorPorts<'_>,
) -> Result<DynamoDbEventResponse, BatchFailed> {
    let mut touched: Vec<Touched<'_>> = Vec::new();
    for record in &batch.records {
        let Some((deployment, id)) = event_of(record) else {
            tracing::warn!(
                event_id = record.event_id,
                "a stream record that is not a deployment's event; left alone"
            );
            continue;
        };
        let envelope = envelope_of(record);
        match touched.iter_mut().find(|t| t.deployment == deployment) {
            Some(seen) => {
                seen.last_event = id;
                seen.records = seen.records.take().zip(envelope).map(|(mut all, one)| {
                    all.push(one);
                    all
                });
            }
            None => touched.push(Touched {
                deployment,
                first: record,
                last_event: id,
                records: envelope.map(|one| vec![one]),
            }),
        }
    }
    let mut response = DynamoDbEventResponse::default();
    let mut tally = BatchTally::new(touched.len());
    for Touched {
        deployment,
        first,
        last_event,
        records,
    } in touched
    {
        let since = records.as_deref().map_or(Since::Unknown, Since::Records);
        if let Err(error) = orchestrate(deployment, last_event, since, ports).await {
            tracing::warn!(
                %deployment,
                error_type = overture_kit::batch::error_type(error.is_retryable()),
                %error,
                "could not move the deployment on; the stream delivers it again"
            );
            tally.failed(error.is_retryable(), &error);
            let mut failure = DynamoDbBatchItemFailure::default();
            failure.item_identifier = first.change.sequence_number.clone();
            response.batch_item_failures.push(failure);
        }
    }
    tally.answer(response)
}
