//! The runner's handler, `run_attempt`, on in-memory fakes of its ports: what it records for a
//! job, given the deployment's history, and what it tells the engine to do with the job.
//!
//! Time is the test's: the clock is fixed, and tokio's clock is paused (the heartbeat advances
//! it), so nothing here waits for real.

use overture_runner::fakes::Quiet;
use overture_runner::limits::LimitReached;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use chrono::TimeDelta;
use overture_domain::blueprint::parse;
use overture_domain::deployment::{Interruption, ATTEMPT_LEASE_MARGIN};
use overture_domain::testing::events::{
    abandoned, requested, scheduled, started_until, succeeded, SSH_KEY as HOST_KEY,
};
use overture_domain::testing::t;
use overture_events::{
    BlueprintSnapshot, DeploymentEvent as E, DeploymentId, ErrorClass, StoredFile, Timestamp,
};
use overture_kit::memory::MemoryLog;
use overture_kit::payload::{MemoryPayloads, PayloadError, StorePayloads};
use overture_kit::{Cause, Clock, DeploymentLog, ReadStream};
use overture_runner::{
    run_attempt, AttemptReport, Cancel, KeepAlive, LoopbackEgress, OutputsFile, PortError,
    RunAttempt, RunError, RunSandboxed, RunnerPorts, SandboxExit, SandboxJob, SandboxResult,
    Unrunnable,
};

/// A deployment whose one step, `build`, is a script with a 1 min timeout.
const BLUEPRINT: &str =
    "name: x\nsteps:\n  build: { run: script, timeout: 1m, with: { command: 'make' } }\n";

struct FixedClock(Mutex<Timestamp>);

impl Clock for FixedClock {
    fn now(&self) -> Timestamp {
        *self.0.lock().expect("clock")
    }
}

/// What the sandbox does with a job: answer at once, refuse it, or run until it is cancelled.
enum Sandbox {
    Exits(i32, &'static str),
    /// Exits with the code, this output, and these files left for the runner to collect.
    Leaves(i32, &'static str, Vec<(&'static str, String)>),
    Refuses,
    RunsUntilCancelled,
    /// Fails having run out of the memory its job allowed.
    RunsOutOfMemory,
}

struct FakeSandbox {
    behaviour: Sandbox,
    runs: AtomicUsize,
    /// The files of the last job it was given.
    files: Mutex<Vec<(std::path::PathBuf, Vec<u8>)>>,
    /// The limits of the last job it was given.
    limits: Mutex<Option<overture_events::StepLimits>>,
}

#[async_trait]
impl RunSandboxed for FakeSandbox {
    async fn run<'a>(
        &self,
        job: SandboxJob,
        cancel: Cancel<'a>,
    ) -> Result<SandboxResult, RunError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        *self.files.lock().expect("files") = job.files;
        *self.limits.lock().expect("limits") = Some(job.limits);
        let result = |exit, outputs: &str| SandboxResult {
            exit,
            output: Vec::new(),
            outputs_file: OutputsFile::Read(outputs.as_bytes().to_vec()),
            duration: Duration::from_millis(5),
            collected: Vec::new(),
        };
        match self.behaviour {
            Sandbox::Exits(code, outputs) => Ok(result(SandboxExit::Code(code), outputs)),
            Sandbox::Leaves(code, output, ref files) => Ok(SandboxResult {
                output: output.as_bytes().to_vec(),
                collected: files
                    .iter()
                    .map(|(path, text)| (std::path::PathBuf::from(path), text.as_bytes().to_vec()))
                    .collect(),
                ..result(SandboxExit::Code(code), "")
            }),
            Sandbox::Refuses => Err(RunError::Unrunnable(Unrunnable::NulInCommand)),
            Sandbox::RunsUntilCancelled => {
                cancel.await;
                Ok(result(SandboxExit::Cancelled, ""))
            }
            Sandbox::RunsOutOfMemory => Ok(result(
                SandboxExit::LimitReached(LimitReached::Memory {
                    limit: job.limits.memory_bytes,
                }),
                "",
            )),
        }
    }
}

/// The job's lease: kept, or lost at the first heartbeat.
struct Lease {
    lost: AtomicBool,
}

#[async_trait]
impl KeepAlive for Lease {
    async fn keep_alive(&self, _: Option<Timestamp>) -> Result<(), PortError> {
        if self.lost.load(Ordering::SeqCst) {
            Err(PortError::refused("another runner holds the job now"))
        } else {
            Ok(())
        }
    }
}

struct Fixture {
    log: MemoryLog,
    deployment: DeploymentId,
    /// The event that scheduled the attempt, as the job carries it.
    cause: uuid::Uuid,
    clock: FixedClock,
    sandbox: FakeSandbox,
    lease: Lease,
    /// The blueprint's files.
    payloads: MemoryPayloads,
}

impl Fixture {
    /// `build`'s first attempt scheduled at t(0); the clock at t(1).
    async fn new(sandbox: Sandbox) -> Self {
        Self::with(
            sandbox,
            parse(BLUEPRINT).expect("valid").snapshot,
            MemoryPayloads::default(),
        )
        .await
    }

    /// As [`Fixture::new`], of `blueprint` whose files are in `payloads`.
    async fn with(
        sandbox: Sandbox,
        blueprint: BlueprintSnapshot,
        payloads: MemoryPayloads,
    ) -> Self {
        let fixture = Self {
            log: MemoryLog::new(t(0)),
            deployment: DeploymentId::from_uuid(uuid::Uuid::now_v7()),
            cause: uuid::Uuid::now_v7(),
            clock: FixedClock(Mutex::new(t(1))),
            sandbox: FakeSandbox {
                behaviour: sandbox,
                runs: AtomicUsize::new(0),
                files: Mutex::default(),
                limits: Mutex::default(),
            },
            lease: Lease {
                lost: AtomicBool::new(false),
            },
            payloads,
        };
        fixture
            .record(vec![
                requested("x.yaml", blueprint),
                scheduled("build", 1, 0),
            ])
            .await;
        fixture
    }

    /// Appends `events` as another function would.
    async fn record(&self, events: Vec<E>) {
        let expected = self.log.load(self.deployment).await.expect("load").revision;
        let cause = Cause::new("test", self.deployment, uuid::Uuid::now_v7());
        self.log
            .append(self.deployment, "t", expected, events, &cause)
            .await
            .expect("append");
    }

    fn set_now(&self, now: Timestamp) {
        *self.clock.0.lock().expect("clock") = now;
    }

    async fn run(&self) -> AttemptReport {
        self.try_run(&self.payloads, LoopbackEgress::Operator)
            .await
            .expect("the job is handled")
    }

    /// Runs `build`'s first attempt, its files fetched from `payloads`, with what the operator
    /// allows of the host's loopback.
    async fn try_run(
        &self,
        payloads: &dyn StorePayloads,
        loopback: LoopbackEgress,
    ) -> Result<AttemptReport, overture_runner::RunnerError> {
        let ports = RunnerPorts {
            log: &self.log,
            sandbox: &self.sandbox,
            seals: &Quiet,
            kept: &Quiet,
            access: &Quiet,
            logs: &Quiet,
            clock: &self.clock,
            payloads,
            loopback,
        };
        let job = RunAttempt {
            deployment: self.deployment,
            step: "build".into(),
            attempt: 1,
            cause: Some(self.cause),
        };
        run_attempt(&job, &ports, &self.lease).await
    }

    fn events(&self) -> Vec<E> {
        self.log.events(self.deployment)
    }

    fn types(&self) -> Vec<&'static str> {
        self.events().iter().map(E::event_type).collect()
    }
}

/// `build` (of `kind`), and `next`, which needs it.
fn pair_of(kind: &str) -> BlueprintSnapshot {
    let text = format!(
        "name: x\nsteps:\n  build: {{ run: {kind} }}\n  next: {{ run: noop, needs: [build] }}\n"
    );
    parse(&text).expect("valid").snapshot
}

#[tokio::test(start_paused = true)]
async fn a_noop_attempt_records_its_start_its_success_and_the_next_step_in_one_commit() {
    let fixture = Fixture::with(Sandbox::Refuses, pair_of("noop"), MemoryPayloads::default()).await;
    let appends = fixture.log.appends();
    assert_eq!(fixture.run().await, AttemptReport::Succeeded);
    assert_eq!(
        fixture.types()[2..],
        ["StepStarted", "StepSucceeded", "StepScheduled"]
    );
    assert!(
        matches!(&fixture.events()[4], E::StepScheduled { step, attempt: 1, not_before } if step == "next" && *not_before == t(1))
    );
    assert_eq!(fixture.log.appends() - appends, 1);
    assert_eq!(fixture.sandbox.runs.load(Ordering::SeqCst), 0);
}

#[tokio::test(start_paused = true)]
async fn a_noop_attempt_that_is_not_due_records_nothing() {
    let fixture = Fixture::with(Sandbox::Refuses, pair_of("noop"), MemoryPayloads::default()).await;
    fixture.set_now(t(-10));
    let recorded = fixture.events().len();
    // The attempt may start at t(0) only: nothing of the three is recorded before.
    assert_eq!(fixture.run().await, AttemptReport::NotYetDue(t(0)));
    assert_eq!(fixture.events().len(), recorded);
}

#[tokio::test(start_paused = true)]
async fn a_recorded_success_schedules_the_steps_it_makes_ready_in_the_same_commit() {
    let fixture = Fixture::with(
        Sandbox::Exits(0, ""),
        pair_of("script, with: { command: 'true' }"),
        MemoryPayloads::default(),
    )
    .await;
    assert_eq!(fixture.run().await, AttemptReport::Succeeded);
    let appends = fixture.log.appends();
    assert_eq!(
        fixture.types()[2..],
        ["StepStarted", "StepSucceeded", "StepScheduled"]
    );
    // The start is a commit of its own, before the sandbox runs; the outcome and what it makes
    // ready are the second.
    assert_eq!(appends, 3);
}

/// `build`'s first attempt, started by another runner, its lease lasting until `lease_until`.
fn started_elsewhere(lease_until: Timestamp) -> E {
    started_until("build", 1, lease_until)
}

#[tokio::test(start_paused = true)]
async fn an_attempt_runs_in_the_sandbox_under_a_lease_and_its_outputs_are_recorded() {
    let fixture = Fixture::new(Sandbox::Exits(0, "version=1.2\n")).await;
    assert_eq!(fixture.run().await, AttemptReport::Succeeded);
    let events = fixture.events();
    let lease_until = t(1) + TimeDelta::minutes(1) + ATTEMPT_LEASE_MARGIN;
    assert!(
        matches!(&events[2], E::StepStarted { lease_until: Some(until), .. } if *until == lease_until),
        "the lease is the step's timeout and a margin: {events:?}"
    );
    assert!(
        matches!(&events[3], E::StepSucceeded { outputs, .. } if outputs["version"] == "1.2"),
        "{events:?}"
    );
    let recorded = fixture
        .log
        .read_stream(fixture.deployment, 2)
        .await
        .expect("read");
    for envelope in recorded {
        assert_eq!(envelope.metadata.actor, "runner");
        assert_eq!(
            envelope.metadata.causation_id, fixture.cause,
            "the runner's events name the event that scheduled the attempt"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_job_delivered_again_while_its_attempt_runs_leaves_it_be_until_its_lease_ends() {
    let fixture = Fixture::new(Sandbox::Exits(0, "")).await;
    fixture.record(vec![started_elsewhere(t(121))]).await;

    assert_eq!(
        fixture.run().await,
        AttemptReport::StillRunning(t(121)),
        "a duplicate delivery: the attempt may well be running elsewhere"
    );
    assert_eq!(
        fixture.types().last(),
        Some(&"StepStarted"),
        "nothing recorded"
    );
    assert_eq!(
        fixture.sandbox.runs.load(Ordering::SeqCst),
        0,
        "not run twice"
    );

    fixture.set_now(t(121));
    assert_eq!(fixture.run().await, AttemptReport::Interrupted);
    let events = fixture.events();
    assert!(
        matches!(&events[3], E::StepAttemptFailed { error_class: ErrorClass::Interrupted, exit_code: None, message, .. } if message == Interruption::LeaseExpired.message()),
        "{events:?}"
    );
    assert!(
        matches!(
            &events[4],
            E::StepRetryScheduled {
                next_attempt: 2,
                ..
            }
        ),
        "interrupted attempts are retried by default: {events:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_runner_that_loses_its_job_stops_the_attempt_and_records_it_interrupted() {
    let fixture = Fixture::new(Sandbox::RunsUntilCancelled).await;
    fixture.lease.lost.store(true, Ordering::SeqCst);
    assert_eq!(fixture.run().await, AttemptReport::Interrupted);
    let events = fixture.events();
    assert!(
        matches!(&events[3], E::StepAttemptFailed { error_class: ErrorClass::Interrupted, message, .. } if message == Interruption::RunnerLostJob.message()),
        "{events:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn an_attempt_cancelled_while_it_runs_is_killed_and_records_nothing_more() {
    let fixture = Fixture::new(Sandbox::RunsUntilCancelled).await;
    let cancel = async {
        // Once the attempt has started, a user cancels the deployment.
        while !fixture.types().contains(&"StepStarted") {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        fixture
            .record(vec![
                E::CancellationRequested {
                    requested_by: "ada".into(),
                    reason: "wrong version".into(),
                },
                abandoned("build", 1, "cancelled by ada"),
            ])
            .await;
    };
    let (report, ()) = tokio::join!(fixture.run(), cancel);
    assert_eq!(report, AttemptReport::Abandoned);
    assert_eq!(
        fixture.types().last(),
        Some(&"StepAbandoned"),
        "the killed attempt records no outcome of its own"
    );
}

#[tokio::test(start_paused = true)]
async fn a_job_the_sandbox_refuses_fails_the_attempt_at_once_as_step_failed() {
    let fixture = Fixture::new(Sandbox::Refuses).await;
    assert_eq!(
        fixture.run().await,
        AttemptReport::Failed(ErrorClass::StepFailed)
    );
    let events = fixture.events();
    assert!(
        matches!(&events[3], E::StepAttemptFailed { error_class: ErrorClass::StepFailed, message, .. } if message.contains("NUL")),
        "{events:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_job_for_an_attempt_that_already_ended_is_obsolete() {
    let fixture = Fixture::new(Sandbox::Exits(0, "")).await;
    fixture
        .record(vec![started_elsewhere(t(121)), succeeded("build", 1)])
        .await;
    assert!(matches!(fixture.run().await, AttemptReport::Obsolete(_)));
    assert_eq!(fixture.sandbox.runs.load(Ordering::SeqCst), 0);
}

/// A `build` step running the Terraform configuration in `infra`, its `main.tf` recorded by hash
/// and stored in the payload store returned.
async fn terraform_blueprint() -> (BlueprintSnapshot, MemoryPayloads, String) {
    let mut blueprint =
        parse("name: x\nsteps:\n  build: { run: terraform, timeout: 1m, with: { dir: infra } }\n")
            .expect("valid")
            .snapshot;
    let payloads = MemoryPayloads::default();
    let text = "resource \"terraform_data\" \"x\" {}\n";
    let sha256 = payloads.put(text.as_bytes()).await.expect("put");
    blueprint.stored_files.insert(
        "infra/main.tf".into(),
        StoredFile {
            size: text.len() as u64,
            sha256: sha256.clone(),
        },
    );
    (blueprint, payloads, sha256)
}

impl Fixture {
    /// The text the sandbox was given at `path` under `/work`.
    fn sandbox_file(&self, path: &str) -> Option<String> {
        self.sandbox
            .files
            .lock()
            .expect("files")
            .iter()
            .find(|(at, _)| at.as_os_str() == path)
            .map(|(_, text)| String::from_utf8_lossy(text).into_owned())
    }
}

/// Runs the Terraform step of `blueprint` once, its files in `payloads`: the `main.tf` its
/// sandbox was given.
async fn main_tf_run(blueprint: BlueprintSnapshot, payloads: MemoryPayloads) -> Option<String> {
    let fixture = Fixture::with(Sandbox::Exits(1, ""), blueprint, payloads).await;
    fixture.run().await;
    assert_eq!(fixture.sandbox.runs.load(Ordering::SeqCst), 1);
    fixture.sandbox_file("config/main.tf")
}

#[tokio::test(start_paused = true)]
async fn a_step_runs_the_files_it_fetched_by_the_recorded_hash() {
    let (blueprint, payloads, _) = terraform_blueprint().await;
    assert_eq!(
        main_tf_run(blueprint, payloads).await.as_deref(),
        Some("resource \"terraform_data\" \"x\" {}\n")
    );
}

#[tokio::test(start_paused = true)]
async fn an_attempt_s_start_records_the_fingerprint_of_what_it_runs_with() {
    let (blueprint, payloads, sha256) = terraform_blueprint().await;
    let fixture = Fixture::with(Sandbox::Exits(0, ""), blueprint, payloads).await;
    fixture.run().await;
    let events = fixture.events();
    let Some(E::StepStarted {
        fingerprint: Some(fingerprint),
        ..
    }) = events.get(2)
    else {
        panic!("the start carries a fingerprint: {events:?}");
    };
    assert_eq!(fingerprint.parts["files.infra/main.tf"], sha256);
    for part in ["kind", "settings", "limits"] {
        assert!(
            fingerprint.parts.contains_key(part),
            "{part}: {fingerprint:?}"
        );
    }
    let state = fixture
        .log
        .load(fixture.deployment)
        .await
        .expect("load")
        .state;
    let step = &state.steps["build"];
    assert_eq!(step.started_fingerprint.as_ref(), Some(fingerprint));
}

#[tokio::test(start_paused = true)]
async fn a_deployment_recorded_with_its_files_inline_runs_them_as_recorded() {
    // As recorded before the payload store: the text in `files`, nothing in the store.
    let mut blueprint =
        parse("name: x\nsteps:\n  build: { run: terraform, timeout: 1m, with: { dir: infra } }\n")
            .expect("valid")
            .snapshot;
    blueprint
        .files
        .insert("infra/main.tf".into(), "# recorded inline\n".into());
    assert_eq!(
        main_tf_run(blueprint, MemoryPayloads::default())
            .await
            .as_deref(),
        Some("# recorded inline\n")
    );
}

#[tokio::test(start_paused = true)]
async fn a_step_whose_stored_file_was_changed_fails_without_running() {
    let (blueprint, payloads, sha256) = terraform_blueprint().await;
    payloads.overwrite(&sha256, b"resource \"evil\" \"x\" {}".to_vec());
    let fixture = Fixture::with(Sandbox::Exits(0, ""), blueprint, payloads).await;

    assert_eq!(
        fixture.run().await,
        AttemptReport::Failed(ErrorClass::StepFailed)
    );
    assert_eq!(fixture.sandbox.runs.load(Ordering::SeqCst), 0, "never run");
    let events = fixture.events();
    assert!(
        matches!(&events[3], E::StepAttemptFailed { message, .. }
            if message.contains("infra/main.tf") && message.contains("changed or damaged")),
        "{events:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_step_whose_files_cannot_be_fetched_now_leaves_the_job_to_be_retried() {
    struct Down;
    #[async_trait]
    impl StorePayloads for Down {
        async fn put(&self, _: &[u8]) -> Result<String, PayloadError> {
            Err(PayloadError::Unavailable("down".into()))
        }
        async fn get(&self, _: &str) -> Result<Vec<u8>, PayloadError> {
            Err(PayloadError::Unavailable("down".into()))
        }
    }
    let (blueprint, payloads, _) = terraform_blueprint().await;
    let fixture = Fixture::with(Sandbox::Exits(0, ""), blueprint, payloads).await;
    let error = fixture
        .try_run(&Down, LoopbackEgress::Operator)
        .await
        .expect_err("retried");
    assert!(error.to_string().contains("infra/main.tf"), "{error}");
    assert_eq!(fixture.sandbox.runs.load(Ordering::SeqCst), 0, "never run");
    assert_eq!(fixture.types().last(), Some(&"StepStarted"));
}

/// The fingerprint of the kit's host key (made by `ssh-keygen -t ed25519`), as `ssh-keygen -l`
/// shows it.
const HOST_KEY_FINGERPRINT: &str = "SHA256:GpulLj0N5uMRxkGkIwsvYxaagsDoerjfcTR0ZcWIKVo";

#[tokio::test(start_paused = true)]
async fn keys_an_attempt_learned_are_pinned_before_its_outcome_is_recorded() {
    let learned = format!("[127.0.0.1]:2222 ssh-ed25519 {HOST_KEY}\n");
    let fixture = Fixture::new(Sandbox::Leaves(
        0,
        "",
        vec![(overture_runner::host_keys::KNOWN_HOSTS_FILE, learned)],
    ))
    .await;
    assert_eq!(fixture.run().await, AttemptReport::Succeeded);
    // The deployment's one step: its success ends it, and it sealed nothing to purge.
    assert_eq!(
        fixture.types()[2..],
        [
            "StepStarted",
            "HostKeysPinned",
            "StepSucceeded",
            "SecretsPurged",
            "DeploymentSucceeded"
        ]
    );
    let events = fixture.events();
    let E::HostKeysPinned {
        server,
        host,
        learned,
        keys,
    } = &events[3]
    else {
        panic!("{events:?}");
    };
    assert_eq!(
        (server.as_str(), host.as_str()),
        ("[127.0.0.1]:2222", "[127.0.0.1]:2222")
    );
    assert_eq!(*learned, overture_events::HostKeySource::FirstUse);
    assert_eq!(keys[0].fingerprint, HOST_KEY_FINGERPRINT);
}

#[tokio::test(start_paused = true)]
async fn a_refused_host_key_fails_the_attempt_as_host_key_mismatch_never_retried() {
    const SSH: &str = "@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\n\
The fingerprint for the ED25519 key sent by the remote host is\n\
SHA256:wLXqmnVJ+hqOzcoyXH+5QQdBBiuOZSu8Tk1z0WcmaZ4.\n\
Host key for 10.0.0.5 has changed and you have requested strict checking.\n\
Host key verification failed.\n";
    let fixture = Fixture::new(Sandbox::Leaves(4, SSH, vec![])).await;
    fixture
        .record(vec![E::HostKeysPinned {
            server: "web-1".into(),
            host: "10.0.0.5".into(),
            learned: overture_events::HostKeySource::Console,
            keys: vec![overture_domain::host_keys::key("ssh-ed25519", HOST_KEY).expect("a key")],
        }])
        .await;
    assert_eq!(
        fixture.run().await,
        AttemptReport::Failed(ErrorClass::HostKeyMismatch)
    );
    let events = fixture.events();
    let failed = events
        .iter()
        .find_map(|e| match e {
            E::StepAttemptFailed {
                error_class,
                message,
                ..
            } => Some((*error_class, message.clone())),
            _ => None,
        })
        .expect("a failed attempt");
    assert_eq!(failed.0, ErrorClass::HostKeyMismatch);
    assert!(
        failed.1.starts_with(&format!(
            "the SSH host key of server `web-1` (10.0.0.5) is not the one pinned (pinned ssh-ed25519 {HOST_KEY_FINGERPRINT} from its console output; it offered ED25519 SHA256:wLXqmnVJ+hqOzcoyXH+5QQdBBiuOZSu8Tk1z0WcmaZ4)"
        )),
        "{}",
        failed.1
    );
    assert!(
        fixture.types().contains(&"StepFailed") && !fixture.types().contains(&"StepRetryScheduled"),
        "{:?}",
        fixture.types()
    );
}

#[tokio::test(start_paused = true)]
async fn an_attempt_runs_within_its_step_s_limits_and_one_that_reaches_them_fails_naming_the_limit()
{
    let blueprint = parse(
        "name: x\nsteps:\n  build: { run: script, limits: { memory: 64MiB, pids: 32 }, with: { command: 'make' } }\n",
    )
    .expect("valid")
    .snapshot;
    let fixture = Fixture::with(
        Sandbox::RunsOutOfMemory,
        blueprint,
        MemoryPayloads::default(),
    )
    .await;
    assert_eq!(
        fixture.run().await,
        AttemptReport::Failed(ErrorClass::StepFailed)
    );
    let limits = fixture
        .sandbox
        .limits
        .lock()
        .expect("limits")
        .expect("a job ran");
    assert_eq!((limits.memory_bytes, limits.pids), (64 << 20, 32));
    let failed = fixture
        .events()
        .into_iter()
        .find_map(|event| match event {
            E::StepAttemptFailed {
                error_class,
                exit_code,
                message,
                ..
            } => Some((error_class, exit_code, message)),
            _ => None,
        })
        .expect("the attempt failed");
    assert_eq!(
        failed,
        (
            ErrorClass::StepFailed,
            None,
            "out of memory (limit 64 MiB)".to_owned()
        )
    );
}

/// `build` waits for SSH on one host, and provides the service `app` there.
fn providing() -> BlueprintSnapshot {
    parse(
        "name: x\nsteps:\n  build:\n    run: wait-ssh\n    with: { hosts: ['10.0.0.5:22'] }\n    provides: { service: app, port: 8000, check: tcp }\n",
    )
    .expect("valid")
    .snapshot
}

/// What the wait for SSH heard from the host.
fn banner() -> (&'static str, String) {
    (
        "answers.tsv",
        "10.0.0.5:22\t12\tSSH-2.0-OpenSSH_9.2\n".into(),
    )
}

#[tokio::test(start_paused = true)]
async fn a_step_that_provides_a_service_registers_each_host_that_answered_its_check_with_its_success(
) {
    let answered = (
        "service-answers.tsv",
        "10.0.0.5\taccepted a connection\n".to_owned(),
    );
    let fixture = Fixture::with(
        Sandbox::Leaves(0, "", vec![banner(), answered]),
        providing(),
        MemoryPayloads::default(),
    )
    .await;
    assert_eq!(fixture.run().await, AttemptReport::Succeeded);
    assert_eq!(
        fixture.sandbox.runs.load(Ordering::SeqCst),
        2,
        "the step, then its service's check in a sandbox of its own"
    );
    assert_eq!(
        fixture.types()[2..6],
        [
            "StepStarted",
            "StepNetworkPolicyApplied",
            "ServiceRegistered",
            "StepSucceeded"
        ]
    );
    let events = fixture.events();
    assert!(
        matches!(&events[3], E::StepNetworkPolicyApplied { allowed, .. }
            if allowed.contains(&"10.0.0.5:8000".to_owned())),
        "with no bastion, the check reaches the service's port directly: {events:?}"
    );
    assert!(
        matches!(&events[4], E::ServiceRegistered { service, step, host, address, port: 8000 }
            if service == "app" && step == "build" && host == "10.0.0.5:22" && address == "10.0.0.5"),
        "{events:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_service_that_does_not_answer_its_check_is_not_registered_and_fails_the_attempt() {
    // The step's run succeeds; its check leaves no answer.
    let fixture = Fixture::with(
        Sandbox::Leaves(0, "", vec![banner()]),
        providing(),
        MemoryPayloads::default(),
    )
    .await;
    assert_eq!(
        fixture.run().await,
        AttemptReport::Failed(ErrorClass::StepFailed)
    );
    let events = fixture.events();
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, E::ServiceRegistered { .. })),
        "{events:?}"
    );
    assert!(
        events.iter().any(|e| matches!(e, E::StepAttemptFailed { message, .. }
            if message.contains("service `app` did not answer its check (tcp) within 30s on 10.0.0.5:8000"))),
        "{events:?}"
    );
}

/// Runs `build`, an http step on `url`, with what the operator allows of the host's loopback:
/// the report, and how many times the sandbox ran.
async fn call(url: &str, egress: &str, loopback: LoopbackEgress) -> (AttemptReport, usize, Vec<E>) {
    let blueprint = parse(&format!(
        "name: x\negress: {egress}\nsteps:\n  build: {{ run: http, with: {{ url: \"{url}\" }} }}\n"
    ))
    .expect("valid")
    .snapshot;
    let fixture = Fixture::with(Sandbox::Exits(0, ""), blueprint, MemoryPayloads::default()).await;
    let report = fixture
        .try_run(&fixture.payloads, loopback)
        .await
        .expect("handled");
    (
        report,
        fixture.sandbox.runs.load(Ordering::SeqCst),
        fixture.events(),
    )
}

#[tokio::test(start_paused = true)]
async fn an_http_step_to_a_destination_outside_its_policy_fails_as_egress_refused_before_its_sandbox_runs(
) {
    for (url, egress, loopback, named) in [
        (
            "http://127.0.0.1:8080/",
            "[]",
            LoopbackEgress::Refused,
            "127.0.0.1:8080 is on the engine host's loopback, which this engine lets no step reach",
        ),
        (
            "http://127.0.0.1:8080/",
            "[\"127.0.0.1:8080\"]",
            LoopbackEgress::Refused,
            "127.0.0.1:8080 is on the engine host's loopback, which this engine lets no step reach",
        ),
        (
            "http://127.0.0.1:8080/",
            "[]",
            LoopbackEgress::Declared,
            "declare \"127.0.0.1:8080\"",
        ),
        (
            "http://169.254.169.254/latest/meta-data/",
            "[]",
            LoopbackEgress::Operator,
            "169.254.169.254:80 is link-local",
        ),
    ] {
        let (report, runs, events) = call(url, egress, loopback).await;
        assert_eq!(
            report,
            AttemptReport::Failed(ErrorClass::EgressRefused),
            "{url} {loopback:?}"
        );
        assert_eq!(runs, 0, "{url}: the sandbox never ran");
        let failed = events.iter().find_map(|event| match event {
            E::StepAttemptFailed {
                error_class,
                message,
                ..
            } => Some((*error_class, message.clone())),
            _ => None,
        });
        let (class, message) = failed.expect("the attempt failed");
        assert_eq!(class, ErrorClass::EgressRefused);
        assert!(message.contains(named), "{message}");
        assert!(
            events.iter().any(|event| matches!(
                event,
                E::StepFailed {
                    error_class: ErrorClass::EgressRefused,
                    ..
                }
            )),
            "failed for good, never retried: {events:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn an_http_step_to_a_declared_loopback_port_runs_where_the_operator_allows_it() {
    for loopback in [LoopbackEgress::Declared, LoopbackEgress::Operator] {
        let (report, runs, _) =
            call("http://127.0.0.1:8080/", "[\"127.0.0.1:8080\"]", loopback).await;
        assert_ne!(
            report,
            AttemptReport::Failed(ErrorClass::EgressRefused),
            "{loopback:?}"
        );
        assert_eq!(runs, 1, "{loopback:?}");
    }
}
