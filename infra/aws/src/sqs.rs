//! Step jobs and timers on an SQS standard queue, keeping the queue contract of
//! `overture_kit::queue` ([`SqsQueue`]; the orchestrator's work on it is [`SqsWork`]).
//!
//! - **Send**: `SendMessageBatch`, at most ten messages a call. Each message's `DelaySeconds` is
//!   the wait until the job is due, rounded up, and at most the queue's bound (900 s, the most
//!   SQS allows). The message body is the job as JSON (`Job::to_message`, read back by the
//!   runner's Lambda trigger too): key, deployment, due time and body, so a job due beyond the
//!   bound, delivered early, still says when it is due.
//! - **Receive**: `ReceiveMessage` of one message, long polling (`WaitTimeSeconds`, at most 20),
//!   with the visibility asked for and its `ApproximateReceiveCount`; the receipt is the
//!   message's receipt handle.
//! - **Extend** is `ChangeMessageVisibility` (at most 12 hours; also the runner's Lambda trigger's
//!   `ChangeVisibility`), **ack** `DeleteMessage`, and
//!   **requeue** sends a copy for the rest of the wait, then deletes the early delivery: a
//!   failure in between leaves two copies, never none.
//!
//! SQS standard queues deliver at least once and do not de-duplicate (FIFO queues would, but
//! they have no per-message delay): the orchestrator queues each decision once, and every
//! consumer is idempotent on what its job names.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_sqs::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_sqs::types::{MessageSystemAttributeName, SendMessageBatchRequestEntry};
use aws_sdk_sqs::Client;
use overture_events::Timestamp;
use overture_kit::queue::{Delivery, Job, QueueError, Receipt, ReceiveJobs, SendJobs};
use overture_kit::Clock;
#[cfg(feature = "orchestrator")]
use overture_orchestrator::queued::QueueOn;
#[cfg(feature = "runner")]
use overture_runner::ChangeVisibility;

/// The longest SQS holds a message back (`DelaySeconds`).
pub const MAX_DELAY: Duration = Duration::from_secs(900);
/// The most messages one `SendMessageBatch` carries.
pub const MAX_BATCH: usize = 10;
/// The longest one `ReceiveMessage` waits.
const MAX_WAIT: Duration = Duration::from_secs(20);
/// The longest a message stays hidden.
const MAX_VISIBILITY: Duration = Duration::from_secs(12 * 60 * 60);

/// Error codes that say the receipt handle is no longer good.
const STALE: &[&str] = &["ReceiptHandleIsInvalid", "MessageNotInflight"];
/// Error codes that say the same call will fail again.
const REFUSED: &[&str] = &[
    "AWS.SimpleQueueService.NonExistentQueue",
    "QueueDoesNotExist",
    "InvalidParameterValue",
    "InvalidMessageContents",
    "InvalidAttributeValue",
    "BatchRequestTooLong",
    "TooManyEntriesInBatchRequest",
    "BatchEntryIdsNotDistinct",
    "UnsupportedOperation",
    "AccessDenied",
];

/// The orchestrator's work ([`overture_orchestrator::QueueWork`]) on SQS: attempts on the jobs
/// queue, timers on the timers queue.
#[cfg(feature = "orchestrator")]
pub type SqsWork = QueueOn<SqsQueue, SqsQueue>;

/// A call to SQS failed, or a message is not a job.
#[derive(Debug, thiserror::Error)]
pub enum SqsError {
    /// A call failed.
    #[error("SQS queue `{queue}`: {operation} failed: {message}")]
    Call {
        /// The queue's URL.
        queue: String,
        /// The API operation.
        operation: &'static str,
        /// What the SDK said, with its causes.
        message: String,
    },
    /// Some messages of a batch were not sent.
    #[error("SQS queue `{queue}`: {failed} of a batch of {of} messages were not sent: {first}")]
    BatchEntries {
        /// The queue's URL.
        queue: String,
        /// How many failed.
        failed: usize,
        /// Of how many.
        of: usize,
        /// The first failure's code and message.
        first: String,
    },
    /// A received message does not hold a job.
    #[error("SQS queue `{queue}`: message {message_id} is not a job: {reason}")]
    NotAJob {
        /// The queue's URL.
        queue: String,
        /// The message's id.
        message_id: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// An SQS standard queue of jobs.
#[derive(Clone)]
pub struct SqsQueue {
    client: Client,
    url: String,
    max_delay: Duration,
    clock: Arc<dyn Clock>,
}

impl SqsQueue {
    /// The queue at `url`; `clock` tells how long a job has to wait.
    pub fn new(client: Client, url: impl Into<String>, clock: Arc<dyn Clock>) -> Self {
        Self {
            client,
            url: url.into(),
            max_delay: MAX_DELAY,
            clock,
        }
    }

    /// Holds jobs back at most `bound` (never more than [`MAX_DELAY`]): tests use a short one
    /// to see long waits carried on.
    #[must_use]
    pub fn with_max_delay(mut self, bound: Duration) -> Self {
        self.max_delay = bound.min(MAX_DELAY);
        self
    }

    fn failed<E>(&self, operation: &'static str, error: SdkError<E>) -> QueueError
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        let code = error
            .as_service_error()
            .and_then(|e| e.code())
            .unwrap_or("");
        if STALE.contains(&code) {
            return QueueError::StaleReceipt;
        }
        let refused = REFUSED.contains(&code);
        let error = SqsError::Call {
            queue: self.url.clone(),
            operation,
            message: DisplayErrorContext(error).to_string(),
        };
        if refused {
            QueueError::Refused(Box::new(error))
        } else {
            QueueError::Unavailable(Box::new(error))
        }
    }

    fn not_a_job(&self, message_id: Option<&str>, reason: String) -> QueueError {
        QueueError::Refused(Box::new(SqsError::NotAJob {
            queue: self.url.clone(),
            message_id: message_id.unwrap_or("?").to_owned(),
            reason,
        }))
    }

    /// The whole seconds until `due_at`, rounded up, within the bound.
    fn delay_seconds(&self, due_at: Timestamp) -> i32 {
        let wait = (due_at - self.clock.now())
            .to_std()
            .unwrap_or(Duration::ZERO);
        seconds(wait, self.max_delay)
    }
}

/// `duration` in whole seconds, rounded up, at most `max`.
fn seconds(duration: Duration, max: Duration) -> i32 {
    let secs = duration.min(max).as_nanos().div_ceil(1_000_000_000);
    i32::try_from(secs).unwrap_or(i32::MAX)
}

/// Creates the queue `name` (or finds it) and returns its URL, as SQS reports it.
pub async fn create_queue(client: &Client, name: &str) -> Result<String, SqsError> {
    let call = |operation, error: String| SqsError::Call {
        queue: name.to_owned(),
        operation,
        message: error,
    };
    let created = client
        .create_queue()
        .queue_name(name)
        .send()
        .await
        .map_err(|e| call("CreateQueue", DisplayErrorContext(e).to_string()))?;
    match created.queue_url() {
        Some(url) => Ok(url.to_owned()),
        None => client
            .get_queue_url()
            .queue_name(name)
            .send()
            .await
            .map_err(|e| call("GetQueueUrl", DisplayErrorContext(e).to_string()))?
            .queue_url()
            .map(str::to_owned)
            .ok_or_else(|| call("GetQueueUrl", "no URL in the answer".into())),
    }
}

#[async_trait]
impl SendJobs for SqsQueue {
    fn max_delay(&self) -> Option<Duration> {
        Some(self.max_delay)
    }

    async fn send(&self, jobs: Vec<Job>) -> Result<(), QueueError> {
        for batch in jobs.chunks(MAX_BATCH) {
            let mut entries = Vec::with_capacity(batch.len());
            for (index, job) in batch.iter().enumerate() {
                let body = job
                    .to_message()
                    .map_err(|e| QueueError::Refused(Box::new(e)))?;
                let entry = SendMessageBatchRequestEntry::builder()
                    .id(index.to_string())
                    .message_body(body)
                    .delay_seconds(self.delay_seconds(job.due_at))
                    .build()
                    .map_err(|e| QueueError::Refused(Box::new(e)))?;
                entries.push(entry);
            }
            let sent = self
                .client
                .send_message_batch()
                .queue_url(&self.url)
                .set_entries(Some(entries))
                .send()
                .await
                .map_err(|e| self.failed("SendMessageBatch", e))?;
            if let Some(first) = sent.failed().first() {
                let error = SqsError::BatchEntries {
                    queue: self.url.clone(),
                    failed: sent.failed().len(),
                    of: batch.len(),
                    first: format!("{}: {}", first.code(), first.message().unwrap_or("")),
                };
                // SQS says whether the sender is at fault: then sending again will not help.
                return Err(if sent.failed().iter().any(|f| f.sender_fault()) {
                    QueueError::Refused(Box::new(error))
                } else {
                    QueueError::Unavailable(Box::new(error))
                });
            }
        }
        Ok(())
    }
}

#[async_trait]
impl ReceiveJobs for SqsQueue {
    async fn receive(
        &self,
        visibility: Duration,
        wait: Duration,
    ) -> Result<Option<Delivery>, QueueError> {
        let received = self
            .client
            .receive_message()
            .queue_url(&self.url)
            .max_number_of_messages(1)
            .visibility_timeout(seconds(visibility, MAX_VISIBILITY))
            .wait_time_seconds(seconds(wait, MAX_WAIT))
            .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
            .send()
            .await
            .map_err(|e| self.failed("ReceiveMessage", e))?;
        let Some(message) = received.messages().first() else {
            return Ok(None);
        };
        let id = message.message_id();
        let receipt = message
            .receipt_handle()
            .ok_or_else(|| self.not_a_job(id, "no receipt handle".into()))?;
        let job = Job::from_message(message.body().unwrap_or(""))
            .map_err(|e| self.not_a_job(id, e.to_string()))?;
        let receive_count = message
            .attributes()
            .and_then(|a| a.get(&MessageSystemAttributeName::ApproximateReceiveCount))
            .and_then(|count| count.parse().ok())
            .ok_or_else(|| self.not_a_job(id, "no ApproximateReceiveCount".into()))?;
        Ok(Some(Delivery {
            job,
            receive_count,
            receipt: Receipt::new(receipt),
        }))
    }

    async fn extend(&self, receipt: &Receipt, visibility: Duration) -> Result<(), QueueError> {
        self.client
            .change_message_visibility()
            .queue_url(&self.url)
            .receipt_handle(receipt.handle())
            .visibility_timeout(seconds(visibility, MAX_VISIBILITY))
            .send()
            .await
            .map_err(|e| self.failed("ChangeMessageVisibility", e))?;
        Ok(())
    }

    async fn ack(&self, receipt: &Receipt) -> Result<(), QueueError> {
        self.client
            .delete_message()
            .queue_url(&self.url)
            .receipt_handle(receipt.handle())
            .send()
            .await
            .map_err(|e| self.failed("DeleteMessage", e))?;
        Ok(())
    }

    async fn requeue(&self, delivery: &Delivery) -> Result<(), QueueError> {
        self.send(vec![delivery.job.clone()]).await?;
        self.ack(&delivery.receipt).await
    }
}

/// The runner's Lambda trigger changes its messages' visibility by the receipt handles Lambda
/// hands it: the same `ChangeMessageVisibility` as [`ReceiveJobs::extend`].
#[cfg(feature = "runner")]
#[async_trait]
impl ChangeVisibility for SqsQueue {
    async fn change_visibility(
        &self,
        receipt_handle: &str,
        visibility: Duration,
    ) -> Result<(), QueueError> {
        self.extend(&Receipt::new(receipt_handle), visibility).await
    }
}
