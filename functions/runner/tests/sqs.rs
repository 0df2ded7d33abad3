//! The runner's trigger on AWS, `on_job_messages`, fed SQS batches from a JSON fixture in the
//! shape AWS delivers, on in-memory fakes of its ports: which messages SQS must keep, what the
//! jobs recorded, and what became of each message's visibility.
//!
//! Time is the test's: the clock is fixed at 10:00:01, and tokio's clock is paused.

use overture_runner::fakes::Quiet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use overture_domain::testing::events::{blueprint, requested};
use overture_events::{DeploymentEvent as E, DeploymentId, Timestamp};
use overture_kit::batch::BatchFailed;
use overture_kit::memory::MemoryLog;
use overture_kit::queue::{Job, QueueError, SendJobs};
use overture_kit::{Cause, Clock, DeploymentLog, Loaded, LogError};
use overture_runner::{
    on_job_messages, Cancel, ChangeVisibility, OutputsFile, RunError, RunSandboxed, RunnerPorts,
    SandboxExit, SandboxJob, SandboxResult,
};

const BLUEPRINT: &str =
    "name: x\nsteps:\n  build: { run: script, timeout: 5m, with: { command: 'make' } }\n";

/// The fixture's messages, by id, in this order.
fn batch(ids: &[&str]) -> SqsEvent {
    let mut all: SqsEvent =
        serde_json::from_str(include_str!("fixtures/sqs-job-messages.json")).expect("the fixture");
    all.records = ids
        .iter()
        .map(|id| {
            all.records
                .iter()
                .find(|m| m.message_id.as_deref() == Some(id))
                .cloned()
                .expect("a message of the fixture")
        })
        .collect();
    all
}

fn deployment(n: u8) -> DeploymentId {
    format!("01a20800-0000-7000-8000-00000000000{n}")
        .parse()
        .expect("an id")
}

fn at(time: &str) -> Timestamp {
    format!("2026-11-23T{time}Z").parse().expect("a time")
}

/// The messages a batch's answer gives back; the batch must not have failed as a whole.
fn failed(response: &Result<SqsBatchResponse, BatchFailed>) -> Vec<&str> {
    response
        .as_ref()
        .expect("answered with partial failures, not failed as a whole")
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.as_str())
        .collect()
}

struct FixedClock;

impl Clock for FixedClock {
    fn now(&self) -> Timestamp {
        at("10:00:01")
    }
}

/// Runs every job for `takes` (unless cancelled first) and exits 0; counts its runs.
struct FakeSandbox {
    takes: Duration,
    runs: AtomicUsize,
}

#[async_trait]
impl RunSandboxed for FakeSandbox {
    async fn run<'a>(&self, _: SandboxJob, cancel: Cancel<'a>) -> Result<SandboxResult, RunError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        let exit = tokio::select! {
            () = tokio::time::sleep(self.takes) => SandboxExit::Code(0),
            () = cancel => SandboxExit::Cancelled,
        };
        Ok(SandboxResult {
            exit,
            output: Vec::new(),
            outputs_file: OutputsFile::Read(Vec::new()),
            duration: self.takes,
            collected: Vec::new(),
        })
    }
}

/// The queue: the jobs sent again.
#[derive(Default)]
struct Sent(Mutex<Vec<Job>>);

#[async_trait]
impl SendJobs for Sent {
    fn max_delay(&self) -> Option<Duration> {
        Some(Duration::from_secs(900))
    }
    async fn send(&self, jobs: Vec<Job>) -> Result<(), QueueError> {
        self.0.lock().expect("sent").extend(jobs);
        Ok(())
    }
}

/// The visibility changes asked for, by receipt handle.
#[derive(Default)]
struct Visibility(Mutex<Vec<(String, Duration)>>);

#[async_trait]
impl ChangeVisibility for Visibility {
    async fn change_visibility(
        &self,
        receipt: &str,
        visibility: Duration,
    ) -> Result<(), QueueError> {
        self.0
            .lock()
            .expect("changes")
            .push((receipt.to_owned(), visibility));
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
#[error("the table is throttled")]
struct Throttled;

/// The log, unreachable for one deployment.
struct PartlyUnreachable {
    log: MemoryLog,
    unreachable: DeploymentId,
}

#[async_trait]
impl DeploymentLog for PartlyUnreachable {
    async fn load(&self, deployment: DeploymentId) -> Result<Loaded, LogError> {
        if deployment == self.unreachable {
            return Err(LogError::Unavailable(Box::new(Throttled)));
        }
        self.log.load(deployment).await
    }
    async fn append(
        &self,
        deployment: DeploymentId,
        tenant: &str,
        expected: Option<u64>,
        events: Vec<E>,
        cause: &Cause,
    ) -> Result<(), LogError> {
        if deployment == self.unreachable {
            return Err(LogError::Unavailable(Box::new(Throttled)));
        }
        self.log
            .append(deployment, tenant, expected, events, cause)
            .await
    }
}

/// A log in which each of `deployments` has `build`'s attempt 1 scheduled at 10:00, and then
/// `more` events.
async fn scheduled(deployments: &[DeploymentId], more: &[E]) -> MemoryLog {
    let log = MemoryLog::new(at("10:00:00"));
    for &deployment in deployments {
        let mut events = vec![
            requested("x.yaml", blueprint(BLUEPRINT)),
            E::StepScheduled {
                step: "build".into(),
                attempt: 1,
                not_before: at("10:00:00"),
            },
        ];
        events.extend(more.iter().cloned());
        let cause = Cause::new("test", deployment, uuid::Uuid::now_v7());
        log.append(deployment, "acme", None, events, &cause)
            .await
            .expect("append");
    }
    log
}

fn types(log: &MemoryLog, deployment: DeploymentId) -> Vec<&'static str> {
    log.events(deployment).iter().map(E::event_type).collect()
}

fn sandbox(takes: Duration) -> FakeSandbox {
    FakeSandbox {
        takes,
        runs: AtomicUsize::new(0),
    }
}

fn ports<'a>(log: &'a dyn DeploymentLog, sandbox: &'a FakeSandbox) -> RunnerPorts<'a> {
    RunnerPorts {
        log,
        sandbox,
        seals: &Quiet,
        kept: &Quiet,
        access: &Quiet,
        logs: &Quiet,
        clock: &FixedClock,
        payloads: &*NO_FILES,
        loopback: overture_domain::egress::LoopbackEgress::Operator,
    }
}

/// Hands the fixture's messages `ids` to the trigger, as one batch, on `log` and `sandbox`.
async fn deliver(
    ids: &[&str],
    log: &dyn DeploymentLog,
    sandbox: &FakeSandbox,
    sent: &Sent,
    visibility: &Visibility,
) -> Result<SqsBatchResponse, BatchFailed> {
    on_job_messages(&batch(ids), &ports(log, sandbox), sent, visibility).await
}

/// As [`deliver`], where the test looks at neither the jobs sent again nor the visibility.
async fn deliver_alone(
    ids: &[&str],
    log: &dyn DeploymentLog,
    sandbox: &FakeSandbox,
) -> Result<SqsBatchResponse, BatchFailed> {
    deliver(ids, log, sandbox, &Sent::default(), &Visibility::default()).await
}

/// The payload store: these blueprints take no files.
static NO_FILES: std::sync::LazyLock<overture_kit::payload::MemoryPayloads> =
    std::sync::LazyLock::new(Default::default);

#[tokio::test(start_paused = true)]
async fn a_due_job_runs_and_its_message_is_acknowledged() {
    let log = scheduled(&[deployment(1)], &[]).await;
    let sandbox = sandbox(Duration::from_secs(1));
    let (sent, visibility) = (Sent::default(), Visibility::default());
    let response = deliver(&["m-due"], &log, &sandbox, &sent, &visibility).await;
    assert_eq!(failed(&response), Vec::<&str>::new());
    assert_eq!(sandbox.runs.load(Ordering::SeqCst), 1);
    // Its one step's success ends the deployment, which sealed nothing to purge.
    assert_eq!(
        types(&log, deployment(1))[2..],
        [
            "StepStarted",
            "StepSucceeded",
            "SecretsPurged",
            "DeploymentSucceeded"
        ]
    );
    assert!(sent.0.lock().expect("sent").is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_long_step_keeps_its_message_hidden_until_its_attempts_lease_ends() {
    let log = scheduled(&[deployment(1)], &[]).await;
    let sandbox = sandbox(Duration::from_secs(130));
    let visibility = Visibility::default();
    let response = deliver(&["m-due"], &log, &sandbox, &Sent::default(), &visibility).await;
    assert_eq!(failed(&response), Vec::<&str>::new());
    let changes = visibility.0.lock().expect("changes").clone();
    // One call, not one a second nor one a minute: hidden until the attempt's lease ends, when
    // a runner that died would leave the attempt to be found interrupted.
    let lease_until = log.load(deployment(1)).await.expect("load").state.steps["build"]
        .lease_until
        .expect("the attempt's lease");
    let left = (lease_until - FixedClock.now()).to_std().expect("ahead");
    assert_eq!(
        changes,
        vec![("receipt-m-due".to_owned(), left + Duration::from_secs(1))],
        "{changes:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_duplicate_delivered_while_its_attempt_runs_comes_back_when_the_lease_ends() {
    let started = E::StepStarted {
        step: "build".into(),
        attempt: 1,
        sandbox: "elsewhere".into(),
        lease_until: Some(at("10:05:00")),
        fingerprint: None,
    };
    let log = scheduled(&[deployment(1)], &[started]).await;
    let sandbox = sandbox(Duration::from_secs(1));
    let visibility = Visibility::default();
    let response = deliver(&["m-due"], &log, &sandbox, &Sent::default(), &visibility).await;
    assert_eq!(failed(&response), ["m-due"], "SQS must keep it");
    assert_eq!(sandbox.runs.load(Ordering::SeqCst), 0, "no second run");
    assert_eq!(
        *visibility.0.lock().expect("changes"),
        [("receipt-m-due".to_owned(), Duration::from_secs(299))],
        "hidden until the lease ends"
    );
    assert_eq!(types(&log, deployment(1)).last(), Some(&"StepStarted"));
}

#[tokio::test(start_paused = true)]
async fn a_job_delivered_before_it_is_due_goes_back_for_the_rest_of_its_wait() {
    let log = scheduled(&[deployment(1)], &[]).await;
    let sandbox = sandbox(Duration::from_secs(1));
    let sent = Sent::default();
    let response = deliver(&["m-early"], &log, &sandbox, &sent, &Visibility::default()).await;
    assert_eq!(
        failed(&response),
        Vec::<&str>::new(),
        "the early delivery is deleted"
    );
    assert_eq!(sandbox.runs.load(Ordering::SeqCst), 0, "not run");
    let sent = sent.0.lock().expect("sent");
    assert_eq!(sent.len(), 1);
    assert_eq!(
        sent[0].due_at,
        at("13:00:00"),
        "sent again, as due as it was"
    );
    assert_eq!(sent[0].deployment, deployment(1));
    assert_eq!(types(&log, deployment(1)).len(), 2, "nothing recorded");
}

#[tokio::test(start_paused = true)]
async fn a_message_that_is_not_a_job_is_reported_failed_to_end_in_the_dead_letter_queue() {
    let log = scheduled(&[deployment(1)], &[]).await;
    let sandbox = sandbox(Duration::from_secs(1));
    let response = deliver_alone(&["m-unreadable", "m-due"], &log, &sandbox).await;
    assert_eq!(failed(&response), ["m-unreadable"]);
    assert_eq!(sandbox.runs.load(Ordering::SeqCst), 1, "only the job ran");

    // Alone in its batch, it fails the invocation, as one that handling again cannot mend.
    let alone = deliver_alone(&["m-unreadable"], &log, &sandbox)
        .await
        .expect_err("the whole batch failed");
    assert_eq!(alone.error_type(), "NonRetryable", "{alone}");
}

#[tokio::test(start_paused = true)]
async fn a_batch_whose_every_job_failed_fails_its_invocation_as_retryable() {
    let log = PartlyUnreachable {
        log: scheduled(&[deployment(2)], &[]).await,
        unreachable: deployment(2),
    };
    let sandbox = sandbox(Duration::from_secs(1));
    let failed = deliver_alone(&["m-other"], &log, &sandbox)
        .await
        .expect_err("the whole batch failed");
    assert_eq!(failed.error_type(), "Retryable", "{failed}");
    assert_eq!(failed.failed, 1);
    assert_eq!(sandbox.runs.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn one_message_that_cannot_be_handled_fails_alone() {
    let log = PartlyUnreachable {
        log: scheduled(&[deployment(1), deployment(2), deployment(3)], &[]).await,
        unreachable: deployment(2),
    };
    let sandbox = sandbox(Duration::from_secs(1));
    let response = deliver_alone(&["m-due", "m-other", "m-third"], &log, &sandbox).await;
    assert_eq!(failed(&response), ["m-other"]);
    assert_eq!(sandbox.runs.load(Ordering::SeqCst), 2);
    for handled in [deployment(1), deployment(3)] {
        assert!(types(&log.log, handled).contains(&"StepSucceeded"));
    }
}
