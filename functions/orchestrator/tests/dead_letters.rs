//! Dead letters on AWS, `on_dead_letters`, fed a batch of the jobs' dead-letter queue from a
//! JSON fixture in the shape Lambda delivers, on in-memory fakes of the orchestrator's ports.

mod support;

use aws_lambda_events::event::sqs::SqsEvent;
use overture_domain::testing::events::started_until;
use overture_events::{DeploymentEvent as E, ErrorClass};
use overture_kit::memory::MemoryLog;
use overture_orchestrator::dead_letters::on_dead_letter;
use overture_orchestrator::on_dead_letters;
use overture_orchestrator::queued::QueueOn;
use overture_orchestrator::OrchestratorPorts;
use support::{at, deployment, ports, record, FixedClock, Nothing, SentJobs, DEPLOYMENT};

fn batch() -> SqsEvent {
    serde_json::from_str(include_str!("fixtures/sqs-dead-letters.json")).expect("the fixture")
}

/// build's first attempt waits (its job was never run through); lint's first attempt runs,
/// its lease until `lint_lease`.
async fn two_steps(lint_lease: &str) -> MemoryLog {
    let log = MemoryLog::new(at("09:50"));
    let mut history = support::two_steps_scheduled_at_nine_fifty();
    history.push(started_until("lint", 1, at(lint_lease)));
    record(&log, deployment(), "runner", history).await;
    log
}

/// The events after the first four, as (type, step) where they name one.
fn recorded(log: &MemoryLog) -> Vec<(&'static str, String)> {
    log.events(deployment())
        .into_iter()
        .skip(4)
        .map(|event| {
            let step = event.data()["step"].as_str().unwrap_or_default().to_owned();
            (event.event_type(), step)
        })
        .collect()
}

#[tokio::test]
async fn a_dead_lettered_attempt_is_recorded_and_its_retry_queued_once() {
    let log = two_steps("10:00").await;
    let work = support::queues_apart();
    let clock = FixedClock(at("10:05"));
    let ports = ports(&log, &work, &clock);
    let response = on_dead_letters(&batch(), &ports)
        .await
        .expect("answered with partial failures");
    let kept = support::kept(&response);
    assert_eq!(kept, ["m-unreadable"], "a message that is no job stays");

    let step = |s: &str| s.to_owned();
    assert_eq!(
        recorded(&log),
        [
            ("StepJobDeadLettered", step("build")),
            ("StepAttemptFailed", step("build")),
            ("StepRetryScheduled", step("build")),
            ("StepJobDeadLettered", step("lint")),
            ("StepAttemptFailed", step("lint")),
            ("StepRetryScheduled", step("lint")),
        ],
        "each attempt failed as interrupted, and the rule for that class retries it"
    );
    let events = log.events(deployment());
    assert!(
        events.iter().any(|e| matches!(e,
            E::StepJobDeadLettered { step, receives: 6, .. } if step == "build")),
        "the deliveries SQS counted are recorded"
    );
    assert!(events.iter().any(|e| matches!(
        e,
        E::StepAttemptFailed {
            error_class: ErrorClass::Interrupted,
            ..
        }
    )));
    let queued: Vec<_> = work.attempts.jobs().into_iter().map(|j| j.key).collect();
    assert_eq!(
        queued,
        [
            format!("run/{DEPLOYMENT}/build/2"),
            format!("run/{DEPLOYMENT}/lint/2"),
        ],
        "each retry queued once"
    );

    // Delivered again (SQS delivers at least once): nothing more.
    let again = on_dead_letters(&batch(), &ports)
        .await
        .expect("answered with partial failures");
    assert_eq!(again.batch_item_failures.len(), 1);
    assert_eq!(recorded(&log).len(), 6);
    assert_eq!(work.attempts.jobs().len(), 2);
}

#[tokio::test]
async fn a_dead_letter_of_a_running_attempt_waits_for_its_lease_and_no_job_is_lost_silently() {
    let log = two_steps("11:00").await;
    let work = QueueOn::one(SentJobs::default());
    let clock = FixedClock(at("10:05"));
    let ports = ports(&log, &work, &clock);
    let records = batch().records;
    let error = on_dead_letter(&records[1], &ports)
        .await
        .expect_err("lint may still be running");
    assert_eq!(error.error_type(), "Retryable", "{error}");
    assert!(recorded(&log).is_empty());

    let error = on_dead_letter(&records[2], &ports)
        .await
        .expect_err("not a job");
    assert_eq!(error.error_type(), "NonRetryable", "{error}");

    // A batch of only these fails its invocation, as one that may pass: the lease ends.
    let mut neither = batch();
    neither.records = records[1..].to_vec();
    let failed = on_dead_letters(&neither, &ports)
        .await
        .expect_err("no dead letter of the batch was recorded");
    assert_eq!(failed.error_type(), "Retryable", "{failed}");
    assert!(recorded(&log).is_empty());

    let late = OrchestratorPorts {
        services: &Nothing,
        clock: &FixedClock(at("11:00")),
        ..ports
    };
    on_dead_letter(&records[1], &late)
        .await
        .expect("recorded once the lease ended");
    assert_eq!(
        recorded(&log)[0],
        ("StepJobDeadLettered", "lint".to_owned())
    );
}
