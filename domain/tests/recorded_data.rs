//! The engine never panics on recorded data (issue 27, defect 8): given any small blueprint,
//! however extreme its durations and retry counts (as recorded before the 30-day bound, or by a
//! door that did not check), when any sequence of commands arrives at any instants, then every
//! command is decided (events or a refusal) and every event folds, without a panic.
//!
//! Beside the property, the cases that were found: a retry `wait` and a `grace` of 2^63 ms.

use std::collections::BTreeMap;

use chrono::{DateTime, TimeDelta, Utc};
use overture_domain::blueprint::{parse, BlueprintError};
use overture_domain::deployment::{
    actions, later, BastionAccess, Deployment, DeploymentCommand as C, DeploymentError,
    DeploymentState, Interruption, PinnedHost,
};
use overture_domain::duration::MAX_DURATION_MS;
use overture_domain::services::ServiceInstance;
use overture_domain::testing::events::{self, request, requested, scheduled, started};
use overture_domain::testing::t;
use overture_events::{
    BlueprintSnapshot, DeploymentEvent as E, ErrorClass, HostKeySource, RetryRule, ServiceCheck,
    ServiceProvision, ServiceRequirement, StepSpec,
};
use proptest::prelude::*;

fn base() -> DateTime<Utc> {
    t(0)
}

/// Decides `command` on `state` and folds what it decided, as a handler does.
fn step(state: DeploymentState, command: C) -> DeploymentState {
    match Deployment::handle(&state, command) {
        Ok(events) => events.into_iter().fold(state, Deployment::apply),
        Err(_) => state,
    }
}

// The cases that were found.

/// One step failing `step-failed` with the durations given, recorded as they were.
fn recorded_with(wait_ms: u64, grace_ms: u64) -> Vec<E> {
    let mut blueprint = parse("name: x\nsteps:\n  a: { run: noop }\n  b: { run: noop }\n")
        .expect("valid")
        .snapshot;
    blueprint.grace_ms = grace_ms;
    blueprint.steps[0].retry.insert(
        ErrorClass::StepFailed,
        RetryRule {
            times: u32::MAX,
            wait_ms,
        },
    );
    vec![
        requested("b.yaml", blueprint),
        scheduled("a", 1, 0),
        scheduled("b", 1, 0),
        started("a", 1),
        started("b", 1),
    ]
}

/// The step's first attempt failed as `step-failed`, at the deployment's instant.
fn failure(step: &str) -> C {
    events::failure(step, 1, ErrorClass::StepFailed, 0)
}

#[test]
fn a_retry_wait_of_2_63_ms_recorded_waits_the_longest_a_blueprint_may_set() {
    let given = Deployment::replay(recorded_with(1 << 63, 0));
    let then = Deployment::handle(&given, failure("a")).expect("decided");
    let Some(E::StepRetryScheduled { not_before, .. }) = then.last() else {
        panic!("a retry is scheduled: {then:?}");
    };
    assert_eq!(*not_before, later(base(), MAX_DURATION_MS));
    assert_eq!(*not_before - base(), TimeDelta::days(30));
}

#[test]
fn a_grace_of_2_63_ms_recorded_lasts_the_longest_a_blueprint_may_set() {
    let given = Deployment::replay(recorded_with(0, 1 << 63));
    let then = Deployment::handle(&given, failure("b")).expect("decided");
    let Some(E::FailureGracePeriodStarted { deadline, .. }) = then.last() else {
        panic!("the grace period starts: {then:?}");
    };
    assert_eq!(*deadline - base(), TimeDelta::days(30));
}

#[test]
fn at_the_last_instant_there_is_a_wait_ends_then() {
    assert_eq!(later(DateTime::<Utc>::MAX_UTC, 1), DateTime::<Utc>::MAX_UTC);
    assert_eq!(later(base(), u64::MAX), base() + TimeDelta::days(30));
}

#[test]
fn a_request_the_engine_cannot_run_is_refused_naming_the_fields() {
    let mut blueprint = parse("name: x\nsteps:\n  a: { run: noop }\n")
        .expect("valid")
        .snapshot;
    blueprint.grace_ms = 1 << 63;
    blueprint.steps[0].retry.insert(
        ErrorClass::StepFailed,
        RetryRule {
            times: 1,
            wait_ms: 1 << 63,
        },
    );
    blueprint
        .files
        .insert("infra//../main.tf".into(), String::new());
    let params = BTreeMap::from([("who".to_owned(), "a\0b".to_owned())]);

    let mut request = request(blueprint, None);
    if let C::Request { params: asked, .. } = &mut request {
        *asked = params;
    }
    let then = Deployment::handle(&DeploymentState::default(), request);

    let Err(DeploymentError::Unrunnable(BlueprintError(problems))) = then else {
        panic!("refused: {then:?}");
    };
    let fields: Vec<&str> = problems.iter().map(|p| p.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "on_failure.grace",
            "steps.a.retry.step-failed.wait",
            "files",
            "params.who"
        ]
    );
}

// The property.

/// An instant a command may carry: near the deployment's, or at either end of time.
fn instant() -> impl Strategy<Value = DateTime<Utc>> {
    prop_oneof![
        8 => (-120i64..7_200).prop_map(|s| base() + TimeDelta::seconds(s)),
        1 => Just(DateTime::<Utc>::MIN_UTC),
        1 => Just(DateTime::<Utc>::MAX_UTC),
        1 => (0i64..1_000).prop_map(|s| DateTime::<Utc>::MAX_UTC - TimeDelta::seconds(s)),
        1 => any::<i64>().prop_map(|ms| DateTime::from_timestamp_millis(ms).unwrap_or(base())),
    ]
}

/// A recorded duration: short, at the bound, or anything a u64 holds.
fn millis() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => 0u64..10_000,
        1 => Just(MAX_DURATION_MS),
        1 => Just(1 << 63),
        1 => Just(u64::MAX),
        1 => any::<u64>(),
    ]
}

/// A count: small, or at the end of what it holds.
fn count() -> impl Strategy<Value = u32> {
    prop_oneof![4 => 0u32..4, 1 => Just(u32::MAX), 1 => Just(u32::MAX - 1)]
}

const NAMES: [&str; 4] = ["s0", "s1", "s2", "s3"];
/// A step name a command may give: one of the blueprint's, or one it lacks.
const GIVEN: [&str; 5] = ["s0", "s1", "s2", "s3", "nope"];

fn class() -> impl Strategy<Value = ErrorClass> {
    proptest::sample::select(ErrorClass::ALL.to_vec())
}

fn step_spec(name: &'static str) -> impl Strategy<Value = StepSpec> {
    (
        proptest::sample::select(vec!["noop", "script", "terraform", "ansible"]),
        proptest::collection::vec(proptest::sample::select(GIVEN.to_vec()), 0..3),
        millis(),
        proptest::collection::btree_map(
            class(),
            (count(), millis()).prop_map(|(times, wait_ms)| RetryRule { times, wait_ms }),
            0..3,
        ),
        proptest::option::of(Just(ServiceProvision {
            service: "web".into(),
            port: 80,
            check: ServiceCheck::Tcp,
        })),
        proptest::option::of((count(), millis()).prop_map(|(count, timeout_ms)| {
            ServiceRequirement {
                service: "web".into(),
                count,
                timeout_ms,
            }
        })),
        any::<bool>(),
    )
        .prop_map(
            move |(kind, needs, timeout_ms, retry, provides, requires, watch)| StepSpec {
                name: name.into(),
                kind: kind.into(),
                with: BTreeMap::new(),
                needs: needs.into_iter().map(String::from).collect(),
                timeout_ms,
                retry,
                limits: None,
                provides,
                requires: requires.into_iter().collect(),
                watch: if watch { vec!["web".into()] } else { vec![] },
            },
        )
}

/// A blueprint of one to four steps, as it may have been recorded: needs may name steps that do
/// not exist or form cycles, and every duration may be anything.
fn blueprint() -> impl Strategy<Value = BlueprintSnapshot> {
    (
        1usize..=4,
        proptest::collection::vec(step_spec("s"), 4),
        millis(),
    )
        .prop_map(|(size, specs, grace_ms)| {
            let mut blueprint = parse("name: x\nsteps:\n  s: { run: noop }\n")
                .expect("valid")
                .snapshot;
            blueprint.grace_ms = grace_ms;
            blueprint.steps = specs
                .into_iter()
                .zip(NAMES)
                .take(size)
                .map(|(spec, name)| StepSpec {
                    name: name.into(),
                    ..spec
                })
                .collect();
            blueprint
        })
}

/// Which attempt a command names: the step's current one (the common case, so that sequences
/// get somewhere), the one after, or any number.
#[derive(Clone, Debug)]
enum Attempt {
    Current,
    Next,
    Number(u32),
}

fn attempt() -> impl Strategy<Value = Attempt> {
    prop_oneof![
        6 => Just(Attempt::Current),
        1 => Just(Attempt::Next),
        1 => count().prop_map(Attempt::Number),
    ]
}

/// A command, its attempt left to be read from the state it arrives at.
#[derive(Clone, Debug)]
enum Command {
    Advance(DateTime<Utc>),
    Observe(DateTime<Utc>, Vec<u16>),
    Register(&'static str, Attempt, u16),
    Start(&'static str, Attempt, DateTime<Utc>),
    Succeed(&'static str, Attempt, u64),
    Fail(&'static str, Attempt, ErrorClass, u64, DateTime<Utc>),
    Interrupt(&'static str, Attempt, DateTime<Utc>),
    DeadLetter(&'static str, Attempt, u32, DateTime<Utc>),
    Cancel,
    Purge,
    Redrive,
    Destroy,
    Destroyed(&'static str, u64),
    DestroyFailed(&'static str),
    Grant,
    Revoke,
    Pin,
    Policy(&'static str, Attempt),
}

fn command() -> impl Strategy<Value = Command> {
    let name = || proptest::sample::select(GIVEN.to_vec());
    prop_oneof![
        6 => instant().prop_map(Command::Advance),
        2 => (instant(), proptest::collection::vec(any::<u16>(), 0..3))
            .prop_map(|(now, ports)| Command::Observe(now, ports)),
        1 => (name(), attempt(), any::<u16>()).prop_map(|(s, a, p)| Command::Register(s, a, p)),
        6 => (name(), attempt(), instant()).prop_map(|(s, a, t)| Command::Start(s, a, t)),
        3 => (name(), attempt(), millis()).prop_map(|(s, a, d)| Command::Succeed(s, a, d)),
        4 => (name(), attempt(), class(), millis(), instant())
            .prop_map(|(s, a, c, d, t)| Command::Fail(s, a, c, d, t)),
        1 => (name(), attempt(), instant()).prop_map(|(s, a, t)| Command::Interrupt(s, a, t)),
        1 => (name(), attempt(), count(), instant())
            .prop_map(|(s, a, r, t)| Command::DeadLetter(s, a, r, t)),
        1 => Just(Command::Cancel),
        1 => Just(Command::Purge),
        1 => Just(Command::Redrive),
        1 => Just(Command::Destroy),
        1 => (name(), millis()).prop_map(|(s, d)| Command::Destroyed(s, d)),
        1 => name().prop_map(Command::DestroyFailed),
        1 => Just(Command::Grant),
        1 => Just(Command::Revoke),
        1 => Just(Command::Pin),
        1 => (name(), attempt()).prop_map(|(s, a)| Command::Policy(s, a)),
    ]
}

fn resolve(state: &DeploymentState, step: &str, attempt: &Attempt) -> u32 {
    let current = state.steps.get(step).map_or(0, |s| s.attempt);
    match attempt {
        Attempt::Current => current,
        Attempt::Next => current.saturating_add(1),
        Attempt::Number(n) => *n,
    }
}

fn instance(step: &str, port: u16) -> ServiceInstance {
    ServiceInstance {
        service: "web".into(),
        step: step.into(),
        host: "h".into(),
        address: "10.0.0.1".into(),
        port,
    }
}

/// The aggregate's command for `command`, in the state it arrives at.
fn concrete(state: &DeploymentState, command: Command) -> C {
    let at = |step: &str, attempt: &Attempt| resolve(state, step, attempt);
    match command {
        Command::Advance(now) => C::Advance { now },
        Command::Observe(now, ports) => C::ObserveServices {
            now,
            others: ports
                .into_iter()
                .map(|port| instance("other", port))
                .collect(),
        },
        Command::Register(step, attempt, port) => C::RegisterServices {
            step: step.into(),
            attempt: at(step, &attempt),
            instances: vec![instance(step, port)],
        },
        Command::Start(step, attempt, now) => C::StartAttempt {
            step: step.into(),
            attempt: at(step, &attempt),
            sandbox: "box".into(),
            now,
        },
        Command::Succeed(step, attempt, duration_ms) => C::RecordSuccess {
            step: step.into(),
            attempt: at(step, &attempt),
            outputs: BTreeMap::new(),
            duration_ms,
        },
        Command::Fail(step, attempt, error_class, duration_ms, now) => C::RecordFailure {
            step: step.into(),
            attempt: at(step, &attempt),
            error_class,
            exit_code: Some(1),
            message: "boom".into(),
            duration_ms,
            now,
        },
        Command::Interrupt(step, attempt, now) => C::InterruptAttempt {
            step: step.into(),
            attempt: at(step, &attempt),
            why: Interruption::LeaseExpired,
            now,
        },
        Command::DeadLetter(step, attempt, receives, now) => C::RecordDeadLetter {
            step: step.into(),
            attempt: at(step, &attempt),
            receives,
            now,
        },
        Command::Cancel => C::Cancel {
            requested_by: "ada".into(),
            reason: "why".into(),
        },
        Command::Purge => C::RecordSecretsPurged,
        Command::Redrive => C::Redrive {
            requested_by: "ada".into(),
            sealed: None,
        },
        Command::Destroy => C::RequestDestroy,
        Command::Destroyed(step, duration_ms) => C::RecordStepDestroyed {
            step: step.into(),
            duration_ms,
        },
        Command::DestroyFailed(step) => C::RecordDestroyFailure {
            step: step.into(),
            exit_code: None,
            message: "no".into(),
            duration_ms: u64::MAX,
        },
        Command::Grant => C::RecordAccessGranted(BastionAccess {
            rule: "r".into(),
            security_group: "sg".into(),
            bastion: "10.0.0.9".into(),
            source: "10.0.0.1".into(),
            port: 22,
        }),
        Command::Revoke => C::RecordAccessRevoked {
            rule: "r".into(),
            kept_for: vec![],
        },
        Command::Pin => C::PinHostKeys(vec![PinnedHost {
            server: "h".into(),
            host: "10.0.0.1".into(),
            learned: HostKeySource::FirstUse,
            keys: vec![],
        }]),
        Command::Policy(step, attempt) => C::RecordNetworkPolicy {
            step: step.into(),
            attempt: at(step, &attempt),
            allowed: vec![],
        },
    }
}

proptest! {
    // A few hundred sequences run in seconds and reach every phase; a panic shrinks to a short
    // sequence.
    #![proptest_config(ProptestConfig {
        cases: 300,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn no_command_sequence_panics_on_any_recorded_blueprint(
        blueprint in blueprint(),
        through_the_door in any::<bool>(),
        commands in proptest::collection::vec(command(), 0..40),
    ) {
        // Recorded as it is, or asked for through the aggregate's own door, which may refuse.
        let mut state = if through_the_door {
            step(DeploymentState::default(), request(blueprint, None))
        } else {
            Deployment::replay([requested("b.yaml", blueprint)])
        };
        for command in commands {
            let command = concrete(&state, command);
            state = step(state, command);
            let _ = actions(&state);
        }
    }
}
