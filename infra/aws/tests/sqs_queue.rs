//! SQS queues against the local AWS emulator: the queue contract that the SQLite queue keeps
//! too, a wait beyond the delay bound carried on, and the orchestrator's jobs on SQS.

mod support;

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_sqs::Client;
use overture_aws::sqs::{create_queue, SqsQueue, SqsWork};
use overture_events::job::{Job, RunAttempt};
use overture_events::DeploymentId;
use overture_kit::queue::{take_due, ReceiveJobs};
use overture_kit::SystemClock;
use overture_orchestrator::queued::QueueOn;
use overture_orchestrator::{QueueWork, WaitingAttempt};

/// A new, empty queue of its own, with SQS's own delay bound.
async fn queue() -> SqsQueue {
    let config = overture_aws::config::for_endpoint(support::emulator(), "eu-west-1").await;
    let client = Client::new(&config);
    let name = format!("overture-jobs-{}", uuid::Uuid::now_v7());
    let url = create_queue(&client, &name).await.expect("the queue");
    SqsQueue::new(client, url, Arc::new(SystemClock))
}

overture_kit::queue_contract_tests!(queue());

#[tokio::test]
async fn a_wait_beyond_a_short_delay_bound_is_carried_on_until_due() {
    let bounded = queue().await.with_max_delay(Duration::from_secs(1));
    overture_kit::queue_contract::a_job_due_beyond_the_delay_bound_is_requeued_until_due(&bounded)
        .await;
}

#[tokio::test]
async fn a_delayed_retry_is_not_delivered_early() {
    let queue = queue().await;
    let work: SqsWork = QueueOn::one(queue.clone());
    let deployment = DeploymentId::from_uuid(uuid::Uuid::now_v7());
    let not_before = chrono::Utc::now() + chrono::TimeDelta::milliseconds(1_500);
    let retry = WaitingAttempt {
        step: "build".into(),
        attempt: 2,
        not_before,
    };
    let cause = uuid::Uuid::now_v7();
    work.run_attempts(deployment, &[retry], cause)
        .await
        .expect("queued");

    let mut handled = None;
    while handled.is_none() {
        let delivery = queue
            .receive(Duration::from_secs(30), Duration::from_secs(1))
            .await
            .expect("receives");
        if let Some(delivery) = delivery {
            let now = chrono::Utc::now();
            assert!(now >= not_before, "delivered at {now}, before {not_before}");
            handled = take_due(&queue, delivery, now).await.expect("due");
        }
        assert!(chrono::Utc::now() < not_before + chrono::TimeDelta::seconds(10));
    }
    let delivery = handled.expect("handled");
    assert_eq!(
        Job::from_body(delivery.job.body).expect("a job"),
        Job::RunAttempt(RunAttempt {
            deployment,
            step: "build".into(),
            attempt: 2,
            cause: Some(cause),
        })
    );
    assert_eq!(delivery.job.due_at, not_before);
}
