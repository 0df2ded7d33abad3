//! The contract every deployment log keeps ([`DeploymentLog`] and [`ReadStream`]), as tests that
//! each adapter's suite runs against a real store with [`log_contract_tests!`](crate::log_contract_tests).
//!
//! Each test takes two clients of one store (as two processes, or two Lambdas, would hold) and
//! works on deployments of its own, so the tests share a store without a reset.

use std::collections::BTreeMap;

use esrs::manager::AggregateManager;
use esrs::AggregateState;
use overture_domain::{blueprint, DeploymentCommand, DeploymentError};
use overture_events::chain::{Break, ChainCheck};
use overture_events::{DeploymentEvent, DeploymentId, Envelope, Timestamp};
use uuid::Uuid;

use crate::esrs_store::{EsrsDeploymentStore, EsrsStoreError};
use crate::{Cause, DeploymentLog, LogError, ReadStream};

/// A log adapter under test.
pub trait Log: DeploymentLog + ReadStream + Clone + 'static {}
impl<T: DeploymentLog + ReadStream + Clone + 'static> Log for T {}

/// Generates one `#[tokio::test]` per contract test. `$clients` is an expression (evaluated
/// anew in each test) of a future yielding two clients of one store.
#[macro_export]
macro_rules! log_contract_tests {
    ($clients:expr) => {
        $crate::log_contract_tests!(@each $clients;
            appended_events_read_back_from_another_client,
            an_unknown_deployment_has_no_events,
            racing_writers_on_one_revision_have_exactly_one_winner,
            a_wrong_expected_revision_is_a_conflict_and_stores_nothing,
            a_hundred_events_are_appended_at_once,
            a_stream_over_a_megabyte_reads_back_whole,
            esrs_commands_are_recorded_in_the_log_and_conflicts_are_typed,
            every_stream_reads_back_as_a_chain_that_verifies,
        );
    };
    (@each $clients:expr; $($test:ident),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $test() {
                let (a, b) = $clients.await;
                $crate::contract::$test(&a, &b).await;
            }
        )*
    };
}

fn new_deployment() -> DeploymentId {
    DeploymentId::from_uuid(Uuid::now_v7())
}

fn cause(deployment: DeploymentId) -> Cause {
    Cause::new("contract-tester", deployment, Uuid::now_v7())
}

fn requested() -> DeploymentEvent {
    let blueprint = blueprint::parse("name: contract\nsteps:\n  build: { run: noop }\n")
        .map(|parsed| parsed.snapshot)
        .unwrap_or_else(|problems| panic!("the contract's blueprint is valid: {problems}"));
    DeploymentEvent::DeploymentRequested {
        triggered_by: None,
        tenant: "acme".into(),
        requested_by: "ada".into(),
        trigger: "cli".into(),
        source: "contract.yaml".into(),
        blueprint,
        blueprint_hash: "0".repeat(64),
        params: BTreeMap::new(),
        cloud: None,
        name: None,
    }
}

fn scheduled(attempt: u32) -> DeploymentEvent {
    DeploymentEvent::StepScheduled {
        step: "build".into(),
        attempt,
        not_before: Timestamp::UNIX_EPOCH,
    }
}

fn succeeded(attempt: u32, output_bytes: usize) -> DeploymentEvent {
    // Text that does not compress to nothing, so a store cannot pass by accident.
    let value: String = (0..output_bytes)
        .map(|i| char::from(b'a' + ((i * 7 + attempt as usize) % 26) as u8))
        .collect();
    DeploymentEvent::StepSucceeded {
        step: "build".into(),
        attempt,
        outputs: [("blob".to_owned(), value)].into(),
        duration_ms: 1,
    }
}

async fn append<L: Log>(
    log: &L,
    deployment: DeploymentId,
    expected: Option<u64>,
    events: Vec<DeploymentEvent>,
) -> Result<(), LogError> {
    log.append(deployment, "acme", expected, events, &cause(deployment))
        .await
}

/// What one client appends, another reads back: the same events, in order, with gapless
/// revisions, unique ids and the metadata they were appended with.
pub async fn appended_events_read_back_from_another_client<L: Log>(a: &L, b: &L) {
    let deployment = new_deployment();
    let events = vec![requested(), scheduled(1)];
    let cause = cause(deployment);
    a.append(deployment, "acme", None, events.clone(), &cause)
        .await
        .expect("the first append");

    let loaded = b.load(deployment).await.expect("load");
    assert_eq!(loaded.revision, Some(1));
    assert_eq!(loaded.state.tenant, "acme");
    let stored = b.read_stream(deployment, 0).await.expect("read");
    assert_eq!(stored.len(), 2);
    for (revision, (envelope, event)) in (0..).zip(stored.iter().zip(&events)) {
        assert_eq!(envelope.stream, deployment.stream());
        assert_eq!(envelope.revision, revision);
        assert_eq!(envelope.event_type, event.event_type());
        assert_eq!(envelope.data, event.data());
        assert_eq!(envelope.metadata.tenant, "acme");
        assert_eq!(envelope.metadata.actor, cause.actor);
        assert_eq!(envelope.metadata.correlation_id, cause.correlation_id);
        assert_eq!(envelope.metadata.causation_id, cause.causation_id);
    }
    assert_ne!(stored[0].id, stored[1].id, "every event has its own id");
    assert_eq!(
        b.read_stream(deployment, 1).await.expect("read from 1"),
        stored[1..]
    );
}

/// A deployment nobody appended to loads as nothing, not as an error.
pub async fn an_unknown_deployment_has_no_events<L: Log>(a: &L, _b: &L) {
    let deployment = new_deployment();
    let loaded = a.load(deployment).await.expect("load");
    assert_eq!(loaded.revision, None);
    assert!(loaded.state.blueprint.is_none());
    assert!(a.read_stream(deployment, 0).await.expect("read").is_empty());
}

/// Two clients appending at the same expected revision: exactly one wins, the other gets the
/// typed conflict, round after round.
pub async fn racing_writers_on_one_revision_have_exactly_one_winner<L: Log>(a: &L, b: &L) {
    let deployment = new_deployment();
    for round in 0..6u32 {
        let expected = round.checked_sub(1).map(u64::from);
        let event = if round == 0 {
            requested()
        } else {
            scheduled(round)
        };
        let (first, second) = tokio::join!(
            append(a, deployment, expected, vec![event.clone()]),
            append(b, deployment, expected, vec![event]),
        );
        let outcomes = [first, second];
        let winners = outcomes.iter().filter(|outcome| outcome.is_ok()).count();
        assert_eq!(winners, 1, "round {round}: {outcomes:?}");
        assert!(
            outcomes.iter().any(|outcome| matches!(
                outcome,
                Err(LogError::Conflict { deployment: d, expected: e }) if *d == deployment && *e == expected
            )),
            "round {round}: the loser gets the typed conflict: {outcomes:?}"
        );
    }
    let stored = a.read_stream(deployment, 0).await.expect("read");
    assert_eq!(
        stored.iter().map(|e| e.revision).collect::<Vec<_>>(),
        (0..6).collect::<Vec<_>>()
    );
}

/// An append whose expected revision is not the stream's last (behind, ahead, or "new" on an
/// existing stream) is a conflict and stores none of its events.
pub async fn a_wrong_expected_revision_is_a_conflict_and_stores_nothing<L: Log>(a: &L, b: &L) {
    let deployment = new_deployment();
    append(
        a,
        deployment,
        None,
        vec![requested(), scheduled(1), scheduled(2)],
    )
    .await
    .expect("the first append");
    for expected in [None, Some(0), Some(1), Some(3), Some(7)] {
        let outcome = append(b, deployment, expected, vec![scheduled(9), scheduled(10)]).await;
        assert!(
            matches!(outcome, Err(LogError::Conflict { .. })),
            "expected {expected:?}: {outcome:?}"
        );
    }
    assert_eq!(a.load(deployment).await.expect("load").revision, Some(2));
    assert_eq!(a.read_stream(deployment, 0).await.expect("read").len(), 3);
}

/// One command's hundred events are appended all at once.
pub async fn a_hundred_events_are_appended_at_once<L: Log>(a: &L, b: &L) {
    let deployment = new_deployment();
    append(a, deployment, None, vec![requested()])
        .await
        .expect("the request");
    let hundred = (1..=100).map(scheduled).collect();
    append(a, deployment, Some(0), hundred)
        .await
        .expect("a hundred events");
    assert_eq!(b.load(deployment).await.expect("load").revision, Some(100));
    let stored = b.read_stream(deployment, 0).await.expect("read");
    assert_eq!(stored.len(), 101);
    assert_eq!(stored[100].data, scheduled(100).data());
}

/// A stream larger than any single read of the store (DynamoDB pages at 1 MB) reads back
/// whole, and loads to its last revision.
pub async fn a_stream_over_a_megabyte_reads_back_whole<L: Log>(a: &L, b: &L) {
    let deployment = new_deployment();
    append(a, deployment, None, vec![requested()])
        .await
        .expect("the request");
    let appends = 24u32;
    for attempt in 1..=appends {
        append(
            a,
            deployment,
            Some(u64::from(attempt) - 1),
            vec![succeeded(attempt, 60 * 1024)],
        )
        .await
        .expect("a large event");
    }
    let stored = b.read_stream(deployment, 0).await.expect("read");
    let bytes: usize = stored.iter().map(|e| e.data.to_string().len()).sum();
    assert!(bytes > 1024 * 1024, "{bytes} bytes is over a megabyte");
    assert_eq!(stored.len(), 25);
    assert_eq!(stored[24].data, succeeded(appends, 60 * 1024).data());
    assert_eq!(
        b.load(deployment).await.expect("load").revision,
        Some(u64::from(appends))
    );
}

/// Through esrs's own `AggregateManager`: the same aggregate code on the same log, a refused
/// command is a domain error, a stale writer gets the typed conflict, nothing is deleted.
pub async fn esrs_commands_are_recorded_in_the_log_and_conflicts_are_typed<L: Log>(a: &L, b: &L) {
    let id = Uuid::now_v7();
    let deployment = DeploymentId::from_uuid(id);
    let manager = AggregateManager::new(EsrsDeploymentStore::new(
        a.clone(),
        "acme",
        Cause::new("esrs-test", deployment, id),
    ));
    let request = || {
        let DeploymentEvent::DeploymentRequested { blueprint, .. } = requested() else {
            unreachable!("requested() is a request")
        };
        DeploymentCommand::Request {
            triggered_by: None,
            tenant: "acme".into(),
            requested_by: "ada".into(),
            trigger: "test".into(),
            source: "inline".into(),
            blueprint,
            blueprint_hash: "h".into(),
            params: BTreeMap::new(),
            cloud: None,
            sealed: None,
            name: None,
        }
    };

    let state = manager
        .handle_command(AggregateState::with_id(id), request())
        .await
        .expect("recorded")
        .expect("accepted");
    assert_eq!(state.tenant, "acme");
    let envelopes = b.read_stream(deployment, 0).await.expect("read");
    assert_eq!(envelopes.len(), 1);
    assert_eq!(envelopes[0].event_type, "DeploymentRequested");
    assert_eq!(envelopes[0].metadata.actor, "esrs-test");

    let loaded = manager.load(id).await.expect("loads").expect("exists");
    assert_eq!(*loaded.sequence_number(), 1);
    let refused = manager
        .handle_command(loaded, request())
        .await
        .expect("no store error");
    assert_eq!(refused.err(), Some(DeploymentError::AlreadyRequested));

    let stale = manager.load(id).await.expect("loads").expect("exists");
    let fresh = manager.load(id).await.expect("loads").expect("exists");
    let advance = || DeploymentCommand::Advance {
        now: Timestamp::UNIX_EPOCH,
    };
    manager
        .handle_command(fresh, advance())
        .await
        .expect("recorded")
        .expect("accepted");
    let lost = manager.handle_command(stale, advance()).await;
    assert!(
        matches!(lost, Err(EsrsStoreError::Log(LogError::Conflict { .. }))),
        "{lost:?}"
    );
    assert!(
        matches!(manager.delete(id).await, Err(EsrsStoreError::AppendOnly(_))),
        "nothing is ever deleted"
    );
}

/// Checks `events` as one stream's chain from its start: how many were sealed, or the first
/// break and its revision.
fn verify(events: &[Envelope]) -> Result<ChainCheck, (u64, Break)> {
    let mut check = ChainCheck::default();
    for envelope in events {
        check
            .check(envelope)
            .map_err(|reason| (envelope.revision, reason))?;
    }
    Ok(check)
}

/// Every event is recorded with its link to the one before it, whichever client appended it
/// and whether it knew the stream's head: the stream reads back as a chain that verifies, every
/// event sealed, and a changed event breaks it where it was changed.
pub async fn every_stream_reads_back_as_a_chain_that_verifies<L: Log>(a: &L, b: &L) {
    let deployment = new_deployment();
    append(a, deployment, None, vec![requested(), scheduled(1)])
        .await
        .expect("the request");
    // `b` appends without having read the stream, then `a` after `b`'s events.
    append(b, deployment, Some(1), vec![succeeded(1, 16), scheduled(2)])
        .await
        .expect("b's append");
    a.load(deployment).await.expect("load");
    append(a, deployment, Some(3), vec![scheduled(3)])
        .await
        .expect("a's append after b's");
    append(b, deployment, Some(4), vec![scheduled(4)])
        .await
        .expect("b's append after a's");

    let stored = b.read_stream(deployment, 0).await.expect("read");
    let check = verify(&stored).unwrap_or_else(|broken| panic!("the chain breaks: {broken:?}"));
    assert_eq!((check.sealed, check.unsealed), (6, 0));
    assert_eq!(
        Some(check.head),
        stored[5].metadata.hash,
        "the stream's head is its last event's link"
    );
    assert_eq!(
        a.read_stream(deployment, 0).await.expect("read by a"),
        stored
    );

    let mut edited = stored;
    edited[2].metadata.tenant = "mallory".into();
    assert_eq!(verify(&edited).err(), Some((2, Break::ContentChanged)));
}
