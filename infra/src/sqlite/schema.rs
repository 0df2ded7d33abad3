//! The schema of the SQLite file, as numbered migrations.
//!
//! `MIGRATIONS[i]` takes a file from `user_version` i to i + 1. Add tables (read models, ...)
//! by appending a step; never edit a released one, because files already past it will not run
//! it again.

use rusqlite::{Connection, TransactionBehavior};

/// The migration steps, oldest first.
const MIGRATIONS: &[&str] = &[
    // 1: the event log, projection checkpoints and the job queue.
    "CREATE TABLE events (
         position INTEGER PRIMARY KEY AUTOINCREMENT,
         stream   TEXT    NOT NULL,
         revision INTEGER NOT NULL,
         id       TEXT    NOT NULL UNIQUE,
         type     TEXT    NOT NULL,
         data     TEXT    NOT NULL,
         metadata TEXT    NOT NULL,
         UNIQUE (stream, revision)
     );
     CREATE TABLE checkpoints (
         name     TEXT    PRIMARY KEY,
         position INTEGER NOT NULL
     );
     -- AUTOINCREMENT: a job id is never reused, so a stale receipt (id, receive_count) can
     -- never match a later job.
     CREATE TABLE jobs (
         id            INTEGER PRIMARY KEY AUTOINCREMENT,
         key           TEXT    NOT NULL UNIQUE,
         deployment    TEXT    NOT NULL,
         body          TEXT    NOT NULL,
         due_at        INTEGER NOT NULL, -- unix ms
         visible_at    INTEGER NOT NULL, -- unix ms; end of the current lease, 0 before any
         receive_count INTEGER NOT NULL DEFAULT 0
     );
     CREATE INDEX jobs_by_due ON jobs (due_at, visible_at);
     CREATE INDEX jobs_by_deployment ON jobs (deployment, due_at);",
    // 2: the read models, each view a JSON document.
    "CREATE TABLE deployment_views (
         id         TEXT PRIMARY KEY,
         tenant     TEXT NOT NULL,
         status     TEXT NOT NULL,
         started_at TEXT NOT NULL,
         view       TEXT NOT NULL
     );
     CREATE INDEX deployment_views_by_tenant ON deployment_views (tenant, started_at);
     CREATE TABLE tenant_views (
         tenant TEXT PRIMARY KEY,
         view   TEXT NOT NULL
     );",
    // 3: triggers: which (event, trigger) pairs were claimed, and every decision taken.
    "CREATE TABLE trigger_claims (
         source   TEXT NOT NULL,
         event_id TEXT NOT NULL,
         trigger  TEXT NOT NULL,
         PRIMARY KEY (source, event_id, trigger)
     );
     CREATE TABLE trigger_decisions (
         seq        INTEGER PRIMARY KEY AUTOINCREMENT,
         at         TEXT    NOT NULL, -- RFC 3339
         source     TEXT    NOT NULL,
         event_id   TEXT    NOT NULL,
         trigger    TEXT    NOT NULL,
         decision   TEXT    NOT NULL, -- deployed, duplicate, not-matched, refused
         deployment TEXT,
         reason     TEXT    NOT NULL
     );",
    // 4: bastion leases: which deployments hold the engine's rule on a bastion, and the last
    // holder deleting it (`closing`).
    "CREATE TABLE bastion_leases (
         rule       TEXT NOT NULL, -- cloud|security group|source|port
         deployment TEXT NOT NULL,
         state      TEXT NOT NULL CHECK (state IN ('open', 'closing')),
         since      TEXT NOT NULL, -- RFC 3339
         PRIMARY KEY (rule, deployment)
     );",
    // 5: deployment views stored incrementally: `deployment_views.view` keeps the header (the
    // view without its steps), with its revision in a column of its own, and each step's view
    // is a row of `step_views`, so projecting a record writes what it changed only.
    "CREATE TABLE step_views (
         deployment TEXT    NOT NULL,
         name       TEXT    NOT NULL,
         position   INTEGER NOT NULL, -- in blueprint order, from 0
         view       TEXT    NOT NULL,
         PRIMARY KEY (deployment, name)
     ) WITHOUT ROWID;
     INSERT INTO step_views (deployment, name, position, view)
         SELECT d.id, s.key, row_number() OVER (PARTITION BY d.id ORDER BY s.id) - 1, s.value
         FROM deployment_views AS d, json_each(d.view, '$.steps') AS s;
     ALTER TABLE deployment_views ADD COLUMN revision INTEGER NOT NULL DEFAULT 0;
     UPDATE deployment_views
         SET revision = json_extract(view, '$.revision'), view = json_remove(view, '$.steps');",
    // 6: job indexes that keep taking and waking on jobs from growing with the queue: by due
    // time alone (the rowid after it orders jobs due together by id, as taking them does), and
    // by the end of their lease (few jobs are in flight, so the next to come back is found at once).
    "DROP INDEX jobs_by_due;
     CREATE INDEX jobs_by_due ON jobs (due_at);
     CREATE INDEX jobs_by_lease ON jobs (visible_at);",
];

/// The schema version this build migrates files to.
pub const VERSION: i64 = MIGRATIONS.len() as i64;

/// Brings the file up to [`VERSION`] and returns the version it had before.
///
/// A file newer than [`VERSION`] is left untouched; the caller refuses it.
pub(super) fn migrate(connection: &mut Connection) -> rusqlite::Result<i64> {
    // IMMEDIATE: two processes opening a new file at once must not both create the tables.
    let tx = connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let found: i64 = tx.pragma_query_value(None, "user_version", |row| row.get(0))?;
    for (version, step) in (1..).zip(MIGRATIONS) {
        if version > found {
            tx.execute_batch(step)?;
        }
    }
    if found < VERSION {
        tx.pragma_update(None, "user_version", VERSION)?;
    }
    tx.commit()?;
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    // A file whose views were whole JSON documents reads back the same views once migrated:
    // headers without their steps, and each step a row in blueprint order.
    #[test]
    fn views_stored_as_documents_are_split_into_headers_and_steps() {
        let mut connection = Connection::open_in_memory().expect("in-memory database");
        for step in &MIGRATIONS[..4] {
            connection.execute_batch(step).expect("an older schema");
        }
        connection
            .pragma_update(None, "user_version", 4)
            .expect("version 4");
        // Text, not `json!`, which would sort the steps by name: their order is the point.
        let text = r#"{"id":"0190d9e4-0000-7000-8000-000000000001","tenant":"acme","blueprint":"app",
            "status":"running","steps":{"zeta":{"status":"succeeded","attempts":1,"outputs":{"k":"v"}},
            "alpha":{"status":"pending","attempts":0}},"started_at":"2027-01-15T08:00:00Z",
            "finished_at":null,"revision":7}"#;
        let view: serde_json::Value = serde_json::from_str(text).expect("JSON");
        connection
            .execute(
                "INSERT INTO deployment_views (id, tenant, status, started_at, view)
                 VALUES ('0190d9e4-0000-7000-8000-000000000001', 'acme', 'running', 'x', ?1)",
                [text],
            )
            .expect("an old view");

        assert_eq!(migrate(&mut connection).expect("migrated"), 4);

        let (revision, header): (i64, String) = connection
            .query_row("SELECT revision, view FROM deployment_views", [], |row| {
                Ok((row.get(0)?, row.get(1)?))
            })
            .expect("the header");
        assert_eq!(revision, 7);
        let header: serde_json::Value = serde_json::from_str(&header).expect("JSON");
        let mut expected = view.clone();
        expected.as_object_mut().expect("object").remove("steps");
        assert_eq!(header, expected);
        let mut select = connection
            .prepare("SELECT name, position, view FROM step_views ORDER BY position")
            .expect("steps");
        let steps: Vec<(String, i64, serde_json::Value)> = select
            .query_map([], |row| {
                let json: String = row.get(2)?;
                Ok((
                    row.get(0)?,
                    row.get(1)?,
                    serde_json::from_str(&json).expect("JSON"),
                ))
            })
            .expect("rows")
            .collect::<rusqlite::Result<_>>()
            .expect("steps");
        assert_eq!(
            steps,
            [
                ("zeta".to_owned(), 0, view["steps"]["zeta"].clone()),
                ("alpha".to_owned(), 1, view["steps"]["alpha"].clone()),
            ]
        );
    }
}
