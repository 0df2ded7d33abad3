//! A deployment's end, published as an event: `deployment.succeeded` or `deployment.failed`
//! from the `overture` source ([`IncomingEvent::deployment_ended`]), one chain step deeper than
//! the event that started the deployment (recorded in its `DeploymentRequested`), so that
//! triggers chain and a looping chain stops at the domain's depth limit.
//!
//! On AWS the ends are read from the events table's stream ([`on_stream_records`]) and published
//! on the trigger events queue ([`PublishEvents`]), where the triggers function receives them
//! like any other event. An end delivered twice is published twice with the same event id,
//! which the trigger ledger claims once.

use async_trait::async_trait;
use aws_lambda_events::event::dynamodb::Event;
use aws_lambda_events::event::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use overture_domain::trigger::IncomingEvent;
use overture_domain::DeploymentState;
use overture_events::DeploymentId;
use overture_kit::batch::{BatchFailed, BatchTally};
use overture_kit::stream_record::{envelope_of, event_of};
use overture_kit::{DeploymentLog, LogError};

/// Publishes events for the triggers to receive.
#[async_trait]
pub trait PublishEvents: Send + Sync {
    /// Publishes the event (its CloudEvents JSON document).
    async fn publish(&self, event: &IncomingEvent) -> Result<(), PublishError>;
}

/// An event could not be published.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// The queue could not be reached or failed on its side: trying again later may help.
    #[error("could not publish the event, for now: {0}")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The queue refused it: trying again will not help.
    #[error("could not publish the event: {0}")]
    Refused(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl PublishError {
    /// Whether trying the same call again later may succeed.
    pub const fn is_retryable(&self) -> bool {
        matches!(self, PublishError::Unavailable(_))
    }
}

/// Why an end was not published.
#[derive(Debug, thiserror::Error)]
pub enum EndError {
    /// The deployment could not be read.
    #[error(transparent)]
    Log(#[from] LogError),
    /// Its end could not be published.
    #[error(transparent)]
    Publish(#[from] PublishError),
}

impl EndError {
    /// Whether trying again later may succeed.
    pub const fn is_retryable(&self) -> bool {
        match self {
            EndError::Log(error) => error.is_retryable(),
            EndError::Publish(error) => error.is_retryable(),
        }
    }
}

/// The ports [`on_stream_records`] uses.
pub struct EndPorts<'a> {
    /// Where an ended deployment's request is read.
    pub log: &'a dyn DeploymentLog,
    /// Where its end is published.
    pub events: &'a dyn PublishEvents,
}

/// The status an event type ends a deployment with, if it ends one.
pub fn ending_status(event_type: &str) -> Option<&'static str> {
    match event_type {
        "DeploymentSucceeded" => Some("succeeded"),
        "DeploymentFailed" => Some("failed"),
        "DeploymentCancelled" => Some("cancelled"),
        _ => None,
    }
}

/// The event a deployment's end publishes.
pub fn end_of(deployment: DeploymentId, state: &DeploymentState, status: &str) -> IncomingEvent {
    let blueprint = state
        .blueprint
        .as_ref()
        .map_or("", |blueprint| blueprint.name.as_str());
    let depth = state.triggered_by.as_ref().map_or(0, |by| by.depth);
    IncomingEvent::deployment_ended(
        &deployment.to_string(),
        &state.tenant,
        blueprint,
        status,
        depth,
    )
}

/// Publishes the end of every deployment that ended in the batch; returns the record to deliver
/// again from (the first end not published), or fails the invocation when no end of the batch
/// was published.
pub async fn on_stream_records(
    batch: &Event,
    ports: &EndPorts<'_>,
) -> Result<DynamoDbEventResponse, BatchFailed> {
    let ends: Vec<_> = batch
        .records
        .iter()
        .filter_map(|record| {
            let (deployment, _) = event_of(record)?;
            let status = ending_status(&envelope_of(record)?.event_type)?;
            Some((record, deployment, status))
        })
        .collect();
    let mut response = DynamoDbEventResponse::default();
    let mut tally = BatchTally::new(ends.len());
    for (record, deployment, status) in ends {
        if let Err(error) = publish_end(deployment, status, ports).await {
            tracing::warn!(
                %deployment,
                error_type = overture_kit::batch::error_type(error.is_retryable()),
                %error,
                "could not publish the deployment's end; the stream delivers it again"
            );
            tally.failed(error.is_retryable(), &error);
            let mut failure = DynamoDbBatchItemFailure::default();
            failure.item_identifier = record.change.sequence_number.clone();
            response.batch_item_failures.push(failure);
            // The stream delivers everything from the first failure on again.
            break;
        }
    }
    tally.answer(response)
}

async fn publish_end(
    deployment: DeploymentId,
    status: &str,
    ports: &EndPorts<'_>,
) -> Result<(), EndError> {
    let state = ports.log.load(deployment).await?.state;
    let event = end_of(deployment, &state, status);
    ports.events.publish(&event).await?;
    tracing::info!(%deployment, event_type = event.event_type, depth = event.depth, "published the deployment's end");
    Ok(())
}
