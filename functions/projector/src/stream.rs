//! The projector's trigger on AWS: a batch of the event table's stream records.
//!
//! Records are read into events as the orchestrator's trigger reads them
//! (`overture_kit::stream_record`) and grouped by deployment, each group in the batch's order
//! (a stream delivers one item's changes in order, and one deployment is one partition).
//! [`project_stream`] folds each group, once: idempotent on (stream, revision), so records
//! delivered again change nothing. A deployment whose records could not be folded is reported
//! as a batch item failure at its first record (`ReportBatchItemFailures`), so the stream
//! delivers it again from there, and the other deployments of the batch are not held up.
//! A record of a deployment that cannot be read here is read from the log instead, from the
//! group's first revision on: the view must not skip it, and the log reads it its own way.
//! Items that are not events of a deployment stream are left alone.

use aws_lambda_events::event::dynamodb::{Event, EventRecord};
use aws_lambda_events::event::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use overture_events::{DeploymentId, Envelope};
use overture_kit::batch::{BatchFailed, BatchTally};
use overture_kit::stream_record::{envelope_of, event_of, revision_of};
use overture_kit::ReadStream;

use crate::{project_stream, DeploymentViews, StreamProjectionError};

/// One deployment's records in a batch.
struct Group<'a> {
    deployment: DeploymentId,
    /// Its first record in the batch, where the stream resumes if it fails.
    first: &'a EventRecord,
    /// Its lowest revision in the batch, as far as the records say.
    from: Option<u64>,
    /// Its events in the batch, while every one of them could be read.
    records: Option<Vec<Envelope>>,
}

/// Folds every deployment of the batch into the read models; returns the records to deliver
/// again, or fails the invocation when no deployment of the batch could be folded.
pub async fn on_stream_records(
    batch: &Event,
    log: &dyn ReadStream,
    views: &dyn DeploymentViews,
) -> Result<DynamoDbEventResponse, BatchFailed> {
    let mut groups: Vec<Group<'_>> = Vec::new();
    for record in &batch.records {
        let Some((deployment, _)) = event_of(record) else {
            tracing::warn!(
                event_id = record.event_id,
                "a stream record that is not a deployment's event; left alone"
            );
            continue;
        };
        let envelope = envelope_of(record);
        let revision = revision_of(record);
        match groups.iter_mut().find(|g| g.deployment == deployment) {
            Some(group) => {
                group.from = match (group.from, revision) {
                    (Some(seen), Some(this)) => Some(seen.min(this)),
                    (seen, this) => seen.or(this),
                };
                group.records = group.records.take().zip(envelope).map(|(mut all, one)| {
                    all.push(one);
                    all
                });
            }
            None => groups.push(Group {
                deployment,
                first: record,
                from: revision,
                records: envelope.map(|one| vec![one]),
            }),
        }
    }
    let mut response = DynamoDbEventResponse::default();
    let mut tally = BatchTally::new(groups.len());
    for group in groups {
        if let Err(error) = project_group(&group, log, views).await {
            tracing::warn!(
                deployment = %group.deployment,
                error_type = error.error_type(),
                %error,
                "could not fold the deployment's records; the stream delivers them again"
            );
            tally.failed(error.is_retryable(), &error);
            let mut failure = DynamoDbBatchItemFailure::default();
            failure.item_identifier = group.first.change.sequence_number.clone();
            response.batch_item_failures.push(failure);
        }
    }
    tally.answer(response)
}

/// Folds one group, its unreadable records read from the log instead.
async fn project_group(
    group: &Group<'_>,
    log: &dyn ReadStream,
    views: &dyn DeploymentViews,
) -> Result<usize, StreamProjectionError> {
    let read;
    let records = match &group.records {
        Some(records) => records,
        None => {
            read = log
                .read_stream(group.deployment, group.from.unwrap_or(0))
                .await?;
            &read
        }
    };
    project_stream(group.deployment, records, log, views).await
}
