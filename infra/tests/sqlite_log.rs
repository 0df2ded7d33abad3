//! The SQLite event log against real files in a temporary directory.
//!
//! Concurrency tests race tasks through a barrier, on one handle and on two handles to the same
//! file (as two processes would), and count winners and losers; nothing sleeps.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use chrono::TimeDelta;
use overture_domain::testing::t;
use overture_events::{Envelope, Metadata, Timestamp};
use overture_infra::sqlite::{Database, DbError, EventLog, ExpectedRevision, LogError, NewEvent};
use serde_json::json;
use tokio::sync::Barrier;
use uuid::Uuid;

fn db_path(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("overture.db")
}

async fn open_log(path: &Path) -> EventLog {
    EventLog::new(Database::open(path).await.expect("database opens"))
}

/// A log in a database of its own, in a directory that lasts as long as the test holds it.
async fn new_log() -> (tempfile::TempDir, EventLog) {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = open_log(&db_path(&dir)).await;
    (dir, log)
}

/// The test kit's first instant with nanoseconds, so a round trip that lost precision would
/// show.
fn recorded_at() -> Timestamp {
    t(0) + TimeDelta::nanoseconds(123_456_789)
}

fn event(event_type: &str, data: serde_json::Value) -> NewEvent {
    NewEvent {
        id: Uuid::new_v4(),
        event_type: event_type.to_owned(),
        data,
        metadata: Metadata {
            tenant: "acme".into(),
            actor: "tester".into(),
            correlation_id: Uuid::from_u128(7),
            causation_id: Uuid::from_u128(8),
            recorded_at: recorded_at(),
            previous: None,
            hash: None,
        },
    }
}

fn revisions(envelopes: &[Envelope]) -> Vec<u64> {
    envelopes.iter().map(|envelope| envelope.revision).collect()
}

/// Races `logs.len()` writers on one stream, `rounds` times, each round all expecting the same
/// revision; checks one winner per round and returns the winners' event ids in order.
async fn race_appends(logs: Vec<EventLog>, stream: &'static str, rounds: u64) -> Vec<Uuid> {
    let mut winners = Vec::new();
    for round in 0..rounds {
        let expected = match round {
            0 => ExpectedRevision::NoStream,
            r => ExpectedRevision::Exact(r - 1),
        };
        let barrier = Arc::new(Barrier::new(logs.len()));
        let tasks: Vec<_> = logs
            .iter()
            .cloned()
            .map(|log| {
                let barrier = Arc::clone(&barrier);
                tokio::spawn(async move {
                    let new = event("Raced", json!({ "round": round }));
                    let id = new.id;
                    barrier.wait().await;
                    (id, log.append(stream, expected, vec![new]).await)
                })
            })
            .collect();

        let mut won = Vec::new();
        for task in tasks {
            match task.await.expect("task ran") {
                (id, Ok(entries)) => {
                    assert_eq!(entries.len(), 1);
                    assert_eq!(entries[0].envelope.revision, round);
                    won.push(id);
                }
                (
                    _,
                    Err(LogError::WrongExpectedRevision {
                        stream: s,
                        expected: e,
                        actual,
                    }),
                ) => {
                    assert_eq!((s.as_str(), e, actual), (stream, expected, Some(round)));
                }
                (_, Err(other)) => panic!("round {round}: unexpected error {other:?}"),
            }
        }
        assert_eq!(won.len(), 1, "round {round}: exactly one writer wins");
        winners.extend(won);
    }
    winners
}

#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn concurrent_appends_on_one_handle_have_one_winner_per_revision() {
    let (_dir, log) = new_log().await;

    let winners = race_appends(vec![log.clone(); 8], "deployment-race", 10).await;

    let stream = log.read_stream("deployment-race", 0).await.expect("read");
    assert_eq!(revisions(&stream), (0..10).collect::<Vec<_>>());
    let stored: Vec<Uuid> = stream.iter().map(|envelope| envelope.id).collect();
    assert_eq!(stored, winners);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn concurrent_appends_from_two_handles_on_one_file_have_one_winner_per_revision() {
    let dir = tempfile::tempdir().expect("tempdir");
    let first = open_log(&db_path(&dir)).await;
    let second = open_log(&db_path(&dir)).await;
    let mut logs = vec![first.clone(); 4];
    logs.extend(vec![second.clone(); 4]);

    let winners = race_appends(logs, "deployment-race", 10).await;

    // Each handle sees every event, whichever handle wrote it.
    for log in [&first, &second] {
        let stream = log.read_stream("deployment-race", 0).await.expect("read");
        assert_eq!(revisions(&stream), (0..10).collect::<Vec<_>>());
        let stored: Vec<Uuid> = stream.iter().map(|envelope| envelope.id).collect();
        assert_eq!(stored, winners);
    }
}

#[tokio::test]
async fn append_returns_what_is_stored_with_gapless_revisions() {
    let (_dir, log) = new_log().await;

    let first = log
        .append(
            "s",
            ExpectedRevision::NoStream,
            vec![event("A", json!(1)), event("B", json!(2))],
        )
        .await
        .expect("append");
    let second = log
        .append("s", ExpectedRevision::Exact(1), vec![event("C", json!(3))])
        .await
        .expect("append");
    let third = log
        .append("s", ExpectedRevision::Any, vec![event("D", json!(4))])
        .await
        .expect("append");

    let returned: Vec<Envelope> = [first, second, third]
        .concat()
        .into_iter()
        .map(|entry| entry.envelope)
        .collect();
    let stored = log.read_stream("s", 0).await.expect("read");
    assert_eq!(stored, returned);
    assert_eq!(revisions(&stored), vec![0, 1, 2, 3]);
    assert_eq!(
        log.read_stream("s", 2).await.expect("read"),
        stored[2..].to_vec()
    );
    assert_eq!(log.read_stream("s", u64::MAX).await.expect("read"), vec![]);
}

#[tokio::test]
async fn wrong_expectations_are_refused_with_the_actual_revision() {
    let (_dir, log) = new_log().await;
    log.append("s", ExpectedRevision::NoStream, vec![event("A", json!({}))])
        .await
        .expect("append");

    let refused = log
        .append("s", ExpectedRevision::NoStream, vec![event("B", json!({}))])
        .await
        .expect_err("stream exists");
    assert!(
        matches!(
            &refused,
            LogError::WrongExpectedRevision { stream, expected: ExpectedRevision::NoStream, actual: Some(0) }
                if stream == "s"
        ),
        "{refused:?}"
    );
    assert!(refused.to_string().contains("last revision 0"), "{refused}");

    let refused = log
        .append("s", ExpectedRevision::Exact(5), vec![event("B", json!({}))])
        .await
        .expect_err("revision is 0");
    assert!(
        matches!(
            refused,
            LogError::WrongExpectedRevision {
                actual: Some(0),
                ..
            }
        ),
        "{refused:?}"
    );

    let refused = log
        .append(
            "missing",
            ExpectedRevision::Exact(0),
            vec![event("B", json!({}))],
        )
        .await
        .expect_err("no such stream");
    assert!(
        matches!(
            refused,
            LogError::WrongExpectedRevision { actual: None, .. }
        ),
        "{refused:?}"
    );

    assert_eq!(
        revisions(&log.read_stream("s", 0).await.expect("read")),
        vec![0]
    );
    assert_eq!(log.read_stream("missing", 0).await.expect("read"), vec![]);
}

#[tokio::test]
async fn a_batch_that_fails_midway_stores_none_of_its_events() {
    let (_dir, log) = new_log().await;
    let existing = event("A", json!({}));
    let reused = existing.id;
    log.append("a", ExpectedRevision::NoStream, vec![existing])
        .await
        .expect("append");
    let head = log.head_position().await.expect("head");

    let mut clash = event("C", json!({}));
    clash.id = reused;
    let refused = log
        .append(
            "b",
            ExpectedRevision::NoStream,
            vec![event("A", json!({})), event("B", json!({})), clash],
        )
        .await
        .expect_err("third event reuses an id");
    assert!(
        matches!(refused, LogError::DuplicateEventId { id } if id == reused),
        "{refused:?}"
    );

    assert_eq!(log.read_stream("b", 0).await.expect("read"), vec![]);
    assert_eq!(log.head_position().await.expect("head"), head);
    assert_eq!(log.stream_names().await.expect("names"), vec!["a"]);
    // Nothing of the failed batch holds a revision: the stream still starts at 0.
    let entries = log
        .append("b", ExpectedRevision::NoStream, vec![event("A", json!({}))])
        .await
        .expect("append after the failed batch");
    assert_eq!(entries[0].envelope.revision, 0);
}

#[tokio::test]
async fn reopening_the_file_reads_back_identical_envelopes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = db_path(&dir);
    let written = {
        let log = open_log(&path).await;
        let data = json!({ "step": "build", "outputs": { "ip": "10.0.0.1" }, "note": "ünïcode ✓", "n": 1.5 });
        log.append(
            "deployment-1",
            ExpectedRevision::NoStream,
            vec![event("StepSucceeded", data)],
        )
        .await
        .expect("append");
        log.append(
            "deployment-2",
            ExpectedRevision::NoStream,
            vec![event("X", json!(null))],
        )
        .await
        .expect("append");
        log.append(
            "deployment-1",
            ExpectedRevision::Exact(0),
            vec![event("Y", json!([1, 2]))],
        )
        .await
        .expect("append");
        log.read_all(0, 100).await.expect("read")
    };

    let log = open_log(&path).await;
    assert_eq!(log.read_all(0, 100).await.expect("read"), written);
    assert_eq!(written.len(), 3);
    assert_eq!(written[0].envelope.metadata.recorded_at, recorded_at());
    assert_eq!(
        log.read_stream("deployment-1", 0).await.expect("read"),
        vec![written[0].envelope.clone(), written[2].envelope.clone()]
    );
}

#[tokio::test]
async fn read_all_follows_append_order_across_streams() {
    let (_dir, log) = new_log().await;
    assert_eq!(log.head_position().await.expect("head"), 0);
    assert_eq!(log.read_all(0, 10).await.expect("read"), vec![]);

    let mut appended = Vec::new();
    for (stream, expected) in [
        ("a", ExpectedRevision::NoStream),
        ("b", ExpectedRevision::NoStream),
        ("a", ExpectedRevision::Exact(0)),
        ("c", ExpectedRevision::NoStream),
        ("b", ExpectedRevision::Exact(0)),
    ] {
        appended.extend(
            log.append(
                stream,
                expected,
                vec![event("E", json!({ "stream": stream }))],
            )
            .await
            .expect("append"),
        );
    }

    let all = log.read_all(0, 100).await.expect("read");
    assert_eq!(all, appended);
    let streams: Vec<&str> = all
        .iter()
        .map(|entry| entry.envelope.stream.as_str())
        .collect();
    assert_eq!(streams, ["a", "b", "a", "c", "b"]);
    assert!(all
        .windows(2)
        .all(|pair| pair[0].position < pair[1].position));

    let page = log.read_all(all[1].position, 2).await.expect("read");
    assert_eq!(page, all[2..4].to_vec());
    let head = log.head_position().await.expect("head");
    assert_eq!(head, all[4].position);
    assert_eq!(log.read_all(head, 10).await.expect("read"), vec![]);
    assert_eq!(log.read_all(0, 0).await.expect("read"), vec![]);
    assert_eq!(log.stream_names().await.expect("names"), ["a", "b", "c"]);
}

#[tokio::test]
async fn checkpoints_persist_across_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = db_path(&dir);
    {
        let log = open_log(&path).await;
        assert_eq!(log.checkpoint("status").await.expect("checkpoint"), 0);
        log.save_checkpoint("status", 5).await.expect("save");
        log.save_checkpoint("status", 7).await.expect("save");
        log.save_checkpoint("audit", 2).await.expect("save");
    }
    let log = open_log(&path).await;
    assert_eq!(log.checkpoint("status").await.expect("checkpoint"), 7);
    assert_eq!(log.checkpoint("audit").await.expect("checkpoint"), 2);
    assert_eq!(log.checkpoint("other").await.expect("checkpoint"), 0);
}

#[tokio::test]
async fn a_malformed_row_reads_back_as_corrupt() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Database::open(db_path(&dir)).await.expect("database opens");
    let log = EventLog::new(db.clone());
    log.append("s", ExpectedRevision::NoStream, vec![event("A", json!({}))])
        .await
        .expect("append");
    db.with_connection(|connection| {
        connection.execute(
            "INSERT INTO events (stream, revision, id, type, data, metadata)
             VALUES ('s', 1, 'not-a-uuid', 'B', '{}', '{}')",
            [],
        )?;
        connection.execute(
            "INSERT INTO events (stream, revision, id, type, data, metadata)
             VALUES ('t', 0, ?1, 'B', '{broken', '{}')",
            [Uuid::new_v4().to_string()],
        )
    })
    .await
    .expect("raw insert");

    let error = log.read_stream("s", 0).await.expect_err("row 2 is corrupt");
    assert!(
        matches!(error, LogError::Corrupt { position: 2, .. }),
        "{error:?}"
    );
    let error = log.read_all(2, 10).await.expect_err("row 3 is corrupt");
    assert!(
        matches!(error, LogError::Corrupt { position: 3, .. }),
        "{error:?}"
    );
    // The good row before them still reads.
    assert_eq!(log.read_all(0, 1).await.expect("read").len(), 1);
}

#[tokio::test]
async fn appended_fires_after_a_commit() {
    let (_dir, log) = new_log().await;
    let appended = log.appended();
    // Created before the append, so `notify_waiters` counts it as waiting.
    let woken = appended.notified();

    log.append("s", ExpectedRevision::NoStream, vec![event("A", json!({}))])
        .await
        .expect("append");

    // Polled once, without waiting: the append has returned, so the wake-up must be there.
    tokio::pin!(woken);
    let fired = tokio::select! {
        biased;
        () = &mut woken => true,
        () = std::future::ready(()) => false,
    };
    assert!(fired, "the append did not fire the notify");

    // A refused append stores nothing, so it wakes nobody.
    let woken = appended.notified();
    log.append("s", ExpectedRevision::NoStream, vec![event("B", json!({}))])
        .await
        .expect_err("stream exists");
    tokio::pin!(woken);
    let fired = tokio::select! {
        biased;
        () = &mut woken => true,
        () = std::future::ready(()) => false,
    };
    assert!(!fired, "a refused append fired the notify");
}

#[tokio::test]
async fn errors_name_the_database_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("missing-dir").join("overture.db");
    let error = Database::open(&path).await.expect_err("no such directory");
    assert!(matches!(error, DbError::Sqlite { .. }), "{error:?}");
    assert!(
        error.to_string().contains(&path.display().to_string()),
        "{error}"
    );
}

#[tokio::test]
async fn a_file_from_a_newer_schema_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = db_path(&dir);
    let db = Database::open(&path).await.expect("database opens");
    db.with_connection(|connection| connection.pragma_update(None, "user_version", 99))
        .await
        .expect("set version");
    drop(db);

    let error = Database::open(&path).await.expect_err("too new");
    assert!(
        matches!(error, DbError::SchemaTooNew { found: 99, .. }),
        "{error:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn handles_opening_a_new_file_at_once_migrate_it_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = db_path(&dir);
    let barrier = Arc::new(Barrier::new(8));
    let openers: Vec<_> = (0..8)
        .map(|_| {
            let (path, barrier) = (path.clone(), Arc::clone(&barrier));
            tokio::spawn(async move {
                barrier.wait().await;
                Database::open(&path).await
            })
        })
        .collect();
    for opener in openers {
        let db = opener.await.expect("task ran").expect("database opens");
        let log = EventLog::new(db);
        assert_eq!(log.head_position().await.expect("head"), 0);
    }
}

/// Runs `sql` on the file directly, as someone editing it with the sqlite3 tool would.
fn edit_file(path: &Path, sql: &str) {
    let connection = rusqlite::Connection::open(path).expect("the file opens");
    connection.execute_batch(sql).expect("the edit runs");
}

// Every appended event is chained to the one before it in its stream, and the check of the
// whole log finds every chain whole, with each stream's head its last event's hash.
#[tokio::test]
async fn appended_events_are_chained_and_verify() {
    let (_dir, log) = new_log().await;
    log.append(
        "s-1",
        ExpectedRevision::NoStream,
        vec![event("A", json!({}))],
    )
    .await
    .expect("append");
    log.append(
        "s-2",
        ExpectedRevision::NoStream,
        vec![event("A", json!({}))],
    )
    .await
    .expect("append");
    log.append(
        "s-1",
        ExpectedRevision::Exact(0),
        vec![event("B", json!({"n": 1})), event("C", json!({"n": 2}))],
    )
    .await
    .expect("append");
    let stream = log.read_stream("s-1", 0).await.expect("read");
    assert_eq!(
        stream[0].metadata.previous.as_deref(),
        Some(overture_events::chain::GENESIS)
    );
    for pair in stream.windows(2) {
        assert_eq!(pair[1].metadata.previous, pair[0].metadata.hash);
    }
    let verified = log.verify(None).await.expect("verify");
    assert_eq!(verified.broken, None);
    assert_eq!((verified.streams, verified.events), (2, 4));
    assert_eq!(verified.heads.get("s-1"), stream[2].metadata.hash.as_ref());
}

// An output edited in the file is named: its stream, revision and position, as content changed.
#[tokio::test]
async fn an_event_edited_in_the_file_is_the_first_break() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = db_path(&dir);
    let log = open_log(&path).await;
    log.append(
        "s-1",
        ExpectedRevision::NoStream,
        vec![
            event("A", json!({"ip": "10.0.0.1"})),
            event("B", json!({"ip": "10.0.0.2"})),
        ],
    )
    .await
    .expect("append");
    edit_file(
        &path,
        "UPDATE events SET data = json_set(data, '$.ip', '10.6.6.6') WHERE revision = 1",
    );
    let broken = log
        .verify(None)
        .await
        .expect("verify")
        .broken
        .expect("a break");
    assert_eq!(
        (broken.stream.as_str(), broken.revision, broken.position),
        ("s-1", 1, 2)
    );
    assert_eq!(broken.reason, overture_events::chain::Break::ContentChanged);
}

// A file whose events have no chain (as an older Overture wrote it) is chained once, when it is
// first opened, and the sealing is recorded; opening it again seals nothing more.
#[tokio::test]
async fn an_unchained_file_is_sealed_once_on_first_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = db_path(&dir);
    {
        let log = open_log(&path).await;
        log.append(
            "s-1",
            ExpectedRevision::NoStream,
            vec![event("A", json!({})), event("B", json!({}))],
        )
        .await
        .expect("append");
    }
    edit_file(
        &path,
        "UPDATE events SET metadata = json_remove(metadata, '$.previous', '$.hash');
         DELETE FROM chain_seals;",
    );
    let log = open_log(&path).await;
    let verified = log.verify(None).await.expect("verify");
    assert_eq!(verified.broken, None);
    assert_eq!(verified.sealings.len(), 1);
    assert_eq!(
        (verified.sealings[0].events, verified.sealings[0].up_to),
        (2, 2)
    );
    drop(log);
    let log = open_log(&path).await;
    log.append(
        "s-1",
        ExpectedRevision::Exact(1),
        vec![event("C", json!({}))],
    )
    .await
    .expect("append after the sealing");
    let verified = log.verify(None).await.expect("verify");
    assert_eq!(
        (verified.broken, verified.sealings.len(), verified.events),
        (None, 1, 3)
    );
}
