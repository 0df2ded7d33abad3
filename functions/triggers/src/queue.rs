//! The triggers function on AWS: a batch of the trigger events queue's SQS messages, one
//! incoming event each (CloudEvents 1.0 JSON, or EventBridge's shape).
//!
//! The published trigger file ([`LoadBundle`]) is read once per batch. Each event is then
//! dispatched in turn ([`dispatch`]). A message whose event could not be wholly dispatched for
//! a reason that may pass is reported as a batch item failure, and SQS delivers it again after
//! its visibility timeout: the ledger's claims make that safe. A message that is no event can
//! never be handled: it is reported too, and after `maxReceiveCount` receipts SQS moves it to the
//! queue's dead-letter queue, where it is kept for people to look at.
//!
//! The message attribute [`TENANT_ATTRIBUTE`], when present, is the tenant the event was
//! delivered for (the HTTP API sets it to the caller's tenant): triggers of other tenants refuse
//! it. Events put on the queue by the operator's own sources carry none.
//!
//! An event under the engine's own source (`overture`, a deployment's end) is believed only as
//! the log records it ([`recorded_end`]): one the log does not hold, or one delivered for a
//! tenant (a caller's, through the API), is given back as not the engine's and starts nothing.

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use overture_domain::trigger::{IncomingEvent, TriggerFile, OVERTURE_SOURCE};
use overture_kit::batch::{BatchFailed, BatchTally};

use crate::bundle::LoadBundle;
use crate::ends::{recorded_end, UnrecordedEnd};
use crate::{
    dispatch, DispatchError, FindBlueprints, SecretVariables, TriggerLedger, TriggerPorts,
};
use overture_kit::Clock;
use overture_submit::SubmitPorts;

/// The message attribute naming the tenant an event was delivered for.
pub const TENANT_ATTRIBUTE: &str = "overture-tenant";

/// The ports of the function, but for the blueprints, which come with the published bundle.
pub struct QueuePorts<'a> {
    /// The published trigger file.
    pub bundle: &'a dyn LoadBundle,
    /// Claims and decisions.
    pub ledger: &'a dyn TriggerLedger,
    /// The values of the triggers' secrets.
    pub secrets: &'a dyn SecretVariables,
    /// Where a started deployment is sealed and recorded.
    pub submit: SubmitPorts<'a>,
    /// Stamps the decisions.
    pub clock: &'a dyn Clock,
}

/// Why a message was reported as a batch item failure.
#[derive(Debug, thiserror::Error)]
pub enum MessageError {
    /// The message holds no event; handling it again will not help.
    #[error("message {message_id} is not an event: {reason}")]
    NotAnEvent {
        /// The message's id.
        message_id: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An `overture` end the log does not hold, or one a caller sent: nothing was dispatched.
    #[error("message {message_id} is not the engine's: {reason}")]
    NotTheEngines {
        /// The message's id.
        message_id: String,
        /// Why it was not believed.
        reason: UnrecordedEnd,
    },
    /// The event could not be wholly dispatched.
    #[error(transparent)]
    Dispatch(#[from] DispatchError),
}

impl MessageError {
    /// Whether handling the message again later may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            MessageError::NotAnEvent { .. } => false,
            MessageError::NotTheEngines { reason, .. } => reason.is_retryable(),
            MessageError::Dispatch(error) => error.is_retryable(),
        }
    }
}

/// Dispatches every event of the batch; returns the messages SQS must keep, or fails the
/// invocation when none could be handled.
pub async fn on_event_messages(
    batch: &SqsEvent,
    ports: &QueuePorts<'_>,
) -> Result<SqsBatchResponse, BatchFailed> {
    let mut response = SqsBatchResponse::default();
    let mut tally = BatchTally::new(batch.records.len());
    let published = ports
        .bundle
        .load()
        .await
        .and_then(|bundle| bundle.map(|b| b.file().map(|file| (b, file))).transpose());
    let published = match published {
        Ok(published) => published,
        Err(error) => {
            tracing::warn!(%error, "no event of the batch was dispatched");
            return Err(BatchFailed {
                failed: batch.records.len(),
                retryable: error.is_retryable(),
                first: error.to_string(),
            });
        }
    };
    let Some((bundle, file)) = published else {
        // Nothing could match: an event before any trigger file is not an error to retry.
        tracing::warn!(
            events = batch.records.len(),
            "no trigger file is published (`overture --backend aws triggers publish FILE`); the \
             events start nothing"
        );
        return Ok(response);
    };
    let dispatching = TriggerPorts {
        ledger: ports.ledger,
        blueprints: &bundle as &dyn FindBlueprints,
        secrets: ports.secrets,
        submit: SubmitPorts {
            log: ports.submit.log,
            seals: ports.submit.seals,
            payloads: ports.submit.payloads,
            clock: ports.submit.clock,
        },
        clock: ports.clock,
    };
    for message in &batch.records {
        if let Err(error) = on_event_message(message, &file, &dispatching).await {
            let message_id = message.message_id.clone().unwrap_or_default();
            tracing::warn!(
                message_id,
                error_type = overture_kit::batch::error_type(error.is_retryable()),
                %error,
                "the event was not wholly dispatched; SQS delivers it again"
            );
            tally.failed(error.is_retryable(), &error);
            response.add_failure(message_id);
        }
    }
    tally.answer(response)
}

async fn on_event_message(
    message: &SqsMessage,
    file: &TriggerFile,
    ports: &TriggerPorts<'_>,
) -> Result<(), MessageError> {
    let not_an_event = |reason: String| MessageError::NotAnEvent {
        message_id: message.message_id.clone().unwrap_or_default(),
        reason,
    };
    let body = message.body.as_deref().unwrap_or("");
    let value = serde_json::from_str(body).map_err(|e| not_an_event(format!("not JSON: {e}")))?;
    let event =
        IncomingEvent::from_published_json(value).map_err(|e| not_an_event(e.to_string()))?;
    let caller = message
        .message_attributes
        .get(TENANT_ATTRIBUTE)
        .and_then(|attribute| attribute.string_value.as_deref());
    let event = if event.source == OVERTURE_SOURCE {
        let not_the_engines = |reason| MessageError::NotTheEngines {
            message_id: message.message_id.clone().unwrap_or_default(),
            reason,
        };
        if caller.is_some() {
            return Err(not_the_engines(UnrecordedEnd::FromACaller));
        }
        recorded_end(&event, ports.submit.log)
            .await
            .map_err(not_the_engines)?
    } else {
        event
    };
    let dispatched = dispatch(file, &event, caller, ports).await?;
    for decision in &dispatched.decisions {
        tracing::info!(
            source = decision.source,
            event_id = decision.event_id,
            trigger = decision.trigger,
            decision = decision.decision.as_str(),
            deployment = decision.deployment,
            reason = decision.reason,
            "trigger decision"
        );
    }
    Ok(())
}
