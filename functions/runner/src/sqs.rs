//! The runner's trigger on AWS: a batch of the step queue's SQS messages, one job each.
//!
//! Each message's body is a job as the queue writes it (`overture_kit::queue::Job::to_message`:
//! key, deployment, due time, and the [`RunAttempt`] as its body). The messages of a batch are
//! handled side by side, each on its own:
//!
//! - A job that is due runs ([`run_attempt`]) while a [`KeepAlive`] extends its message's
//!   visibility, so no other runner receives it meanwhile. Once its outcome is recorded (or it
//!   is found obsolete) the message is acknowledged: left out of the batch item failures, so
//!   Lambda deletes it.
//! - A job delivered before it is due (SQS holds a message back 15 minutes at most) is sent again
//!   for the rest of its wait through the queue's [`SendJobs`] port, and its early delivery
//!   acknowledged. A fresh copy starts its receive count afresh: a long wait, carried in hops,
//!   never counts towards the queue's `maxReceiveCount`.
//! - A job that must come back at a known instant ([`AttemptReport::NotYetDue`], or
//!   [`AttemptReport::StillRunning`]: a duplicate delivery waiting for the lease of the attempt
//!   that runs) has its message hidden until then ([`ChangeVisibility`], at most SQS's 12 hours)
//!   and is reported as a batch item failure, so SQS keeps it and delivers it again then.
//! - A job that could not be handled ([`RunnerError`]) is reported failed: SQS delivers it again
//!   when its visibility ends. So is a message that is not a runner's job: it can never be
//!   handled, and after `maxReceiveCount` receipts SQS moves it to the dead-letter queue instead
//!   of looping on it.
//!
//! Every error says whether handling the message again may help ([`MessageError::error_type`]).
//! A batch whose every job failed with an error fails its invocation
//! ([`overture_kit::batch::BatchFailed`]); jobs only put off are no error.

use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use overture_events::Timestamp;
use overture_kit::batch::{BatchFailed, BatchTally};
use overture_kit::queue::{due_or_sent_on, QueueError, SendJobs};
use overture_kit::sqs_message;

use crate::{
    run_attempt, AttemptReport, KeepAlive, PortError, RunAttempt, RunnerError, RunnerPorts,
};

/// The longest SQS hides a message (`ChangeMessageVisibility`).
pub const MAX_VISIBILITY: Duration = Duration::from_secs(12 * 60 * 60);
/// How long each extension keeps a running job's message hidden when the attempt has no lease
/// of its own to go by.
pub const EXTENSION: Duration = Duration::from_secs(5 * 60);
/// How long before its hiding lapses a running job's message is hidden again: well before, so
/// one failed call leaves time for the next.
pub const EXTEND_EVERY: Duration = Duration::from_secs(60);

/// Changes how long a received message stays hidden from other receivers, by its receipt handle
/// (SQS `ChangeMessageVisibility`).
#[async_trait]
pub trait ChangeVisibility: Send + Sync {
    /// Hides the message for `visibility` from now (rounded up to whole seconds).
    async fn change_visibility(
        &self,
        receipt_handle: &str,
        visibility: Duration,
    ) -> Result<(), QueueError>;
}

/// Why a message was reported as a batch item failure.
#[derive(Debug, thiserror::Error)]
pub enum MessageError {
    /// The message is not a runner's job; handling it again will not help.
    #[error("message {message_id} is not a runner's job: {reason}")]
    Unreadable {
        /// The message's id.
        message_id: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The job could not be handled.
    #[error(transparent)]
    Runner(#[from] RunnerError),
    /// A job delivered early could not be sent again for the rest of its wait.
    #[error("could not queue the job again for the rest of its wait: {0}")]
    Requeue(#[source] QueueError),
    /// The job must come back later: not an error of the handler, but SQS must keep it.
    #[error("the job is to be handled again at {0}")]
    Later(Timestamp),
}

impl MessageError {
    /// Whether handling the message again later may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            MessageError::Unreadable { .. } => false,
            MessageError::Runner(error) => error.is_retryable(),
            MessageError::Requeue(error) => error.is_retryable(),
            MessageError::Later(_) => true,
        }
    }

    /// The stable error type Lambda reports: "Retryable" or "NonRetryable".
    pub fn error_type(&self) -> &'static str {
        overture_kit::batch::error_type(self.is_retryable())
    }
}

/// Handles every job of the batch; returns the messages SQS must keep, or fails the invocation
/// when every job failed with an error.
pub async fn on_job_messages(
    batch: &SqsEvent,
    ports: &RunnerPorts<'_>,
    queue: &dyn SendJobs,
    visibility: &dyn ChangeVisibility,
) -> Result<SqsBatchResponse, BatchFailed> {
    let handled = batch
        .records
        .iter()
        .map(|message| on_job_message(message, ports, queue, visibility));
    let outcomes = futures_util::future::join_all(handled).await;
    let mut response = SqsBatchResponse::default();
    let mut tally = BatchTally::new(batch.records.len());
    for (message, outcome) in batch.records.iter().zip(outcomes) {
        let Err(error) = outcome else { continue };
        let message_id = message.message_id.clone().unwrap_or_default();
        match &error {
            MessageError::Later(at) => {
                tracing::info!(message_id, %at, "the job comes back later")
            }
            _ => {
                tracing::warn!(
                    message_id,
                    error_type = error.error_type(),
                    %error,
                    "the job was not handled; SQS delivers it again"
                );
                tally.failed(error.is_retryable(), &error);
            }
        }
        let mut failure = BatchItemFailure::default();
        failure.item_identifier = message_id;
        response.batch_item_failures.push(failure);
    }
    tally.answer(response)
}

/// Handles one message; `Ok` when it is done with and may be deleted.
async fn on_job_message(
    message: &SqsMessage,
    ports: &RunnerPorts<'_>,
    queue: &dyn SendJobs,
    visibility: &dyn ChangeVisibility,
) -> Result<(), MessageError> {
    let unreadable = |reason: String| MessageError::Unreadable {
        message_id: sqs_message::message_id(message),
        reason,
    };
    let (job, run) = match sqs_message::job_of(message, "a runner's job") {
        Ok((job, overture_events::job::Job::RunAttempt(run))) => (job, run),
        Ok((_, other)) => return Err(unreadable(format!("a job for another consumer: {other:?}"))),
        Err(error) => return Err(unreadable(error.reason)),
    };
    let receipt = message
        .receipt_handle
        .as_deref()
        .ok_or_else(|| unreadable("no receipt handle".into()))?;

    let now = ports.clock.now();
    // Delivered at SQS's delay bound, before it is due: on for the rest of its wait.
    if due_or_sent_on(queue, job, now)
        .await
        .map_err(MessageError::Requeue)?
        .is_none()
    {
        return Ok(());
    }
    let lease = MessageLease {
        visibility,
        clock: ports.clock,
        receipt,
        run: &run,
        hidden: Mutex::new(None),
    };
    let again_at = match run_attempt(&run, ports, &lease).await? {
        AttemptReport::NotYetDue(at) | AttemptReport::StillRunning(at) => at,
        _ => return Ok(()),
    };
    let wait = (again_at - now).to_std().unwrap_or(Duration::ZERO);
    if let Err(error) = visibility
        .change_visibility(receipt, wait.min(MAX_VISIBILITY))
        .await
    {
        // Still reported failed: the message then comes back when its visibility ends, sooner
        // than asked, and is put off again.
        tracing::warn!(deployment = %run.deployment, %error, "could not hide the job until it is to be handled again");
    }
    Err(MessageError::Later(again_at))
}

/// The job's lease on SQS: its message kept hidden while the attempt runs.
///
/// It is hidden until the attempt's own lease ends (and a second more), in one call: should the
/// runner die, the job comes back just when the attempt can be found interrupted, and a step
/// that runs an hour costs one `ChangeMessageVisibility`, not sixty. Without a lease to go by it
/// is hidden [`EXTENSION`] at a time. Either way it is hidden again [`EXTEND_EVERY`] (or half the
/// last hiding, if shorter) before the hiding lapses.
struct MessageLease<'a> {
    visibility: &'a dyn ChangeVisibility,
    clock: &'a dyn overture_kit::Clock,
    receipt: &'a str,
    run: &'a RunAttempt,
    /// Until when the message is hidden, and for how long it was (tokio's clock, so tests
    /// control it).
    hidden: Mutex<Option<(tokio::time::Instant, Duration)>>,
}

#[async_trait]
impl KeepAlive for MessageLease<'_> {
    async fn keep_alive(&self, attempt_lease: Option<Timestamp>) -> Result<(), PortError> {
        let now = tokio::time::Instant::now();
        let due = self
            .hidden
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_none_or(|(until, length)| {
                until.saturating_duration_since(now) < EXTEND_EVERY.min(length / 2)
            });
        if !due {
            return Ok(());
        }
        let length = attempt_lease
            .and_then(|until| (until - self.clock.now()).to_std().ok())
            .map_or(EXTENSION, |left| left + Duration::from_secs(1))
            .min(MAX_VISIBILITY);
        match self
            .visibility
            .change_visibility(self.receipt, length)
            .await
        {
            Ok(()) => {
                *self
                    .hidden
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) =
                    Some((now + length, length));
                Ok(())
            }
            // The message stays hidden for the rest of its last extension: the next heartbeat
            // tries again, rather than killing a step over one throttled call.
            Err(error) if error.is_retryable() => {
                tracing::warn!(deployment = %self.run.deployment, step = self.run.step, %error, "could not extend the job's visibility; trying again");
                Ok(())
            }
            // A stale receipt: the message was received again, and another runner may hold it.
            Err(error) => Err(PortError::refused(error)),
        }
    }
}
