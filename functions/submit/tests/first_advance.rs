//! A submit, a redeploy and a redrive record the request and the steps it makes ready in one
//! append (one commit), scheduled at the time the clock port gives; a store that cannot hold
//! both in one append gets the request alone, and the orchestrator schedules the steps, as it
//! does for a user who bears its name.

mod support;

use std::sync::LazyLock;

use async_trait::async_trait;
use overture_domain::secret::SecretValues;
use overture_domain::testing::events::{advance, failure, scheduled, start, success};
use overture_domain::testing::t;
use overture_domain::DeploymentCommand;
use overture_events::{DeploymentEvent, DeploymentId, ErrorClass};
use overture_kit::memory::{FixedClock, MemoryLog};
use overture_kit::payload::MemoryPayloads;
use overture_kit::{execute, Cause, DeploymentLog, Loaded, LogError, ORCHESTRATOR_ACTOR};
use overture_submit::again::{redeploy, redrive, Redeploy, Redrive};
use overture_submit::{submit, SubmitPorts};
use support::{submission, NothingToSeal};

/// `build` and `lint` need nothing; `ship` needs both.
const BLUEPRINT: &str = "name: first
steps:
  build: { run: noop }
  lint: { run: noop }
  ship: { run: noop, needs: [build, lint] }
";

/// The submit's ports on this log and clock; nothing is sealed and the files are kept in
/// memory.
fn ports<'a>(log: &'a dyn DeploymentLog, clock: &'a FixedClock) -> SubmitPorts<'a> {
    // No blueprint here has files: the store stays empty, so the tests may share it.
    static PAYLOADS: LazyLock<MemoryPayloads> = LazyLock::new(MemoryPayloads::default);
    SubmitPorts {
        log,
        seals: &NothingToSeal,
        payloads: &*PAYLOADS,
        clock,
    }
}

fn types(events: &[DeploymentEvent]) -> Vec<&'static str> {
    events.iter().map(DeploymentEvent::event_type).collect()
}

#[tokio::test]
async fn a_submit_records_the_request_and_its_first_steps_in_one_append() {
    let log = MemoryLog::new(t(0));
    let clock = FixedClock(t(5));
    let ports = ports(&log, &clock);
    let id = submit(submission(BLUEPRINT), &ports)
        .await
        .expect("submitted");

    assert_eq!(log.appends(), 1, "one commit");
    let events = log.events(id);
    assert_eq!(
        types(&events),
        ["DeploymentRequested", "StepScheduled", "StepScheduled"]
    );
    // `ship` waits for the others; the first two may start at once.
    assert_eq!(
        events[1..],
        [scheduled("build", 1, 5), scheduled("lint", 1, 5)]
    );
}

#[tokio::test]
async fn a_redeploy_records_its_request_and_its_first_steps_in_one_append() {
    let log = MemoryLog::new(t(0));
    let clock = FixedClock(t(7));
    let ports = ports(&log, &clock);
    let from = submit(submission(BLUEPRINT), &ports)
        .await
        .expect("submitted");
    let Some(DeploymentEvent::DeploymentRequested {
        blueprint,
        blueprint_hash,
        params,
        ..
    }) = log.events(from).into_iter().next()
    else {
        panic!("the first event is the request");
    };

    let id = redeploy(
        Redeploy {
            from,
            tenant: "acme".into(),
            requested_by: "ada".into(),
            blueprint,
            blueprint_hash,
            params,
            recorded_cloud: None,
            secrets: SecretValues::new(),
            cloud: None,
            name: None,
        },
        &ports,
    )
    .await
    .expect("redeployed");

    assert_eq!(log.appends(), 2, "one commit for each deployment");
    assert_eq!(
        log.events(id)[1..],
        [scheduled("build", 1, 7), scheduled("lint", 1, 7)]
    );
}

/// Records a command as the runner or the orchestrator would.
async fn record(log: &MemoryLog, id: DeploymentId, command: DeploymentCommand) {
    let cause = Cause::new("test", id, uuid::Uuid::now_v7());
    execute(log, id, "acme", &cause, |_| command.clone())
        .await
        .expect("the log works")
        .expect("the command is accepted");
}

#[tokio::test]
async fn a_redrive_records_itself_and_the_steps_it_makes_ready_in_one_append() {
    let log = MemoryLog::new(t(0));
    let clock = FixedClock(t(1));
    let ports = ports(&log, &clock);
    let id = submit(submission(BLUEPRINT), &ports)
        .await
        .expect("submitted");
    // `build` succeeds, `lint` fails for good, and the deployment ends failed.
    for step in ["build", "lint"] {
        record(&log, id, start(step, 1, 2)).await;
    }
    record(&log, id, success("build", 1)).await;
    record(&log, id, failure("lint", 1, ErrorClass::StepFailed, 3)).await;
    record(&log, id, DeploymentCommand::RecordSecretsPurged).await;
    record(&log, id, advance(3)).await;
    assert!(log.load(id).await.expect("loads").state.is_finished());
    let before = log.events(id).len();
    let appends = log.appends();

    let clock = FixedClock(t(9));
    let ports = SubmitPorts {
        clock: &clock,
        ..ports
    };
    redrive(
        Redrive {
            deployment: id,
            requested_by: "ada".into(),
            secrets: SecretValues::new(),
            cloud: None,
        },
        &ports,
    )
    .await
    .expect("redriven");

    assert_eq!(log.appends() - appends, 1, "one commit");
    let events = log.events(id);
    assert_eq!(
        types(&events[before..]),
        ["DeploymentRedriven", "StepScheduled"]
    );
    // `lint` runs again as its second attempt; `ship` waits for it.
    assert_eq!(events[before + 1], scheduled("lint", 2, 9));
}

/// A log that refuses, as too large, an append of more events than it holds (as DynamoDB's
/// transactions hold at most 100).
struct Holding {
    log: MemoryLog,
    at_most: usize,
}

#[async_trait]
impl DeploymentLog for Holding {
    async fn load(&self, deployment: DeploymentId) -> Result<Loaded, LogError> {
        self.log.load(deployment).await
    }

    async fn append(
        &self,
        deployment: DeploymentId,
        tenant: &str,
        expected: Option<u64>,
        events: Vec<DeploymentEvent>,
        cause: &Cause,
    ) -> Result<(), LogError> {
        if events.len() > self.at_most {
            return Err(LogError::TooLarge {
                deployment,
                reason: format!("{} events", events.len()),
            });
        }
        self.log
            .append(deployment, tenant, expected, events, cause)
            .await
    }
}

#[tokio::test]
async fn a_store_that_cannot_hold_the_first_steps_with_the_request_records_the_request_alone() {
    let log = MemoryLog::new(t(0));
    let holding = Holding {
        log: log.clone(),
        at_most: 2,
    };
    let clock = FixedClock(t(1));
    let ports = ports(&holding, &clock);
    let id = submit(submission(BLUEPRINT), &ports)
        .await
        .expect("submitted");

    // The orchestrator schedules `build` and `lint` when it sees the request.
    assert_eq!(types(&log.events(id)), ["DeploymentRequested"]);
    assert_eq!(log.appends(), 1);
}

#[tokio::test]
async fn a_user_named_as_the_orchestrator_gets_the_request_alone() {
    let log = MemoryLog::new(t(0));
    let clock = FixedClock(t(1));
    let ports = ports(&log, &clock);
    let mut named = submission(BLUEPRINT);
    named.requested_by = ORCHESTRATOR_ACTOR.into();
    let id = submit(named, &ports).await.expect("submitted");

    // Steps scheduled under the orchestrator's name would be taken for its own, already queued.
    assert_eq!(types(&log.events(id)), ["DeploymentRequested"]);
}
