//! A deployment's past from its log, given/when/then: given a stream, when it is read at a
//! moment, then these records (or this error); and folding it is deterministic.

use chrono::TimeDelta;
use overture_domain::deployment::{Deployment, DeploymentCommand as C};
use overture_domain::history::{check_determinism, events_of, prefix, HistoryError, Moment};
use overture_domain::projection::{project, DeploymentStatus};
use overture_domain::testing::events::blueprint;
use overture_domain::testing::{t, Life};
use overture_domain::StepStatus;
use overture_events::{DeploymentEvent as E, DeploymentId, Timestamp};
use uuid::Uuid;

/// prepare → flaky; flaky retries step-failed once, 5 s later; a sibling `slow` runs beside it
/// and gets a grace period of 60 s when flaky fails for good.
const BLUEPRINT: &str = r#"
name: flaky
on_failure: { grace: 60s }
steps:
  prepare: { run: noop }
  flaky: { run: noop, needs: [prepare], retry: { step-failed: { times: 1, wait: 5s } } }
  slow: { run: noop }
"#;

/// A whole deployment, decided command by command: prepare succeeds; flaky fails, is retried
/// and fails again while slow runs; slow is abandoned at the end of the grace period; the
/// secrets are purged and the deployment fails.
fn failed_after_a_retry() -> Life {
    let mut recorder = Life::requested(blueprint(BLUEPRINT));
    recorder
        .advance(1)
        .start(2, "prepare", 1)
        .start(2, "slow", 1)
        .succeed(3, "prepare", 1)
        .advance(3)
        .start(4, "flaky", 1)
        .fail(5, "flaky", 1)
        .start(10, "flaky", 2)
        .fail(11, "flaky", 2)
        .advance(71)
        .handle(72, C::RecordSecretsPurged)
        .advance(72);
    recorder
}

#[test]
fn given_a_retried_and_failed_deployment_when_folded_twice_then_every_prefix_decides_alike() {
    let given = failed_after_a_retry();
    let (events, times): (Vec<E>, Vec<Timestamp>) = given.events.iter().cloned().unzip();
    assert!(
        given.state.is_finished(),
        "the stream runs to its end: {events:?}"
    );

    // Every instant something was recorded at, and the ones between the grace period's start
    // and its end, where advancing decides differently.
    let moments: Vec<Timestamp> = times.into_iter().chain([t(30), t(70)]).collect();
    assert_eq!(check_determinism(&events, &moments), Ok(()));
}

#[test]
fn given_a_stream_when_read_at_a_revision_then_it_holds_the_events_up_to_it() {
    let id = DeploymentId::from_uuid(Uuid::now_v7());
    let records = failed_after_a_retry().envelopes(id);
    let last = records.len() as u64 - 1;
    for revision in 0..=last {
        let then = prefix(&records, Moment::Revision(revision)).expect("within the stream");
        assert_eq!(then, &records[..=revision as usize]);
        let view = project(None, then).expect("folds").view.expect("a view");
        assert_eq!(view.revision, revision);
    }
    let view_then = |moment| {
        let then = prefix(&records, moment).expect("within the stream");
        project(None, then).expect("folds").view.expect("a view")
    };
    assert_eq!(
        view_then(Moment::Revision(0)).steps["flaky"].status,
        StepStatus::Pending
    );
    assert_eq!(
        view_then(Moment::Revision(last)).status,
        DeploymentStatus::Failed
    );
    assert_eq!(
        prefix(&records, Moment::Revision(last + 1)),
        Err(HistoryError::PastTheEnd {
            asked: last + 1,
            first: 0,
            last
        })
    );
}

#[test]
fn given_a_stream_when_read_at_an_instant_then_it_holds_every_event_recorded_by_then() {
    let id = DeploymentId::from_uuid(Uuid::now_v7());
    let records = failed_after_a_retry().envelopes(id);
    let after = |at: i64| {
        prefix(&records, Moment::Time(t(at)))
            .expect("within the stream")
            .len()
    };
    let recorded_by = |at: i64| {
        records
            .iter()
            .filter(|r| r.metadata.recorded_at <= t(at))
            .count()
    };
    for at in 0..=80 {
        assert_eq!(after(at), recorded_by(at), "at t({at})");
    }
    // Between the retry's wait and its start, flaky waits to be retried.
    let then = prefix(&records, Moment::Time(t(7))).expect("within the stream");
    let state = Deployment::replay(events_of(then).expect("deployment events"));
    assert_eq!(state.steps["flaky"].status, StepStatus::Retrying);
    assert_eq!(state.steps["flaky"].attempt, 2);

    let first = records[0].metadata.recorded_at;
    assert_eq!(
        prefix(&records, Moment::Time(first - TimeDelta::nanoseconds(1))),
        Err(HistoryError::BeforeTheStart {
            asked: first - TimeDelta::nanoseconds(1),
            first
        })
    );
    assert_eq!(prefix(&[], Moment::Revision(0)), Err(HistoryError::Empty));
}
