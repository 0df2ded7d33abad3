//! A job SQS delivers twice (standard queues do not de-duplicate) does not run its step twice:
//! the runner's handler, fed both deliveries from the emulator's queue, runs the attempt once,
//! whether the copy comes while the attempt runs or after it has ended.

mod support;

use overture_runner::fakes::Quiet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_sqs::Client;
use overture_aws::sqs::{create_queue, SqsQueue, SqsWork};
use overture_domain::testing::events::{blueprint, requested};
use overture_events::job::Job;
use overture_events::{DeploymentEvent as E, DeploymentId, Timestamp};
use overture_kit::memory::MemoryLog;
use overture_kit::queue::{take_due, Delivery, ReceiveJobs};
use overture_kit::{Cause, Clock, DeploymentLog};
use overture_orchestrator::queued::QueueOn;
use overture_orchestrator::{QueueWork, WaitingAttempt};
use overture_runner::{
    run_attempt, AttemptReport, Cancel, KeepAlive, OutputsFile, PortError, RunError, RunSandboxed,
    RunnerPorts, SandboxExit, SandboxJob, SandboxResult,
};
use tokio::sync::Notify;

const BLUEPRINT: &str =
    "name: x\nsteps:\n  build: { run: script, timeout: 1m, with: { command: 'make' } }\n";

struct SystemTime;

impl Clock for SystemTime {
    fn now(&self) -> Timestamp {
        chrono::Utc::now()
    }
}

/// Counts its runs, says when one has started, and ends it (exit 0) once the test lets it.
struct FakeSandbox {
    runs: AtomicUsize,
    started: Notify,
    finish: Notify,
}

#[async_trait]
impl RunSandboxed for FakeSandbox {
    async fn run<'a>(&self, _: SandboxJob, _: Cancel<'a>) -> Result<SandboxResult, RunError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        self.started.notify_one();
        self.finish.notified().await;
        Ok(SandboxResult {
            exit: SandboxExit::Code(0),
            output: Vec::new(),
            outputs_file: OutputsFile::Read(Vec::new()),
            duration: Duration::from_millis(5),
            collected: Vec::new(),
        })
    }
}

/// Keeps a delivery hidden while its attempt runs, as the engine's lease does.
struct Visibility<'a> {
    queue: &'a SqsQueue,
    delivery: &'a Delivery,
}

#[async_trait]
impl KeepAlive for Visibility<'_> {
    async fn keep_alive(&self, _: Option<overture_events::Timestamp>) -> Result<(), PortError> {
        self.queue
            .extend(&self.delivery.receipt, Duration::from_secs(30))
            .await
            .map_err(PortError::refused)
    }
}

async fn queue() -> SqsQueue {
    let config = overture_aws::config::for_endpoint(support::emulator(), "eu-west-1").await;
    let client = Client::new(&config);
    let name = format!("overture-duplicates-{}", uuid::Uuid::now_v7());
    let url = create_queue(&client, &name).await.expect("the queue");
    SqsQueue::new(client, url, Arc::new(overture_kit::SystemClock))
}

/// A deployment whose `build` attempt 1 is scheduled, and its job sent twice, as SQS may
/// deliver it.
async fn scheduled_and_sent_twice(log: &MemoryLog, queue: &SqsQueue) -> DeploymentId {
    let deployment = DeploymentId::from_uuid(uuid::Uuid::now_v7());
    let now = chrono::Utc::now();
    let events = vec![
        requested("x.yaml", blueprint(BLUEPRINT)),
        E::StepScheduled {
            step: "build".into(),
            attempt: 1,
            not_before: now,
        },
    ];
    let cause = Cause::new("test", deployment, uuid::Uuid::now_v7());
    log.append(deployment, "acme", None, events, &cause)
        .await
        .expect("append");
    let work: SqsWork = QueueOn::one(queue.clone());
    let attempt = WaitingAttempt {
        step: "build".into(),
        attempt: 1,
        not_before: now,
    };
    for _ in 0..2 {
        work.run_attempts(
            deployment,
            std::slice::from_ref(&attempt),
            cause.causation_id,
        )
        .await
        .expect("queued");
    }
    deployment
}

async fn delivery(queue: &SqsQueue) -> Delivery {
    let delivery = queue
        .receive(Duration::from_secs(30), Duration::from_secs(5))
        .await
        .expect("receives")
        .expect("a copy is delivered");
    take_due(queue, delivery, chrono::Utc::now())
        .await
        .expect("due")
        .expect("due already")
}

async fn handle(
    queue: &SqsQueue,
    delivery: &Delivery,
    log: &MemoryLog,
    sandbox: &FakeSandbox,
) -> AttemptReport {
    let Ok(Job::RunAttempt(job)) = Job::from_body(delivery.job.body.clone()) else {
        panic!("not a run job: {:?}", delivery.job);
    };
    let ports = RunnerPorts {
        log,
        sandbox,
        seals: &Quiet,
        kept: &Quiet,
        access: &Quiet,
        logs: &Quiet,
        payloads: &overture_kit::payload::MemoryPayloads::default(),
        loopback: overture_domain::egress::LoopbackEgress::Refused,
        clock: &SystemTime,
    };
    run_attempt(&job, &ports, &Visibility { queue, delivery })
        .await
        .expect("handled")
}

#[tokio::test]
async fn a_duplicated_delivery_does_not_run_a_step_twice() {
    let queue = queue().await;
    let log = MemoryLog::new(chrono::Utc::now());
    let sandbox = FakeSandbox {
        runs: AtomicUsize::new(0),
        started: Notify::new(),
        finish: Notify::new(),
    };
    let deployment = scheduled_and_sent_twice(&log, &queue).await;
    let first = delivery(&queue).await;
    let second = delivery(&queue).await;
    assert_eq!(first.job, second.job, "the same job, twice");

    // The copy arrives while the first delivery's attempt runs: it leaves it be.
    let running = handle(&queue, &first, &log, &sandbox);
    let copy = async {
        sandbox.started.notified().await;
        let report = handle(&queue, &second, &log, &sandbox).await;
        sandbox.finish.notify_one();
        report
    };
    let (ran, copied) = tokio::join!(running, copy);
    assert_eq!(ran, AttemptReport::Succeeded);
    assert!(
        matches!(copied, AttemptReport::StillRunning(_)),
        "the copy found the attempt running: {copied:?}"
    );

    // Handled again once the attempt has ended, the copy finds nothing to do.
    let after = handle(&queue, &second, &log, &sandbox).await;
    assert!(matches!(after, AttemptReport::Obsolete(_)), "{after:?}");
    assert_eq!(sandbox.runs.load(Ordering::SeqCst), 1, "the step ran once");
    let succeeded = log
        .events(deployment)
        .iter()
        .filter(|e| matches!(e, E::StepSucceeded { .. }))
        .count();
    assert_eq!(succeeded, 1);
}
