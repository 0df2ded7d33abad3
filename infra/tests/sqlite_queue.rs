//! The SQLite job queue against real files in a temporary directory.
//!
//! Time is a value handed to each call: tests move it by building later instants, never by
//! sleeping.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use chrono::TimeDelta;
use overture_domain::testing::t;
use overture_events::{DeploymentId, Timestamp};
use overture_infra::sqlite::{Database, JobQueue, NewJob, QueueError, ReceivedJob};
use serde_json::json;
use tokio::sync::Barrier;
use uuid::Uuid;

const LEASE: Duration = Duration::from_secs(30);

fn db_path(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("overture.db")
}

async fn open_queue(path: &Path) -> JobQueue {
    JobQueue::new(Database::open(path).await.expect("database opens"))
}

/// A queue in a database of its own, in a directory that lasts as long as the test holds it.
async fn new_queue() -> (tempfile::TempDir, JobQueue) {
    let dir = tempfile::tempdir().expect("tempdir");
    let queue = open_queue(&db_path(&dir)).await;
    (dir, queue)
}

/// The tests' epoch, the test kit's: a whole millisecond, as instants are stored in
/// milliseconds.
fn t0() -> Timestamp {
    t(0)
}

fn at_ms(offset: i64) -> Timestamp {
    t0() + TimeDelta::milliseconds(offset)
}

fn deployment(n: u128) -> DeploymentId {
    DeploymentId::from_uuid(Uuid::from_u128(n))
}

fn job(key: &str, deployment_id: DeploymentId, due_at: Timestamp) -> NewJob {
    NewJob {
        key: key.to_owned(),
        deployment: deployment_id,
        body: json!({ "key": key }),
        due_at,
    }
}

/// Queues the deployment's job `key` (its body names the key), due at `due_at`; whether it
/// was queued (no job of that key was).
async fn enqueue(
    queue: &JobQueue,
    key: &str,
    deployment_id: DeploymentId,
    due_at: Timestamp,
) -> bool {
    queue
        .enqueue(job(key, deployment_id, due_at))
        .await
        .expect("enqueue")
}

async fn receive(queue: &JobQueue, now: Timestamp) -> Option<ReceivedJob> {
    queue.receive(now, LEASE, None).await.expect("receive")
}

/// How many jobs are queued, of any deployment.
async fn pending(queue: &JobQueue) -> u64 {
    queue.pending(None).await.expect("pending")
}

#[tokio::test]
async fn a_delayed_job_is_received_at_its_due_time_and_not_before() {
    let (_dir, queue) = new_queue().await;
    assert!(enqueue(&queue, "later", deployment(1), at_ms(10_000)).await);
    assert!(enqueue(&queue, "sooner", deployment(1), at_ms(5_000)).await);

    assert_eq!(receive(&queue, at_ms(4_999)).await, None);
    let first = receive(&queue, at_ms(5_000)).await.expect("sooner is due");
    assert_eq!(first.key, "sooner");
    assert_eq!(receive(&queue, at_ms(9_999)).await, None);
    let second = receive(&queue, at_ms(10_001)).await.expect("later is due");
    assert_eq!(
        (
            second.key.as_str(),
            second.deployment,
            second.body,
            second.receive_count
        ),
        ("later", deployment(1), json!({ "key": "later" }), 1)
    );
}

#[tokio::test]
async fn the_earliest_due_job_comes_first_whatever_the_enqueue_order() {
    let (_dir, queue) = new_queue().await;
    for (key, due) in [("third", 3_000), ("first", 1_000), ("second", 2_000)] {
        enqueue(&queue, key, deployment(1), at_ms(due)).await;
    }

    let mut order = Vec::new();
    while let Some(held) = receive(&queue, at_ms(5_000)).await {
        order.push(held.key);
    }
    assert_eq!(order, ["first", "second", "third"]);
}

#[tokio::test]
async fn an_unacked_job_comes_back_after_its_visibility_timeout() {
    let (_dir, queue) = new_queue().await;
    enqueue(&queue, "j", deployment(1), t0()).await;

    let first = receive(&queue, t0()).await.expect("due");
    assert_eq!(first.receive_count, 1);
    assert_eq!(
        receive(&queue, at_ms(29_999)).await,
        None,
        "still in flight"
    );
    let second = receive(&queue, at_ms(30_000)).await.expect("lease over");
    assert_eq!((second.key.as_str(), second.receive_count), ("j", 2));

    // The first holder's lease ended and the job went to someone else.
    let stale = queue.ack(&first.receipt).await.expect_err("stale ack");
    assert!(matches!(stale, QueueError::StaleReceipt), "{stale:?}");
    let stale = queue
        .extend(&first.receipt, at_ms(90_000))
        .await
        .expect_err("stale extend");
    assert!(matches!(stale, QueueError::StaleReceipt), "{stale:?}");
    assert_eq!(pending(&queue).await, 1);

    queue
        .ack(&second.receipt)
        .await
        .expect("current receipt acks");
    assert_eq!(pending(&queue).await, 0);
}

#[tokio::test]
async fn extend_pushes_redelivery_back() {
    let (_dir, queue) = new_queue().await;
    enqueue(&queue, "j", deployment(1), t0()).await;

    let held = receive(&queue, t0()).await.expect("due");
    queue
        .extend(&held.receipt, at_ms(60_000))
        .await
        .expect("heartbeat");
    assert_eq!(
        receive(&queue, at_ms(30_000)).await,
        None,
        "extended past the lease"
    );
    assert_eq!(receive(&queue, at_ms(59_999)).await, None);
    let again = receive(&queue, at_ms(60_000))
        .await
        .expect("extension over");
    assert_eq!(again.receive_count, 2);
}

#[tokio::test]
async fn ack_removes_the_job() {
    let (_dir, queue) = new_queue().await;
    enqueue(&queue, "j", deployment(1), t0()).await;

    let held = receive(&queue, t0()).await.expect("due");
    queue.ack(&held.receipt).await.expect("ack");
    assert_eq!(receive(&queue, at_ms(3_600_000)).await, None);
    assert_eq!(pending(&queue).await, 0);
    assert_eq!(queue.next_wake(None).await.expect("next wake"), None);
    let twice = queue.ack(&held.receipt).await.expect_err("already acked");
    assert!(matches!(twice, QueueError::StaleReceipt), "{twice:?}");
}

#[tokio::test]
async fn enqueue_is_idempotent_by_key_while_the_job_is_queued() {
    let (_dir, queue) = new_queue().await;
    assert!(enqueue(&queue, "j", deployment(1), t0()).await);

    let mut duplicate = job("j", deployment(2), at_ms(-1_000));
    duplicate.body = json!("second");
    assert!(!queue.enqueue(duplicate).await.expect("enqueue"));
    assert_eq!(pending(&queue).await, 1);

    let held = receive(&queue, t0()).await.expect("due");
    assert_eq!(
        (held.deployment, held.body),
        (deployment(1), json!({ "key": "j" }))
    );
    // Once acked, the key is free again.
    queue.ack(&held.receipt).await.expect("ack");
    assert!(enqueue(&queue, "j", deployment(1), t0()).await);
}

#[tokio::test]
async fn only_filters_by_deployment() {
    let (_dir, queue) = new_queue().await;
    let (mine, other) = (deployment(1), deployment(2));
    enqueue(&queue, "other-early", other, at_ms(-1_000)).await;
    enqueue(&queue, "mine", mine, at_ms(500)).await;

    assert_eq!(queue.pending(Some(mine)).await.expect("pending"), 1);
    assert_eq!(pending(&queue).await, 2);
    assert_eq!(
        queue.next_wake(Some(&[mine])).await.expect("wake"),
        Some(at_ms(500))
    );
    assert_eq!(
        queue.next_wake(None).await.expect("wake"),
        Some(at_ms(-1_000))
    );

    assert_eq!(
        queue
            .receive(t0(), LEASE, Some(&[mine]))
            .await
            .expect("receive"),
        None
    );
    let held = queue
        .receive(at_ms(500), LEASE, Some(&[mine]))
        .await
        .expect("receive")
        .expect("mine is due");
    assert_eq!((held.key.as_str(), held.deployment), ("mine", mine));
    let rest = receive(&queue, at_ms(500)).await.expect("other is due");
    assert_eq!(rest.key, "other-early");
}

#[tokio::test]
async fn jobs_and_their_leases_survive_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = db_path(&dir);
    let held = {
        let queue = open_queue(&path).await;
        enqueue(&queue, "held", deployment(1), t0()).await;
        enqueue(&queue, "waiting", deployment(2), at_ms(1_000)).await;
        receive(&queue, t0()).await.expect("held is due")
    };

    let queue = open_queue(&path).await;
    assert_eq!(pending(&queue).await, 2);
    let waiting = receive(&queue, at_ms(1_000)).await.expect("waiting is due");
    assert_eq!(
        (waiting.key.as_str(), waiting.deployment, waiting.body),
        ("waiting", deployment(2), json!({ "key": "waiting" }))
    );
    assert_eq!(
        receive(&queue, at_ms(29_999)).await,
        None,
        "the lease survived too"
    );
    // A receipt taken before the reopen still acks.
    queue.ack(&held.receipt).await.expect("ack");
    assert_eq!(pending(&queue).await, 1);
}

#[tokio::test]
async fn release_in_flight_makes_held_jobs_receivable_at_once() {
    let (_dir, queue) = new_queue().await;
    enqueue(&queue, "a", deployment(1), t0()).await;
    enqueue(&queue, "b", deployment(1), t0()).await;
    enqueue(&queue, "later", deployment(1), at_ms(60_000)).await;
    let hour = Duration::from_secs(3_600);
    queue
        .receive(t0(), hour, None)
        .await
        .expect("receive")
        .expect("a");
    queue
        .receive(t0(), hour, None)
        .await
        .expect("receive")
        .expect("b");
    assert_eq!(receive(&queue, at_ms(1)).await, None);

    assert_eq!(queue.release_in_flight(at_ms(1)).await.expect("release"), 2);

    let mut again = Vec::new();
    while let Some(held) = receive(&queue, at_ms(1)).await {
        again.push((held.key, held.receive_count));
    }
    again.sort();
    // Only the held jobs: the one not yet due was neither counted nor handed out.
    assert_eq!(again, [("a".to_owned(), 2), ("b".to_owned(), 2)]);
}

#[tokio::test]
async fn next_wake_is_the_earliest_instant_a_job_becomes_receivable() {
    let (_dir, queue) = new_queue().await;
    assert_eq!(queue.next_wake(None).await.expect("wake"), None);

    enqueue(&queue, "ten", deployment(1), at_ms(10_000)).await;
    assert_eq!(
        queue.next_wake(None).await.expect("wake"),
        Some(at_ms(10_000))
    );
    enqueue(&queue, "five", deployment(1), at_ms(5_000)).await;
    assert_eq!(
        queue.next_wake(None).await.expect("wake"),
        Some(at_ms(5_000))
    );

    // In flight until 35 s, so the job due at 10 s comes first.
    receive(&queue, at_ms(5_000)).await.expect("five is due");
    assert_eq!(
        queue.next_wake(None).await.expect("wake"),
        Some(at_ms(10_000))
    );
    receive(&queue, at_ms(12_000)).await.expect("ten is due");
    assert_eq!(
        queue.next_wake(None).await.expect("wake"),
        Some(at_ms(35_000))
    );
}

// Job ids are never reused: without that, an old receipt (id, receive_count) could match a
// new job that took the id of an acked one.
#[tokio::test]
async fn a_stale_receipt_never_matches_a_later_job() {
    let (_dir, queue) = new_queue().await;
    enqueue(&queue, "old", deployment(1), t0()).await;
    let lost = receive(&queue, t0()).await.expect("due");
    let redelivered = receive(&queue, at_ms(30_000)).await.expect("lease over");
    queue.ack(&redelivered.receipt).await.expect("ack");

    enqueue(&queue, "new", deployment(1), t0()).await;
    let fresh = receive(&queue, at_ms(30_000)).await.expect("due");
    assert_eq!(fresh.receive_count, lost.receive_count);

    let stale = queue
        .ack(&lost.receipt)
        .await
        .expect_err("receipt of another job");
    assert!(matches!(stale, QueueError::StaleReceipt), "{stale:?}");
    assert_eq!(pending(&queue).await, 1);
    queue.ack(&fresh.receipt).await.expect("ack");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn concurrent_receivers_on_two_handles_get_each_job_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let first = open_queue(&db_path(&dir)).await;
    let second = open_queue(&db_path(&dir)).await;
    for n in 0..40 {
        enqueue(
            &first,
            &format!("job-{n}"),
            deployment(n % 3),
            at_ms(n as i64),
        )
        .await;
    }

    let barrier = Arc::new(Barrier::new(8));
    let workers: Vec<_> = (0..8)
        .map(|worker| {
            let queue = if worker % 2 == 0 {
                first.clone()
            } else {
                second.clone()
            };
            let barrier = Arc::clone(&barrier);
            tokio::spawn(async move {
                barrier.wait().await;
                let mut keys = Vec::new();
                while let Some(held) = queue
                    .receive(at_ms(100), LEASE, None)
                    .await
                    .expect("receive")
                {
                    keys.push(held.key);
                }
                keys
            })
        })
        .collect();

    let mut received = BTreeMap::new();
    for worker in workers {
        for key in worker.await.expect("worker ran") {
            *received.entry(key).or_insert(0) += 1;
        }
    }
    assert_eq!(received.len(), 40, "every job was received");
    assert!(received.values().all(|&count| count == 1), "{received:?}");
}

#[tokio::test]
async fn only_takes_jobs_of_any_of_several_deployments() {
    let (_dir, queue) = new_queue().await;
    let (first, second, elsewhere) = (deployment(1), deployment(2), deployment(3));
    for (key, id) in [
        ("elsewhere", elsewhere),
        ("first", first),
        ("second", second),
    ] {
        enqueue(&queue, key, id, at_ms(-1_000)).await;
    }
    let ours = [first, second];
    let mut taken = Vec::new();
    while let Some(held) = queue
        .receive(t0(), LEASE, Some(&ours))
        .await
        .expect("receive")
    {
        taken.push(held.key);
    }
    taken.sort();
    assert_eq!(taken, ["first", "second"]);
    assert_eq!(
        queue.next_wake(Some(&ours)).await.expect("wake"),
        Some(t0() + chrono::TimeDelta::from_std(LEASE).expect("lease"))
    );
}

#[tokio::test]
async fn receiving_up_to_a_number_takes_the_earliest_due_and_hides_them() {
    let (_dir, queue) = new_queue().await;
    for (key, due) in [
        ("third", -100),
        ("first", -300),
        ("later", 1_000),
        ("second", -200),
    ] {
        enqueue(&queue, key, deployment(1), at_ms(due)).await;
    }
    let taken = queue
        .receive_up_to(2, t0(), LEASE, None)
        .await
        .expect("receive");
    let keys: Vec<&str> = taken.iter().map(|job| job.key.as_str()).collect();
    assert_eq!(keys, ["first", "second"]);
    let rest = queue
        .receive_up_to(10, t0(), LEASE, None)
        .await
        .expect("receive");
    let keys: Vec<&str> = rest.iter().map(|job| job.key.as_str()).collect();
    assert_eq!(keys, ["third"], "the taken are hidden, the later not due");
}

#[tokio::test]
async fn jobs_queued_as_received_are_hidden_and_acked_with_their_receipts() {
    let (_dir, queue) = new_queue().await;
    let taken = queue
        .enqueue_received(vec![job("now", deployment(1), t0())], 4, t0(), LEASE)
        .await
        .expect("enqueue");
    assert_eq!(taken.len(), 1);
    assert_eq!((taken[0].key.as_str(), taken[0].receive_count), ("now", 1));

    assert_eq!(receive(&queue, t0()).await, None, "no one else gets it");
    queue
        .ack(&taken[0].receipt)
        .await
        .expect("its receipt acks it");
    assert_eq!(pending(&queue).await, 0);
}

#[tokio::test]
async fn queueing_as_received_takes_only_due_jobs_and_only_as_many_as_there_is_room_for() {
    let (_dir, queue) = new_queue().await;
    let jobs = vec![
        job("later", deployment(1), at_ms(1_000)),
        job("first", deployment(1), t0()),
        job("second", deployment(1), t0()),
    ];
    let taken = queue
        .enqueue_received(jobs, 1, t0(), LEASE)
        .await
        .expect("enqueue");
    let keys: Vec<&str> = taken.iter().map(|job| job.key.as_str()).collect();
    assert_eq!(keys, ["first"]);

    let rest = queue
        .receive_up_to(10, t0(), LEASE, None)
        .await
        .expect("receive");
    let keys: Vec<&str> = rest.iter().map(|job| job.key.as_str()).collect();
    assert_eq!(
        keys,
        ["second"],
        "the one without room waits to be received"
    );
    let later = receive(&queue, at_ms(1_000)).await.expect("due later");
    assert_eq!(later.key, "later");
}

#[tokio::test]
async fn a_job_already_queued_is_not_handed_out_again() {
    let (_dir, queue) = new_queue().await;
    enqueue(&queue, "once", deployment(1), t0()).await;
    let held = receive(&queue, t0())
        .await
        .expect("received by another worker");

    let taken = queue
        .enqueue_received(vec![job("once", deployment(1), t0())], 4, t0(), LEASE)
        .await
        .expect("enqueue");
    assert!(taken.is_empty(), "its worker has it already");
    queue
        .ack(&held.receipt)
        .await
        .expect("the first receipt still holds");
}

#[tokio::test]
async fn acking_several_receipts_at_once_deletes_only_the_fresh_ones() {
    let (_dir, queue) = new_queue().await;
    for key in ["a", "b", "c"] {
        enqueue(&queue, key, deployment(1), t0()).await;
    }
    let taken = queue
        .receive_up_to(3, t0(), LEASE, None)
        .await
        .expect("receive");
    let after_lease =
        t0() + TimeDelta::from_std(LEASE).expect("lease") + TimeDelta::milliseconds(1);
    let again = receive(&queue, after_lease)
        .await
        .expect("the first comes back once its lease is over");
    assert_eq!(again.key, "a");

    let acked = queue
        .ack_all(taken.iter().map(|job| job.receipt).collect())
        .await
        .expect("ack");
    assert_eq!(
        acked, 2,
        "the first's old receipt is stale and acks nothing"
    );
    assert_eq!(pending(&queue).await, 1);
    queue
        .ack(&again.receipt)
        .await
        .expect("its new receipt holds");
}

#[tokio::test]
async fn a_job_due_microseconds_ago_is_taken_at_once_and_one_due_microseconds_ahead_is_not() {
    let (_dir, queue) = new_queue().await;
    let now = t0() + TimeDelta::microseconds(500);
    let jobs = vec![
        job(
            "just-scheduled",
            deployment(1),
            t0() + TimeDelta::microseconds(300),
        ),
        job(
            "not-yet",
            deployment(1),
            t0() + TimeDelta::microseconds(700),
        ),
    ];
    let taken = queue
        .enqueue_received(jobs, 4, now, LEASE)
        .await
        .expect("enqueue");
    let keys: Vec<&str> = taken.iter().map(|job| job.key.as_str()).collect();
    assert_eq!(
        keys,
        ["just-scheduled"],
        "its stored due time rounds up, not its due time"
    );
}
