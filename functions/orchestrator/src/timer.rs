//! The orchestrator's timers on AWS: a batch of the timers queue's SQS messages, one
//! [`Job::Wake`] each ("move this deployment on at this instant": a grace period's deadline, or
//! closing a bastion again after a failed try).
//!
//! Each message's body is a job as the queue writes it (`overture_kit::queue::Job::to_message`).
//! For each message of the batch, in turn:
//!
//! - A timer delivered before it is due (SQS holds a message back 15 minutes at most) is sent
//!   again for the rest of its wait (`overture_kit::queue::due_or_sent_on`, as the runner's
//!   trigger does) and its early delivery acknowledged.
//! - A timer that is due moves its deployment on ([`orchestrate`], with no new records: what the
//!   deployment's own events decided was queued when they were appended). Moving on is
//!   idempotent, so a timer delivered twice is harmless.
//! - A timer that could not be handled is reported as a batch item failure: SQS delivers it
//!   again after its visibility timeout. So is a message that is not a timer: it can never be
//!   handled, and after `maxReceiveCount` receipts SQS moves it to the timers' dead-letter queue.
//!
//! Every error says whether handling the message again may help ([`TimerError::error_type`]).

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use overture_events::job::Job;
use overture_kit::batch::{BatchFailed, BatchTally};
use overture_kit::queue::{due_or_sent_on, QueueError, SendJobs};
use overture_kit::sqs_message::{self, Unreadable};

use crate::{orchestrate, OrchestratorError, OrchestratorPorts, Since};

/// Why a timer's message was reported as a batch item failure.
#[derive(Debug, thiserror::Error)]
pub enum TimerError {
    /// The message is not a timer; handling it again will not help.
    #[error(transparent)]
    Unreadable(#[from] Unreadable),
    /// The deployment could not be moved on.
    #[error(transparent)]
    Orchestrator(#[from] OrchestratorError),
    /// A timer delivered early could not be sent again for the rest of its wait.
    #[error("could not queue the timer again for the rest of its wait: {0}")]
    Requeue(#[source] QueueError),
}

impl TimerError {
    /// Whether handling the message again later may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            TimerError::Unreadable(_) => false,
            TimerError::Orchestrator(error) => error.is_retryable(),
            TimerError::Requeue(error) => error.is_retryable(),
        }
    }

    /// The stable error type Lambda reports: "Retryable" or "NonRetryable".
    pub fn error_type(&self) -> &'static str {
        overture_kit::batch::error_type(self.is_retryable())
    }
}

/// Handles every timer of the batch; returns the messages SQS must keep, or fails the
/// invocation when none could be handled. `timers` is the queue
/// the batch came from, where a timer delivered early goes back.
pub async fn on_timer_messages(
    batch: &SqsEvent,
    ports: &OrchestratorPorts<'_>,
    timers: &dyn SendJobs,
) -> Result<SqsBatchResponse, BatchFailed> {
    let mut response = SqsBatchResponse::default();
    let mut tally = BatchTally::new(batch.records.len());
    // One after the other: two timers of one deployment would only race on its stream.
    for message in &batch.records {
        if let Err(error) = on_timer_message(message, ports, timers).await {
            let message_id = sqs_message::message_id(message);
            tracing::warn!(
                message_id,
                error_type = error.error_type(),
                %error,
                "the timer was not handled; SQS delivers it again"
            );
            tally.failed(error.is_retryable(), &error);
            response.add_failure(message_id);
        }
    }
    tally.answer(response)
}

/// Handles one timer; `Ok` when it is done with and may be deleted.
pub async fn on_timer_message(
    message: &SqsMessage,
    ports: &OrchestratorPorts<'_>,
    timers: &dyn SendJobs,
) -> Result<(), TimerError> {
    let (job, kind) = sqs_message::job_of(message, "a timer")?;
    let Job::Wake { deployment, cause } = kind else {
        return Err(Unreadable {
            message_id: sqs_message::message_id(message),
            expected: "a timer",
            reason: format!("a job for another consumer: {kind:?}"),
        }
        .into());
    };
    let due = due_or_sent_on(timers, job, ports.clock.now())
        .await
        .map_err(TimerError::Requeue)?;
    if due.is_none() {
        return Ok(());
    }
    // A timer queued before timers carried their cause has this handling as its cause, as the
    // embedded engine does.
    let cause = cause.unwrap_or_else(uuid::Uuid::now_v7);
    orchestrate(deployment, cause, Since::Records(&[]), ports).await?;
    Ok(())
}
