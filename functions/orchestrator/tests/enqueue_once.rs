//! The orchestrator queues each attempt once, when a decision made it wait, and a recovery pass
//! queues every waiting attempt: on the in-memory log, with a queue that records what it is given.

mod support;

use std::sync::Mutex;

use overture_domain::deployment::Interruption;
use overture_domain::testing::events::{advance, blueprint, failure, request, start, success};
use overture_domain::testing::t;
use overture_domain::DeploymentCommand;
use overture_events::{DeploymentId, Envelope, ErrorClass};
use overture_kit::memory::MemoryLog;
use overture_kit::{execute, execute_all, Cause, Clock, ReadStream};
use overture_orchestrator::{orchestrate, Since};
use support::{FixedClock, Queued};

/// Two independent steps.
const BLUEPRINT: &str = "name: once
steps:
  build: { run: noop }
  lint: { run: noop }
";

/// The fixture's clock, in seconds of the test kit's.
const NOW: i64 = 1;

struct Fixture {
    log: MemoryLog,
    queue: Queued,
    clock: FixedClock,
    deployment: DeploymentId,
    /// How many records the feed has handed on.
    fed: Mutex<u64>,
}

impl Fixture {
    fn new() -> Self {
        Self {
            log: MemoryLog::new(t(0)),
            queue: Queued::default(),
            clock: FixedClock(t(NOW)),
            deployment: DeploymentId::from_uuid(uuid::Uuid::now_v7()),
            fed: Mutex::new(0),
        }
    }

    /// Records a command as another function would.
    async fn record(&self, command: DeploymentCommand) {
        let cause = Cause::new("test", self.deployment, uuid::Uuid::now_v7());
        execute(&self.log, self.deployment, "acme", &cause, |_| {
            command.clone()
        })
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

    /// The deployment of [`BLUEPRINT`] is requested.
    async fn request(&self) {
        self.record(request(blueprint(BLUEPRINT), None)).await
    }

    /// Moves the deployment on with the records the feed hands on.
    async fn orchestrate_fed(&self) {
        let fed = self.feed().await;
        self.orchestrate(Since::Records(&fed)).await
    }

    async fn orchestrate(&self, since: Since<'_>) {
        let ports = support::ports(&self.log, &self.queue, &self.clock);
        orchestrate(self.deployment, uuid::Uuid::now_v7(), since, &ports)
            .await
            .expect("moves on");
    }

    /// The attempt starts now.
    async fn start(&self, step: &str, attempt: u32) {
        self.record(start(step, attempt, NOW)).await
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
    fixture.orchestrate_fed().await;
    assert_eq!(fixture.queue.take(), queued(&[("build", 1), ("lint", 1)]));

    // When `build` starts, `lint` still waits, but nothing new was decided about it; the
    // orchestrator's own `StepScheduled` records, fed back, were queued already.
    fixture.start("build", 1).await;
    fixture.orchestrate_fed().await;
    assert_eq!(fixture.queue.take(), queued(&[]));

    // A timer with no new records queues nothing either.
    fixture.orchestrate(Since::Records(&[])).await;
    assert_eq!(fixture.queue.take(), queued(&[]));
}

#[tokio::test]
async fn a_retry_queues_only_the_new_attempt() {
    let fixture = Fixture::new();
    fixture.request().await;
    fixture.orchestrate_fed().await;
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
    fixture.orchestrate_fed().await;
    assert_eq!(fixture.queue.take(), queued(&[("build", 2)]));
}

#[tokio::test]
async fn a_recovery_pass_queues_every_waiting_attempt_again() {
    let fixture = Fixture::new();
    fixture.request().await;
    fixture.orchestrate_fed().await;
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
    fixture.orchestrate_fed().await;
    fixture.start("build", 1).await;
    fixture.start("lint", 1).await;

    // `build` fails for good while `lint` runs: its grace period starts.
    fixture
        .record(failure("build", 1, ErrorClass::StepFailed, NOW))
        .await;
    fixture.orchestrate_fed().await;
    let wakes = fixture.queue.take_wakes();
    assert_eq!(wakes.len(), 1, "{wakes:?}");

    // Moving on again before the deadline sets no second timer; a recovery pass does.
    fixture.orchestrate_fed().await;
    assert!(fixture.queue.wakes().is_empty());
    fixture.orchestrate(Since::Unknown).await;
    assert_eq!(fixture.queue.wakes(), wakes);
}

#[tokio::test]
async fn steps_a_runner_scheduled_with_an_outcome_are_queued_from_its_records() {
    let fixture = Fixture {
        deployment: DeploymentId::from_uuid(uuid::Uuid::now_v7()),
        ..Fixture::new()
    };
    let two = "name: two\nsteps:\n  build: { run: noop }\n  ship: { run: noop, needs: [build] }\n";
    fixture.record(request(blueprint(two), None)).await;
    fixture.orchestrate_fed().await;
    assert_eq!(fixture.queue.take(), queued(&[("build", 1)]));

    // The runner records `build`'s start, its success and `ship`'s schedule in one append.
    fixture.start("build", 1).await;
    let runner = Cause::new("runner", fixture.deployment, uuid::Uuid::now_v7());
    let commands = [success("build", 1), advance(NOW)];
    execute_all(&fixture.log, fixture.deployment, "acme", &runner, |_| {
        commands.to_vec()
    })
    .await
    .expect("the log works")
    .expect("the outcome is accepted");

    // The orchestrator did not decide it, but it queues it once, from the runner's records.
    fixture.orchestrate_fed().await;
    assert_eq!(fixture.queue.take(), queued(&[("ship", 1)]));
    fixture.orchestrate(Since::Records(&[])).await;
    assert_eq!(fixture.queue.take(), queued(&[]));
}

#[tokio::test]
async fn the_purge_and_the_deployments_end_are_one_commit() {
    let fixture = Fixture::new();
    fixture.request().await;
    fixture.orchestrate_fed().await;
    for step in ["build", "lint"] {
        fixture.start(step, 1).await;
        fixture.record(success(step, 1)).await;
    }
    let appends = fixture.log.appends();
    fixture.orchestrate_fed().await;
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
    let commands = [request(blueprint(BLUEPRINT), None), advance(NOW)];
    let user = Cause::new("u", fixture.deployment, fixture.deployment.uuid());
    execute_all(&fixture.log, fixture.deployment, "acme", &user, |_| {
        commands.to_vec()
    })
    .await
    .expect("the log works")
    .expect("the request is accepted");
    let appends = fixture.log.appends();

    // Fed those records, the orchestrator queues both attempts and schedules nothing again.
    fixture.orchestrate_fed().await;
    assert_eq!(fixture.queue.take(), queued(&[("build", 1), ("lint", 1)]));
    assert_eq!(fixture.log.appends(), appends, "nothing more to record");
    assert_eq!(fixture.log.events(fixture.deployment).len(), 3);

    // A timer or a later record queues them no more.
    fixture.orchestrate(Since::Records(&[])).await;
    assert_eq!(fixture.queue.take(), queued(&[]));
}
