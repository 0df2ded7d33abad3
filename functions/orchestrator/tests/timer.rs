//! The orchestrator's timers on AWS, `on_timer_messages`, fed an SQS batch from a JSON fixture
//! in the shape Lambda delivers, on in-memory fakes of its ports.

mod support;

use aws_lambda_events::event::sqs::SqsEvent;
use overture_domain::testing::events::{attempt_failed, failed, started_until};
use overture_events::{DeploymentEvent as E, ErrorClass};
use overture_kit::memory::MemoryLog;
use overture_orchestrator::on_timer_messages;
use overture_orchestrator::queued::QueueOn;
use overture_orchestrator::timer::on_timer_message;
use support::{at, deployment, ports, record, FixedClock, SentJobs, Throttled};

fn batch() -> SqsEvent {
    serde_json::from_str(include_str!("fixtures/sqs-timer-messages.json")).expect("the fixture")
}

/// lint failed for good at 09:58 while build ran; build may finish until 10:00.
async fn failing_in_grace() -> MemoryLog {
    let log = MemoryLog::new(at("09:58"));
    let mut history = support::two_steps_scheduled_at_nine_fifty();
    history.extend([
        started_until("build", 1, at("11:00")),
        started_until("lint", 1, at("11:00")),
        attempt_failed("lint", 1, ErrorClass::StepFailed),
        failed("lint", 1),
        E::FailureGracePeriodStarted {
            failed_step: "lint".into(),
            deadline: at("10:00"),
        },
    ]);
    record(&log, deployment(), "runner", history).await;
    log
}

fn types(log: &MemoryLog) -> Vec<&'static str> {
    log.events(deployment())
        .iter()
        .map(E::event_type)
        .skip(8)
        .collect()
}

#[tokio::test]
async fn a_due_timer_moves_its_deployment_on_and_an_early_one_is_sent_on_for_the_rest_of_its_wait()
{
    let log = failing_in_grace().await;
    let work = support::queues_apart();
    let timers = SentJobs::default();
    let clock = FixedClock(at("10:05"));
    let ports = ports(&log, &work, &clock);
    let response = on_timer_messages(&batch(), &ports, &timers)
        .await
        .expect("answered with partial failures");

    let kept = support::kept(&response);
    assert_eq!(
        kept,
        ["m-no-deployment", "m-attempt", "m-unreadable"],
        "the due and the early timer are done with; the others are kept"
    );
    assert_eq!(
        types(&log),
        ["StepAbandoned", "SecretsPurged", "DeploymentFailed"],
        "the deadline passed: build is abandoned and the deployment ends"
    );
    let sent_on = timers.jobs();
    assert_eq!(sent_on.len(), 1, "{sent_on:?}");
    assert_eq!(sent_on[0].due_at, at("13:00"), "still due when it was");
    assert_eq!(sent_on[0].body["kind"], "wake");
    assert!(work.attempts.jobs().is_empty() && work.timers.jobs().is_empty());
}

#[tokio::test]
async fn a_timer_delivered_twice_moves_its_deployment_on_once() {
    let log = failing_in_grace().await;
    let work = QueueOn::one(SentJobs::default());
    let clock = FixedClock(at("10:05"));
    let ports = ports(&log, &work, &clock);
    let due = &batch().records[0];
    for _ in 0..2 {
        on_timer_message(due, &ports, &SentJobs::default())
            .await
            .expect("handled");
    }
    assert_eq!(
        types(&log),
        ["StepAbandoned", "SecretsPurged", "DeploymentFailed"]
    );
}

#[tokio::test]
async fn what_cannot_be_handled_says_whether_handling_it_again_may_help() {
    let log = failing_in_grace().await;
    let work = QueueOn::one(SentJobs::default());
    let clock = FixedClock(at("10:05"));
    let ports = ports(&log, &work, &clock);
    let records = batch().records;
    let error_type = |message| {
        let ports = &ports;
        async move {
            on_timer_message(message, ports, &Throttled)
                .await
                .expect_err("not handled")
                .error_type()
        }
    };
    assert_eq!(
        error_type(&records[1]).await,
        "Retryable",
        "an early timer the queue would not take back"
    );
    assert_eq!(
        error_type(&records[2]).await,
        "NonRetryable",
        "no such deployment"
    );
    assert_eq!(
        error_type(&records[3]).await,
        "NonRetryable",
        "the runner's"
    );
    assert_eq!(error_type(&records[4]).await, "NonRetryable", "not a job");
    assert!(types(&log).is_empty(), "nothing was recorded");
}
