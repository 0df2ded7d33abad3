//! The orchestrator queues each attempt once, when a decision made it wait, and a recovery pass
//! queues every waiting attempt: on the in-memory log, with a queue that records what it is given.

mod support;

use std::collections::BTreeMap;
use std::sync::Mutex;

use async_trait::async_trait;
use overture_domain::blueprint::parse;
use overture_domain::deployment::{BastionAccess, Interruption};
use overture_domain::DeploymentCommand;
use overture_events::{CloudAccount, DeploymentId, Envelope, ErrorClass, Timestamp};
use overture_kit::memory::MemoryLog;
use overture_kit::{execute, execute_all, Cause, Clock, ReadStream};
use overture_orchestrator::{
    orchestrate, OrchestratorPorts, PurgeSecrets, QueueWork, RevokeAccess, Since, WaitingAttempt,
    WorkError,
};

/// Two independent steps.
const BLUEPRINT: &str = "name: once
steps:
  build: { run: noop }
  lint: { run: noop }
";

fn t(seconds: i64) -> Timestamp {
    Timestamp::from_timestamp(1_700_000_000 + seconds, 0).expect("in range")
}

/// Records every job it is asked to queue, as (step, attempt).
#[derive(Default)]
struct RecordingQueue {
    attempts: Mutex<Vec<(String, u32)>>,
    wakes: Mutex<Vec<Timestamp>>,
}

impl RecordingQueue {
    fn take(&self) -> Vec<(String, u32)> {
        let mut queued = std::mem::take(&mut *self.attempts.lock().expect("not poisoned"));
        queued.sort();
        queued
    }
}

#[async_trait]
impl QueueWork for RecordingQueue {
    async fn run_attempts(
        &self,
        _: DeploymentId,
        attempts: &[WaitingAttempt],
        _: uuid::Uuid,
    ) -> Result<(), WorkError> {
        self.attempts
            .lock()
            .expect("not poisoned")
            .extend(attempts.iter().map(|a| (a.step.clone(), a.attempt)));
        Ok(())
    }

    async fn wake_at(
        &self,
        _: DeploymentId,
        at: Timestamp,
        _: uuid::Uuid,
    ) -> Result<(), WorkError> {
        self.wakes.lock().expect("not poisoned").push(at);
        Ok(())
    }
}

struct Nothing;

#[async_trait]
impl PurgeSecrets for Nothing {
    async fn purge(&self, _: DeploymentId) -> Result<(), WorkError> {
        Ok(())
    }
}

#[async_trait]
impl RevokeAccess for Nothing {
    async fn revoke(
        &self,
        _: DeploymentId,
        _: &CloudAccount,
        _: &BastionAccess,
    ) -> Result<overture_orchestrator::Revocation, WorkError> {
        Ok(overture_orchestrator::Revocation::Deleted)
    }
}

struct FixedClock(Timestamp);

impl Clock for FixedClock {
    fn now(&self) -> Timestamp {
        self.0
    }
}

struct Fixture {
    log: MemoryLog,
    queue: RecordingQueue,
    clock: FixedClock,
    deployment: DeploymentId,
    /// How many records the feed has handed on.
    fed: Mutex<u64>,
}

impl Fixture {
    fn new() -> Self {
        Self {
            log: MemoryLog::new(t(0)),
            queue: RecordingQueue::default(),
            clock: FixedClock(t(1)),
            deployment: DeploymentId::from_uuid(uuid::Uuid::now_v7()),
            fed: Mutex::new(0),
        }
    }

    /// Records a command as another function would.
    async fn record(&self, command: DeploymentCommand) {
        let cause = Cause::new("test", self.deployment, uuid::Uuid::now_v7());
        execute(&self.log, self.deployment, "t", &cause, |_| command.clone())
            .await
            .expect("the log works")
            .expect("the command is accepted");
    }

    /// The records appended since the feed last looked, the orchestrator's own among them, as
    /// the engine's feed hands them on.
    async fn feed(&self) -> Vec<Envelope> {
        let from = *self.fed.lock().expect("not poisoned");
        let records = self
            .log
            .read_stream(self.deployment, from)
            .await
            .expect("read");
        *self.fed.lock().expect("not poisoned") = from + records.len() as u64;
        records
    }

    async fn request(&self) {
        let parsed = parse(BLUEPRINT).expect("valid");
        self.record(DeploymentCommand::Request {
            triggered_by: None,
            tenant: "t".into(),
            requested_by: "u".into(),
            trigger: "cli".into(),
            source: "once.yaml".into(),
            blueprint: parsed.snapshot,
            blueprint_hash: parsed.hash,
            params: BTreeMap::new(),
            cloud: None,
            sealed: None,
        })
        .await
    }

    async fn orchestrate(&self, since: Since<'_>) {
        let ports = OrchestratorPorts {
            log: &self.log,
            work: &self.queue,
            secrets: &Nothing,
            access: &Nothing,
            services: &support::Nothing,
            clock: &self.clock,
        };
        orchestrate(self.deployment, uuid::Uuid::now_v7(), since, &ports)
            .await
            .expect("moves on");
    }

    async fn start(&self, step: &str, attempt: u32) {
        self.record(DeploymentCommand::StartAttempt {
            step: step.into(),
            attempt,
            sandbox: format!("{step}-{attempt}"),
            now: self.clock.now(),
        })
        .await
    }
}

fn queued(pairs: &[(&str, u32)]) -> Vec<(String, u32)> {
    pairs.iter().map(|(s, a)| ((*s).to_owned(), *a)).collect()
}

#[tokio::test]
async fn a_deployments_second_event_does_not_queue_the_first_ones_attempts_again() {
    let fixture = Fixture::new();
    fixture.request().await;

    // Given the request, the orchestrator schedules both steps and queues each once.
    fixture
        .orchestrate(Since::Records(&fixture.feed().await))
        .await;
    assert_eq!(fixture.queue.take(), queued(&[("build", 1), ("lint", 1)]));

    // When `build` starts, `lint` still waits, but nothing new was decided about it; the
    // orchestrator's own `StepScheduled` records, fed back, were queued already.
    fixture.start("build", 1).await;
    fixture
        .orchestrate(Since::Records(&fixture.feed().await))
        .await;
    assert_eq!(fixture.queue.take(), queued(&[]));

    // A timer with no new records queues nothing either.
    fixture.orchestrate(Since::Records(&[])).await;
    assert_eq!(fixture.queue.take(), queued(&[]));
}

#[tokio::test]
async fn a_retry_queues_only_the_new_attempt() {
    let fixture = Fixture::new();
    fixture.request().await;
    fixture
        .orchestrate(Since::Records(&fixture.feed().await))
        .await;
    fixture.queue.take();
    fixture.start("build", 1).await;

    // The runner's engine died: `interrupted` is retried at once, as attempt 2.
    fixture
        .record(DeploymentCommand::InterruptAttempt {
            step: "build".into(),
            attempt: 1,
            why: Interruption::EngineStopped,
            now: fixture.clock.now(),
        })
        .await;
    fixture
        .orchestrate(Since::Records(&fixture.feed().await))
        .await;
    assert_eq!(fixture.queue.take(), queued(&[("build", 2)]));
}

#[tokio::test]
async fn a_recovery_pass_queues_every_waiting_attempt_again() {
    let fixture = Fixture::new();
    fixture.request().await;
    fixture
        .orchestrate(Since::Records(&fixture.feed().await))
        .await;
    fixture.queue.take();
    fixture.start("build", 1).await;

    // After a crash between an append and its jobs, nothing says which jobs were queued.
    fixture.orchestrate(Since::Unknown).await;
    assert_eq!(fixture.queue.take(), queued(&[("lint", 1)]));
}

#[tokio::test]
async fn the_steps_the_orchestrator_schedules_itself_are_queued_once() {
    let fixture = Fixture::new();
    // A timer moves the deployment on before the feed has handed the request on: the
    // orchestrator's own `StepScheduled` events are decisions enough.
    fixture.request().await;
    fixture.orchestrate(Since::Records(&[])).await;
    assert_eq!(fixture.queue.take(), queued(&[("build", 1), ("lint", 1)]));

    // Then the feed hands on the request and those `StepScheduled` records.
    let fed = fixture.feed().await;
    assert_eq!(fed.len(), 3);
    fixture.orchestrate(Since::Records(&fed)).await;
    assert_eq!(fixture.queue.take(), queued(&[]));
}

#[tokio::test]
async fn a_grace_deadline_is_queued_once_when_the_grace_period_starts() {
    let fixture = Fixture::new();
    fixture.request().await;
    fixture
        .orchestrate(Since::Records(&fixture.feed().await))
        .await;
    fixture.start("build", 1).await;
    fixture.start("lint", 1).await;

    // `build` fails for good while `lint` runs: its grace period starts.
    fixture
        .record(DeploymentCommand::RecordFailure {
            step: "build".into(),
            attempt: 1,
            error_class: ErrorClass::StepFailed,
            exit_code: Some(1),
            message: "no".into(),
            duration_ms: 1,
            now: fixture.clock.now(),
        })
        .await;
    fixture
        .orchestrate(Since::Records(&fixture.feed().await))
        .await;
    let wakes = std::mem::take(&mut *fixture.queue.wakes.lock().expect("not poisoned"));
    assert_eq!(wakes.len(), 1, "{wakes:?}");

    // Moving on again before the deadline sets no second timer; a recovery pass does.
    fixture
        .orchestrate(Since::Records(&fixture.feed().await))
        .await;
    assert!(fixture.queue.wakes.lock().expect("not poisoned").is_empty());
    fixture.orchestrate(Since::Unknown).await;
    assert_eq!(*fixture.queue.wakes.lock().expect("not poisoned"), wakes);
}

#[tokio::test]
async fn steps_a_runner_scheduled_with_an_outcome_are_queued_from_its_records() {
    let fixture = Fixture {
        deployment: DeploymentId::from_uuid(uuid::Uuid::now_v7()),
        ..Fixture::new()
    };
    let parsed =
        parse("name: two\nsteps:\n  build: { run: noop }\n  ship: { run: noop, needs: [build] }\n")
            .expect("valid");
    fixture
        .record(DeploymentCommand::Request {
            triggered_by: None,
            tenant: "t".into(),
            requested_by: "u".into(),
            trigger: "cli".into(),
            source: "two.yaml".into(),
            blueprint: parsed.snapshot,
            blueprint_hash: parsed.hash,
            params: BTreeMap::new(),
            cloud: None,
            sealed: None,
        })
        .await;
    fixture
        .orchestrate(Since::Records(&fixture.feed().await))
        .await;
    assert_eq!(fixture.queue.take(), queued(&[("build", 1)]));

    // The runner records `build`'s start, its success and `ship`'s schedule in one append.
    fixture.start("build", 1).await;
    let runner = Cause::new("runner", fixture.deployment, uuid::Uuid::now_v7());
    let commands = [
        DeploymentCommand::RecordSuccess {
            step: "build".into(),
            attempt: 1,
            outputs: BTreeMap::new(),
            duration_ms: 0,
        },
        DeploymentCommand::Advance {
            now: fixture.clock.now(),
        },
    ];
    execute_all(&fixture.log, fixture.deployment, "t", &runner, |_| {
        commands.to_vec()
    })
    .await
    .expect("the log works")
    .expect("the outcome is accepted");

    // The orchestrator did not decide it, but it queues it once, from the runner's records.
    fixture
        .orchestrate(Since::Records(&fixture.feed().await))
        .await;
    assert_eq!(fixture.queue.take(), queued(&[("ship", 1)]));
    fixture.orchestrate(Since::Records(&[])).await;
    assert_eq!(fixture.queue.take(), queued(&[]));
}

#[tokio::test]
async fn the_purge_and_the_deployments_end_are_one_commit() {
    let fixture = Fixture::new();
    fixture.request().await;
    fixture
        .orchestrate(Since::Records(&fixture.feed().await))
        .await;
    for step in ["build", "lint"] {
        fixture.start(step, 1).await;
        fixture
            .record(DeploymentCommand::RecordSuccess {
                step: step.into(),
                attempt: 1,
                outputs: BTreeMap::new(),
                duration_ms: 0,
            })
            .await;
    }
    let appends = fixture.log.appends();
    fixture
        .orchestrate(Since::Records(&fixture.feed().await))
        .await;
    let events = fixture.log.events(fixture.deployment);
    let ending: Vec<&str> = events
        .iter()
        .rev()
        .take(2)
        .rev()
        .map(|e| e.event_type())
        .collect();
    assert_eq!(ending, ["SecretsPurged", "DeploymentSucceeded"]);
    assert_eq!(fixture.log.appends() - appends, 1);
}

#[tokio::test]
async fn steps_the_submit_scheduled_with_the_request_are_queued_from_its_records_once() {
    let fixture = Fixture::new();
    // The submit records the request and its first advance in one append, under the user.
    let parsed = parse(BLUEPRINT).expect("valid");
    let commands = [
        DeploymentCommand::Request {
            triggered_by: None,
            tenant: "t".into(),
            requested_by: "u".into(),
            trigger: "cli".into(),
            source: "once.yaml".into(),
            blueprint: parsed.snapshot,
            blueprint_hash: parsed.hash,
            params: BTreeMap::new(),
            cloud: None,
            sealed: None,
        },
        DeploymentCommand::Advance {
            now: fixture.clock.now(),
        },
    ];
    let user = Cause::new("u", fixture.deployment, fixture.deployment.uuid());
    execute_all(&fixture.log, fixture.deployment, "t", &user, |_| {
        commands.to_vec()
    })
    .await
    .expect("the log works")
    .expect("the request is accepted");
    let appends = fixture.log.appends();

    // Fed those records, the orchestrator queues both attempts and schedules nothing again.
    fixture
        .orchestrate(Since::Records(&fixture.feed().await))
        .await;
    assert_eq!(fixture.queue.take(), queued(&[("build", 1), ("lint", 1)]));
    assert_eq!(fixture.log.appends(), appends, "nothing more to record");
    assert_eq!(fixture.log.events(fixture.deployment).len(), 3);

    // A timer or a later record queues them no more.
    fixture.orchestrate(Since::Records(&[])).await;
    assert_eq!(fixture.queue.take(), queued(&[]));
}
