//! The job queue: step jobs for the runners and timers for the orchestrator.
//!
//! The contract, which every adapter keeps (the SQLite queue, SQS standard queues) and
//! [`crate::queue_contract`] tests:
//!
//! - **At least once.** A sent job is delivered at least once; it may be delivered more than
//!   once (SQS keeps copies on several servers). A queue may de-duplicate jobs by key while one
//!   is queued (the SQLite queue does), but no caller may rely on it: senders send each decision
//!   once, and consumers are idempotent on what the job names (the runner on deployment, step
//!   and attempt: a duplicate of a running attempt waits for its lease, see `overture_runner`).
//! - **Unordered.** Jobs come out in no particular order, whatever their due times.
//! - **Not before due, delays bounded.** A job is not delivered before its due time, unless it
//!   is due beyond [`SendJobs::max_delay`] (SQS: 15 minutes): it is then delivered at the bound,
//!   early, carrying its due time. The consumer hands such a delivery back with
//!   [`take_due`], which re-queues it for the rest of its wait ([`ReceiveJobs::requeue`]), so
//!   no job is ever handled before it is due.
//! - **Visibility.** A received job is hidden from other receivers for the visibility asked
//!   for; its worker extends that while it works ([`ReceiveJobs::extend`]). A job neither
//!   acknowledged nor extended in time comes back, its receive count one higher, and the old
//!   receipt may go stale.
//! - **Acknowledged, gone.** [`ReceiveJobs::ack`] deletes the job; a job is acknowledged only
//!   once its outcome is recorded in the log.

use std::time::Duration;

use async_trait::async_trait;
use overture_events::{DeploymentId, Timestamp};

/// A job to queue.
#[derive(Clone, Debug, PartialEq)]
pub struct Job {
    /// Names the job (for example `run/<deployment>/<step>/<attempt>`); unique per decision.
    pub key: String,
    /// The deployment it belongs to.
    pub deployment: DeploymentId,
    /// What the consumer needs, as JSON.
    pub body: serde_json::Value,
    /// It is not to be handled before this instant.
    pub due_at: Timestamp,
}

/// A job as a message body on a queue that carries text (SQS): JSON with the job's key,
/// deployment, due time and body, so a job delivered before it is due still says when it is.
#[derive(serde::Serialize, serde::Deserialize)]
struct Message {
    key: String,
    deployment: DeploymentId,
    due_at: Timestamp,
    body: serde_json::Value,
}

impl Job {
    /// The job as a message body.
    pub fn to_message(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string(&Message {
            key: self.key.clone(),
            deployment: self.deployment,
            due_at: self.due_at,
            body: self.body.clone(),
        })
    }

    /// Reads a message body of [`Job::to_message`] back.
    pub fn from_message(body: &str) -> Result<Self, serde_json::Error> {
        let Message {
            key,
            deployment,
            due_at,
            body,
        } = serde_json::from_str(body)?;
        Ok(Self {
            key,
            deployment,
            body,
            due_at,
        })
    }
}

/// A job handed to one worker, hidden from the others while its visibility lasts.
#[derive(Clone, Debug, PartialEq)]
pub struct Delivery {
    /// The job, its due time included (it may have come early: see [`take_due`]).
    pub job: Job,
    /// How many times it has been received, this time included (approximate on SQS).
    pub receive_count: u32,
    /// Proof of this receipt, for [`ReceiveJobs::extend`], [`ReceiveJobs::ack`] and
    /// [`ReceiveJobs::requeue`].
    pub receipt: Receipt,
}

/// One receipt of one job, as its queue identifies it (opaque to consumers).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Receipt(String);

impl Receipt {
    /// A receipt an adapter made.
    pub fn new(handle: impl Into<String>) -> Self {
        Self(handle.into())
    }

    /// The adapter's handle.
    pub fn handle(&self) -> &str {
        &self.0
    }
}

/// Why the queue refused or failed a call.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    /// The receipt is stale: its job was acknowledged, or received again after the receipt's
    /// visibility ended. Trying again will not help; the job's current holder acts on it.
    #[error("the receipt is stale: its job was acknowledged or received again")]
    StaleReceipt,
    /// The queue will not take the job or cannot read one it holds (too large, not a job):
    /// trying again will not help.
    #[error("the queue refused: {0}")]
    Refused(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The queue could not be reached or failed; trying again later may succeed.
    #[error("the queue failed: {0}")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl QueueError {
    /// Whether trying the same call again later may succeed.
    pub const fn is_retryable(&self) -> bool {
        matches!(self, Self::Unavailable(_))
    }
}

/// Queues jobs.
#[async_trait]
pub trait SendJobs: Send + Sync {
    /// The longest the queue holds a job back; `None` when it holds one back as long as asked.
    fn max_delay(&self) -> Option<Duration>;

    /// Queues every job, each to be delivered at least once, not before its due time (or, due
    /// beyond [`SendJobs::max_delay`], at that bound). On an error, some may be queued.
    async fn send(&self, jobs: Vec<Job>) -> Result<(), QueueError>;
}

/// Hands jobs to workers.
#[async_trait]
pub trait ReceiveJobs: Send + Sync {
    /// Waits about `wait` (SQS: rounded up to whole seconds, at most 20) for a job to be
    /// deliverable and hides it for `visibility`; `None` when none was. It may return sooner
    /// with nothing.
    async fn receive(
        &self,
        visibility: Duration,
        wait: Duration,
    ) -> Result<Option<Delivery>, QueueError>;

    /// Keeps a received job hidden for `visibility` from now (a worker's heartbeat).
    async fn extend(&self, receipt: &Receipt, visibility: Duration) -> Result<(), QueueError>;

    /// Deletes a received job: its outcome is recorded.
    async fn ack(&self, receipt: &Receipt) -> Result<(), QueueError>;

    /// Hands back a job delivered before its due time, to be delivered again when due (or at
    /// the delay bound, and then again), and spends this receipt. It is never lost: on an
    /// error the delivery comes back when its visibility ends, and the job may then be queued
    /// twice (SQS sends the copy before it deletes the delivery).
    async fn requeue(&self, delivery: &Delivery) -> Result<(), QueueError>;
}

/// The consumer's first step with every delivery: a job that is due comes back to be handled,
/// and one that came early (due beyond the queue's delay bound) is re-queued for the rest of
/// its wait and yields `None`. This is where long waits are carried past SQS's 15 minutes.
pub async fn take_due<Q: ReceiveJobs + ?Sized>(
    queue: &Q,
    delivery: Delivery,
    now: Timestamp,
) -> Result<Option<Delivery>, QueueError> {
    if delivery.job.due_at <= now {
        return Ok(Some(delivery));
    }
    queue.requeue(&delivery).await?;
    Ok(None)
}

/// The same first step for a consumer whose deliveries are deleted once it returns (a Lambda
/// trigger on SQS, which acknowledges what its handler does not report failed): a job that is
/// due comes back to be handled, and one that came early is sent again for the rest of its wait
/// and yields `None`, so its early delivery may be acknowledged. A fresh copy starts its receive
/// count afresh: a long wait, carried in hops, never counts towards `maxReceiveCount`.
pub async fn due_or_sent_on<Q: SendJobs + ?Sized>(
    queue: &Q,
    job: Job,
    now: Timestamp,
) -> Result<Option<Job>, QueueError> {
    if job.due_at <= now {
        return Ok(Some(job));
    }
    queue.send(vec![job]).await?;
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A body as `SqsQueue` wrote it before the shape moved here (the job's body a JSON value,
    /// so its keys sorted): queued jobs must still read, and new ones be written alike.
    const SENT: &str = r#"{"key":"run/01a20800-0000-7000-8000-000000000001/build/1","deployment":"01a20800-0000-7000-8000-000000000001","due_at":"2026-11-23T13:00:00Z","body":{"attempt":1,"deployment":"01a20800-0000-7000-8000-000000000001","kind":"run_attempt","step":"build"}}"#;

    #[test]
    fn a_message_body_reads_back_as_the_job_it_was_written_from() {
        let job = Job::from_message(SENT).expect("a job");
        assert_eq!(job.key, "run/01a20800-0000-7000-8000-000000000001/build/1");
        assert_eq!(job.due_at.to_rfc3339(), "2026-11-23T13:00:00+00:00");
        assert_eq!(job.body["step"], "build");
        let written = job.to_message().expect("written");
        assert_eq!(Job::from_message(&written).expect("read back"), job);
        assert_eq!(written, SENT, "the same text, field for field");
    }
}
