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
    // 7: each step's view in columns rather than one JSON document: a rebuild writes hundreds
    // of thousands of step rows, and their keys and times as JSON text cost more to encode,
    // write and read back than the rest of the row. Times are unix nanoseconds (INTEGER), or
    // RFC 3339 text where those cannot hold them (and in rows migrated from documents).
    "CREATE TABLE step_columns (
         deployment  TEXT    NOT NULL,
         name        TEXT    NOT NULL,
         position    INTEGER NOT NULL, -- in blueprint order, from 0
         status      TEXT    NOT NULL,
         attempts    INTEGER NOT NULL,
         started_at,
         finished_at,
         error_class TEXT,
         outputs     TEXT,             -- a JSON object; NULL when it has no outputs
         PRIMARY KEY (deployment, name)
     ) WITHOUT ROWID;
     INSERT INTO step_columns
         SELECT deployment, name, position, json_extract(view, '$.status'),
                json_extract(view, '$.attempts'), json_extract(view, '$.started_at'),
                json_extract(view, '$.finished_at'), json_extract(view, '$.error_class'),
                json_extract(view, '$.outputs')
         FROM step_views;
     DROP TABLE step_views;
     ALTER TABLE step_columns RENAME TO step_views;",
    // 8: the tenants' service registry: each registered instance, and each deployment's
    // interest in a service its steps require or watch (`watched`: 1 when one watches it).
    // Nothing recorded before this build registers a service, so there is nothing to fill in.
    "CREATE TABLE service_instances (
         tenant        TEXT    NOT NULL,
         service       TEXT    NOT NULL,
         address       TEXT    NOT NULL,
         port          INTEGER NOT NULL,
         deployment    TEXT    NOT NULL,
         step          TEXT    NOT NULL,
         host          TEXT    NOT NULL,
         registered_at         NOT NULL, -- unix nanoseconds, or RFC 3339 text as step times
         PRIMARY KEY (tenant, service, address, port, deployment)
     ) WITHOUT ROWID;
     CREATE TABLE service_interests (
         tenant     TEXT    NOT NULL,
         service    TEXT    NOT NULL,
         deployment TEXT    NOT NULL,
         watched    INTEGER NOT NULL,
         PRIMARY KEY (tenant, service, deployment)
     ) WITHOUT ROWID;",
    // 9: the tenant is the cloud project's id, no longer its name (names repeat across
    // Keystone domains). The read models are emptied and their checkpoint dropped, so they are
    // folded again from the log, where a record made with a token keeps its project's id.
    "DELETE FROM deployment_views; DELETE FROM step_views; DELETE FROM tenant_views;
     DELETE FROM service_instances; DELETE FROM service_interests;
     DELETE FROM checkpoints WHERE name = 'read-models';",
    // 10: the one-time sealings of events recorded before the log was chained (see
    // `chain.rs`): when, how many events, up to which position.
    "CREATE TABLE chain_seals (
         sealed_at TEXT    NOT NULL, -- RFC 3339
         events    INTEGER NOT NULL,
         up_to     INTEGER NOT NULL
     );",
    // 11: deployment names, each held by one deployment of its tenant until it is destroyed
    // (see `names.rs`).
    "CREATE TABLE deployment_names (
         tenant     TEXT NOT NULL,
         name       TEXT NOT NULL,
         deployment TEXT NOT NULL UNIQUE, -- its stream
         PRIMARY KEY (tenant, name)
     ) WITHOUT ROWID;",
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

/// Takes a new file to `version` only, as an older build left it: for tests of upgrades.
#[cfg(test)]
pub(super) fn migrate_to(connection: &Connection, version: i64) -> rusqlite::Result<()> {
    for step in MIGRATIONS
        .iter()
        .take(usize::try_from(version).unwrap_or(0))
    {
        connection.execute_batch(step)?;
    }
    connection.pragma_update(None, "user_version", version)
}

/// Takes a file from the version it has to `version` only, as a build of that version would:
/// for tests of one upgrade among later ones.
#[cfg(test)]
pub(super) fn upgrade_to(connection: &Connection, version: i64) -> rusqlite::Result<()> {
    let found: i64 = connection.pragma_query_value(None, "user_version", |row| row.get(0))?;
    for (at, step) in (1..).zip(MIGRATIONS) {
        if at > found && at <= version {
            connection.execute_batch(step)?;
        }
    }
    connection.pragma_update(None, "user_version", version)
}

#[cfg(test)]
mod tests {
    use super::*;

    // A file whose views were whole JSON documents reads back the same views once migrated:
    // headers without their steps, and each step a row of columns in blueprint order.
    #[test]
    fn views_stored_as_documents_are_split_into_headers_and_steps() {
        let connection = Connection::open_in_memory().expect("in-memory database");
        for step in &MIGRATIONS[..4] {
            connection.execute_batch(step).expect("an older schema");
        }
        connection
            .pragma_update(None, "user_version", 4)
            .expect("version 4");
        // Text, not `json!`, which would sort the steps by name: their order is the point.
        let text = r#"{"id":"0190d9e4-0000-7000-8000-000000000001","tenant":"acme","blueprint":"app",
            "status":"running","steps":{"zeta":{"status":"succeeded","attempts":1,"started_at":"2027-01-15T08:00:01Z",
            "finished_at":"2027-01-15T08:00:02.5Z","outputs":{"k":"v"}},
            "alpha":{"status":"retrying","attempts":2,"error_class":"host-unreachable"}},"started_at":"2027-01-15T08:00:00Z",
            "finished_at":null,"revision":7}"#;
        let view: serde_json::Value = serde_json::from_str(text).expect("JSON");
        connection
            .execute(
                "INSERT INTO deployment_views (id, tenant, status, started_at, view)
                 VALUES ('0190d9e4-0000-7000-8000-000000000001', 'acme', 'running', 'x', ?1)",
                [text],
            )
            .expect("an old view");

        // Up to 8 only: 9 empties the read models, to be folded again from the log.
        for step in &MIGRATIONS[4..8] {
            connection.execute_batch(step).expect("migrated");
        }

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
        // Steps come out in columns (migration 7): times as the documents held them.
        let mut select = connection
            .prepare(
                "SELECT name, position, status, attempts, started_at, finished_at, error_class,
                        outputs FROM step_views ORDER BY position",
            )
            .expect("steps");
        type Row = (
            String,
            i64,
            String,
            i64,
            Option<String>,
            Option<String>,
            Option<String>,
            Option<String>,
        );
        let steps: Vec<Row> = select
            .query_map([], |row| {
                Ok((
                    row.get(0)?,
                    row.get(1)?,
                    row.get(2)?,
                    row.get(3)?,
                    row.get(4)?,
                    row.get(5)?,
                    row.get(6)?,
                    row.get(7)?,
                ))
            })
            .expect("rows")
            .collect::<rusqlite::Result<_>>()
            .expect("steps");
        assert_eq!(
            steps,
            [
                (
                    "zeta".to_owned(),
                    0,
                    "succeeded".to_owned(),
                    1,
                    Some("2027-01-15T08:00:01Z".to_owned()),
                    Some("2027-01-15T08:00:02.5Z".to_owned()),
                    None,
                    Some(r#"{"k":"v"}"#.to_owned()),
                ),
                (
                    "alpha".to_owned(),
                    1,
                    "retrying".to_owned(),
                    2,
                    None,
                    None,
                    Some("host-unreachable".to_owned()),
                    None,
                ),
            ]
        );
    }

    // Views folded when the tenant was the project's name are folded again from the log, where
    // the project's id is kept: the log stays, the read models and their checkpoint go.
    #[test]
    fn the_read_models_are_folded_again_once_the_tenant_is_the_project_id() {
        let mut connection = Connection::open_in_memory().expect("in-memory database");
        migrate_to(&connection, 8).expect("version 8");
        connection
            .execute_batch(
                "INSERT INTO events (stream, revision, id, type, data, metadata)
                     VALUES ('deployment-x', 0, 'e1', 'DeploymentRequested', '{}', '{}');
                 INSERT INTO deployment_views (id, tenant, status, started_at, view)
                     VALUES ('x', 'acme', 'running', 'x', '{}');
                 INSERT INTO tenant_views (tenant, view) VALUES ('acme', '{}');
                 INSERT INTO checkpoints (name, position) VALUES ('read-models', 1);",
            )
            .expect("an old file");
        assert_eq!(migrate(&mut connection).expect("migrated"), 8);
        let count = |table: &str| -> i64 {
            connection
                .query_row(&format!("SELECT count(*) FROM {table}"), [], |row| {
                    row.get(0)
                })
                .expect("count")
        };
        assert_eq!(count("events"), 1, "the log is kept");
        assert_eq!(count("deployment_views"), 0);
        assert_eq!(count("tenant_views"), 0);
        assert_eq!(count("checkpoints"), 0);
    }
}
