//! The contract every job queue keeps ([`crate::queue`]), as tests that each adapter's suite
//! runs against a real queue with [`queue_contract_tests!`](crate::queue_contract_tests).
//!
//! Each test takes a queue of its own, empty. The tests run on the real clock, with waits of a
//! few seconds at most: a remote queue (SQS) keeps its own time. Every job has a key of its
//! own, so a queue that de-duplicates by key passes as well as one that does not.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use overture_events::{DeploymentId, Timestamp};
use uuid::Uuid;

use crate::queue::{take_due, Delivery, Job, ReceiveJobs, SendJobs};

/// A queue adapter under test.
pub trait Queue: SendJobs + ReceiveJobs + 'static {}
impl<T: SendJobs + ReceiveJobs + 'static> Queue for T {}

/// Generates one `#[tokio::test]` per contract test. `$queue` is an expression (evaluated anew
/// in each test) of a future yielding an empty queue.
#[macro_export]
macro_rules! queue_contract_tests {
    ($queue:expr) => {
        $crate::queue_contract_tests!(@each $queue;
            a_due_job_is_delivered_as_it_was_sent,
            a_job_is_not_delivered_before_it_is_due,
            a_received_job_is_hidden_until_its_visibility_ends_then_comes_back,
            extending_keeps_a_received_job_hidden,
            an_acknowledged_job_is_not_delivered_again,
            every_job_of_a_large_batch_is_delivered,
            a_job_due_beyond_the_delay_bound_is_requeued_until_due,
        );
    };
    (@each $queue:expr; $($test:ident),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $test() {
                let queue = $queue.await;
                $crate::queue_contract::$test(&queue).await;
            }
        )*
    };
}

/// Long enough that no test sees a job come back unless it waits for it.
const HIDDEN: Duration = Duration::from_secs(30);

/// Now, to the millisecond (queues keep due times to the millisecond at least).
fn now() -> Timestamp {
    let now = chrono::Utc::now();
    Timestamp::from_timestamp_millis(now.timestamp_millis()).unwrap_or(now)
}

fn later(by: Duration) -> Timestamp {
    now() + chrono::TimeDelta::from_std(by).unwrap_or_default()
}

fn job(due_at: Timestamp) -> Job {
    let key = format!("contract/{}", Uuid::now_v7());
    Job {
        body: serde_json::json!({ "kind": "contract", "key": key, "nested": { "n": [1, 2, 3] } }),
        key,
        deployment: DeploymentId::from_uuid(Uuid::now_v7()),
        due_at,
    }
}

/// Receives until a job comes or `within` has passed.
async fn receive_within<Q: Queue>(
    queue: &Q,
    visibility: Duration,
    within: Duration,
) -> Option<Delivery> {
    let start = Instant::now();
    loop {
        let left = within.saturating_sub(start.elapsed());
        let received = queue
            .receive(visibility, left.min(Duration::from_secs(1)))
            .await
            .expect("the queue receives");
        if received.is_some() || left.is_zero() {
            return received;
        }
    }
}

async fn send<Q: Queue>(queue: &Q, jobs: Vec<Job>) {
    queue.send(jobs).await.expect("the queue takes the jobs");
}

/// A job that is due comes out with its key, deployment, body and due time as sent, received
/// once.
pub async fn a_due_job_is_delivered_as_it_was_sent<Q: Queue>(queue: &Q) {
    let sent = job(now());
    send(queue, vec![sent.clone()]).await;
    let delivery = receive_within(queue, HIDDEN, Duration::from_secs(5))
        .await
        .expect("a due job is delivered");
    assert_eq!(delivery.job, sent);
    assert_eq!(delivery.receive_count, 1);
}

/// A job due in two seconds is not received before then, and is received after.
pub async fn a_job_is_not_delivered_before_it_is_due<Q: Queue>(queue: &Q) {
    let sent = job(later(Duration::from_secs(2)));
    send(queue, vec![sent.clone()]).await;
    let delivery = receive_within(queue, HIDDEN, Duration::from_secs(8))
        .await
        .expect("the job is delivered once due");
    let received_at = now();
    assert!(
        received_at >= sent.due_at,
        "delivered at {received_at}, before its due time {}",
        sent.due_at
    );
    assert_eq!(delivery.job, sent);
}

/// While its visibility lasts a received job is hidden; then it comes back, received twice.
pub async fn a_received_job_is_hidden_until_its_visibility_ends_then_comes_back<Q: Queue>(
    queue: &Q,
) {
    let sent = job(now());
    send(queue, vec![sent.clone()]).await;
    let asked = Instant::now();
    let first = receive_within(queue, Duration::from_secs(1), Duration::from_secs(5))
        .await
        .expect("delivered");
    let hidden = queue
        .receive(HIDDEN, Duration::ZERO)
        .await
        .expect("the queue receives");
    assert_eq!(hidden, None, "a received job is hidden from others");
    let again = receive_within(queue, HIDDEN, Duration::from_secs(6))
        .await
        .expect("a job not acknowledged comes back");
    assert!(
        asked.elapsed() >= Duration::from_secs(1),
        "back after {:?}, within its visibility",
        asked.elapsed()
    );
    assert_eq!(again.job, sent);
    assert_eq!(again.receive_count, first.receive_count + 1);
}

/// A worker's heartbeat keeps its job hidden past the visibility it was received with, and
/// its receipt stays good for the acknowledgement.
pub async fn extending_keeps_a_received_job_hidden<Q: Queue>(queue: &Q) {
    send(queue, vec![job(now())]).await;
    let held = receive_within(queue, Duration::from_secs(1), Duration::from_secs(5))
        .await
        .expect("delivered");
    queue
        .extend(&held.receipt, Duration::from_secs(5))
        .await
        .expect("the holder extends");
    let meanwhile = receive_within(queue, HIDDEN, Duration::from_secs(2)).await;
    assert_eq!(meanwhile, None, "an extended job stays hidden");
    queue
        .ack(&held.receipt)
        .await
        .expect("the receipt is still good");
}

/// An acknowledged job is gone.
pub async fn an_acknowledged_job_is_not_delivered_again<Q: Queue>(queue: &Q) {
    send(queue, vec![job(now())]).await;
    let held = receive_within(queue, Duration::from_secs(1), Duration::from_secs(5))
        .await
        .expect("delivered");
    queue.ack(&held.receipt).await.expect("acknowledged");
    let after = receive_within(queue, HIDDEN, Duration::from_secs(2)).await;
    assert_eq!(after, None, "an acknowledged job came back");
}

/// More jobs than one request carries (SQS: ten) are all delivered, in whatever order.
pub async fn every_job_of_a_large_batch_is_delivered<Q: Queue>(queue: &Q) {
    let jobs: Vec<Job> = (0..23).map(|_| job(now())).collect();
    let sent: BTreeSet<String> = jobs.iter().map(|j| j.key.clone()).collect();
    send(queue, jobs).await;
    let mut received = BTreeSet::new();
    while received.len() < sent.len() {
        let Some(delivery) = receive_within(queue, HIDDEN, Duration::from_secs(5)).await else {
            break;
        };
        queue.ack(&delivery.receipt).await.expect("acknowledged");
        received.insert(delivery.job.key);
    }
    assert_eq!(received, sent);
}

/// A job due beyond the queue's delay bound may come early, but the consumer's
/// [`take_due`] re-queues it until it is due, and never hands it out before.
pub async fn a_job_due_beyond_the_delay_bound_is_requeued_until_due<Q: Queue>(queue: &Q) {
    let wait = Duration::from_secs(3);
    let sent = job(later(wait));
    send(queue, vec![sent.clone()]).await;
    let start = Instant::now();
    let mut early = 0;
    let handled = loop {
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "the job never came due"
        );
        let Some(delivery) = receive_within(queue, HIDDEN, Duration::from_secs(2)).await else {
            continue;
        };
        assert_eq!(delivery.job.key, sent.key);
        let at = now();
        match take_due(queue, delivery, at).await.expect("re-queued") {
            Some(due) => break (at, due),
            None => early += 1,
        }
    };
    let (at, delivery) = handled;
    assert!(at >= sent.due_at, "handled at {at}, before {}", sent.due_at);
    assert_eq!(delivery.job, sent);
    queue.ack(&delivery.receipt).await.expect("acknowledged");
    match queue.max_delay() {
        Some(bound) if bound < wait => assert!(early > 0, "a bound of {bound:?} held it {wait:?}"),
        _ => assert_eq!(early, 0, "delivered early with no bound in the way"),
    }
    let after = receive_within(queue, HIDDEN, Duration::from_secs(2)).await;
    assert_eq!(after, None, "a re-queued copy is left over");
}
