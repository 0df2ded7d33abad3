//! A deployment's end, published as an event: `deployment.succeeded` or `deployment.failed`
//! from the `overture` source ([`IncomingEvent::deployment_ended`]), one chain step deeper than
//! the event that started the deployment (recorded in its `DeploymentRequested`), so that
//! triggers chain and a looping chain stops at the domain's depth limit.
//!
//! On AWS the ends are read from the events table's stream ([`on_stream_records`]) and published
//! on the trigger events queue ([`PublishEvents`]), where the triggers function receives them
//! like any other event. An end delivered twice is published twice with the same event id,
//! which the trigger ledger claims once.
//!
//! Anyone who may put a message on that queue could write an `overture` end too, so the
//! triggers function believes none as written: [`recorded_end`] reads the deployment it names
//! from the log and dispatches the end the engine makes of that record, or nothing when the log
//! holds no such end (a forged end of a deployment still running can never pre-empt the real
//! one).

use async_trait::async_trait;
use aws_lambda_events::event::dynamodb::Event;
use aws_lambda_events::event::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use overture_domain::deployment::{Outcome, Phase};
use overture_domain::trigger::IncomingEvent;
use overture_domain::DeploymentState;
use overture_events::{DeploymentEvent, DeploymentId};
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

/// What the end publisher does for an event: publish its deployment's end, with this status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PublishEnd {
    /// `succeeded`, `failed` or `cancelled`.
    pub status: &'static str,
}

/// The end publisher's subscription: the events that end a deployment, one match from event to
/// reaction (the event card, `overture_domain::deployment::card`, names the same). No event is
/// left to a wildcard: a new event is placed here on purpose.
pub fn subscription(event: &DeploymentEvent) -> Option<PublishEnd> {
    use DeploymentEvent as E;
    let outcome = match event {
        E::DeploymentSucceeded {} => Outcome::Succeeded,
        E::DeploymentFailed { .. } => Outcome::Failed,
        E::DeploymentCancelled { .. } => Outcome::Cancelled,
        E::DeploymentRequested { .. }
        | E::CredentialsSealed { .. }
        | E::StepScheduled { .. }
        | E::StepStarted { .. }
        | E::StepSucceeded { .. }
        | E::StepAttemptFailed { .. }
        | E::StepJobDeadLettered { .. }
        | E::StepRetryScheduled { .. }
        | E::StepFailed { .. }
        | E::FailureGracePeriodStarted { .. }
        | E::StepAbandoned { .. }
        | E::BastionAccessGranted { .. }
        | E::BastionAccessRevoked { .. }
        | E::SecretsPurged {}
        | E::CancellationRequested { .. }
        | E::DestroyRequested { .. }
        | E::StepDestroyed { .. }
        | E::StepDestroyFailed { .. }
        | E::DeploymentDestroyed {}
        | E::DeploymentRedriven { .. }
        | E::HostKeysPinned { .. }
        | E::StepNetworkPolicyApplied { .. }
        | E::StepAwaitingServices { .. }
        | E::ServicesResolved { .. }
        | E::ServiceRegistered { .. }
        | E::ServiceDeregistered { .. }
        | E::StepRerunRequested { .. } => return None,
    };
    Some(PublishEnd {
        status: status_of(outcome),
    })
}

/// The status an outcome is published with: `succeeded`, `failed` or `cancelled`.
pub const fn status_of(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Succeeded => "succeeded",
        Outcome::Failed => "failed",
        Outcome::Cancelled => "cancelled",
    }
}

/// Why an `overture` end read from the queue was not believed.
#[derive(Debug, thiserror::Error)]
pub enum UnrecordedEnd {
    /// The log holds no such end: the deployment is unknown, still running, or ended otherwise.
    #[error(
        "`source` is `overture`, but the log holds no such end ({0}); only the engine publishes \
         under that source"
    )]
    NotInTheLog(String),
    /// It came from a caller (delivered for a tenant, through the API), not from the engine.
    #[error("`source` is `overture`, which only the engine publishes under; a caller sent this")]
    FromACaller,
    /// The log could not be read.
    #[error(transparent)]
    Log(#[from] LogError),
}

impl UnrecordedEnd {
    /// Whether reading the log again later may succeed.
    pub const fn is_retryable(&self) -> bool {
        match self {
            UnrecordedEnd::NotInTheLog(_) | UnrecordedEnd::FromACaller => false,
            UnrecordedEnd::Log(error) => error.is_retryable(),
        }
    }
}

/// The end the engine made of the deployment `event` names, as the log records it. Nothing of
/// `event` is trusted but the deployment's id and the status it claims, which must be the
/// recorded ones; tenant, blueprint and depth come from the log.
pub async fn recorded_end(
    event: &IncomingEvent,
    log: &dyn DeploymentLog,
) -> Result<IncomingEvent, UnrecordedEnd> {
    let not_in_the_log = |why: &str| UnrecordedEnd::NotInTheLog(why.to_owned());
    let deployment: DeploymentId = event
        .lookup("data.id")
        .and_then(serde_json::Value::as_str)
        .and_then(|id| id.parse().ok())
        .ok_or_else(|| not_in_the_log("data.id names no deployment"))?;
    let state = log.load(deployment).await?.state;
    let Phase::Finished(outcome) = state.phase else {
        return Err(not_in_the_log(&format!(
            "deployment {deployment} has not ended"
        )));
    };
    let ended = end_of(deployment, &state, status_of(outcome));
    if ended.id != event.id || ended.event_type != event.event_type {
        return Err(not_in_the_log(&format!(
            "deployment {deployment} ended {}",
            status_of(outcome)
        )));
    }
    Ok(ended)
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
        state.tenant_id(),
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
            let envelope = envelope_of(record)?;
            let event = DeploymentEvent::from_parts(&envelope.event_type, envelope.data).ok()?;
            let PublishEnd { status } = subscription(&event)?;
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

#[cfg(test)]
mod card_tests {
    use overture_domain::deployment::card::{reactions_of, Reaction, Reactor};
    use overture_domain::testing::events::samples;

    use super::subscription;

    #[test]
    fn the_event_card_names_the_events_whose_end_is_published() {
        for sample in samples() {
            let code: Vec<_> = subscription(&sample)
                .map(|_| Reaction::PublishEnd)
                .into_iter()
                .collect();
            assert_eq!(
                code,
                reactions_of(sample.event_type(), Reactor::EndPublisher),
                "the card and the end publisher's subscription disagree on {}",
                sample.event_type()
            );
        }
    }
}
