//! Appends to the SQLite event log, and the raw SQLite insert rate they are bounded by.
//!
//! Both write to a fresh file in WAL mode with `synchronous=FULL`, so every commit waits for
//! the disk. The log goes through [`EventLog::append`] as the engine does (a blocking-task hop,
//! `BEGIN IMMEDIATE`, the expected-revision check, JSON encoding, the unique indexes); the raw
//! inserts put rows of the same size in a table without secondary indexes, which is as fast
//! as SQLite commits on this disk.

use std::time::{Duration, Instant};

use anyhow::Context;
use overture_events::DeploymentId;
use overture_infra::sqlite::{Database, EventLog, ExpectedRevision, NewEvent};
use rusqlite::{params, Connection, TransactionBehavior};
use uuid::Uuid;

use crate::fixtures::{replay_blueprint, Recorder};

/// Commits per second, each holding `per_commit` events or rows.
#[derive(Clone, Copy, Debug)]
pub struct CommitRate {
    /// Events or rows in each commit.
    pub per_commit: usize,
    /// Commits made.
    pub commits: usize,
    /// How long they took.
    pub elapsed: Duration,
}

impl CommitRate {
    /// Commits (appends, transactions) per second.
    pub fn commits_per_sec(&self) -> f64 {
        self.commits as f64 / self.elapsed.as_secs_f64()
    }

    /// Events (rows) per second.
    pub fn events_per_sec(&self) -> f64 {
        (self.commits * self.per_commit) as f64 / self.elapsed.as_secs_f64()
    }
}

/// Batches of `per_append` `StepSucceeded` events on one deployment's stream, opened with its
/// request, which is not timed.
struct Workload {
    deployment: DeploymentId,
    opening: Vec<NewEvent>,
    batches: Vec<Vec<NewEvent>>,
}

fn workload(per_append: usize, appends: usize) -> anyhow::Result<Workload> {
    let deployment = DeploymentId::from_uuid(Uuid::now_v7());
    let mut recorder = Recorder::new(deployment, "acme");
    let opening = recorder.requested(&replay_blueprint()?)?;
    let mut step = 0;
    let batches = (0..appends)
        .map(|_| {
            (0..per_append)
                .map(|_| {
                    step += 1;
                    recorder.step_succeeded(&format!("step-{step:05}"))
                })
                .collect()
        })
        .collect();
    Ok(Workload {
        deployment,
        opening,
        batches,
    })
}

/// Times `appends` appends of `per_append` events each through [`EventLog::append`], each
/// expecting the revision the previous one left, as the engine's writers do.
pub async fn log_appends(per_append: usize, appends: usize) -> anyhow::Result<CommitRate> {
    let dir = tempfile::tempdir().context("creating a temporary directory")?;
    let db = Database::open(dir.path().join("overture.db")).await?;
    let log = EventLog::new(db);
    let Workload {
        deployment,
        opening,
        batches,
    } = workload(per_append, appends)?;
    let stream = deployment.stream();
    let opened = log
        .append(&stream, ExpectedRevision::NoStream, opening)
        .await?;
    let mut last = opened
        .last()
        .map(|entry| entry.envelope.revision)
        .context("the opening append stored nothing")?;

    let start = Instant::now();
    for batch in batches {
        let entries = log
            .append(&stream, ExpectedRevision::Exact(last), batch)
            .await?;
        last = entries
            .last()
            .map(|entry| entry.envelope.revision)
            .context("an append stored nothing")?;
    }
    let elapsed = start.elapsed();
    Ok(CommitRate {
        per_commit: per_append,
        commits: appends,
        elapsed,
    })
}

/// Times `commits` transactions of `per_commit` plain inserts each, with the log's durability
/// settings and rows of the same size.
pub fn raw_inserts(per_commit: usize, commits: usize) -> anyhow::Result<CommitRate> {
    let dir = tempfile::tempdir().context("creating a temporary directory")?;
    let mut connection = Connection::open(dir.path().join("raw.db"))?;
    let mode: String =
        connection.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))?;
    anyhow::ensure!(
        mode.eq_ignore_ascii_case("wal"),
        "SQLite refused WAL journaling (mode {mode})"
    );
    connection.pragma_update(None, "synchronous", "FULL")?;
    connection.execute_batch(
        "CREATE TABLE events (
             position INTEGER PRIMARY KEY,
             stream   TEXT    NOT NULL,
             revision INTEGER NOT NULL,
             id       TEXT    NOT NULL,
             type     TEXT    NOT NULL,
             data     TEXT    NOT NULL,
             metadata TEXT    NOT NULL
         );",
    )?;
    let Workload {
        deployment,
        batches,
        ..
    } = workload(per_commit, commits)?;
    let stream = deployment.stream();
    let rows: Vec<Vec<[String; 4]>> = batches
        .into_iter()
        .map(|batch| {
            batch
                .into_iter()
                .map(|event| {
                    Ok([
                        event.id.to_string(),
                        event.event_type,
                        event.data.to_string(),
                        serde_json::to_string(&event.metadata)?,
                    ])
                })
                .collect::<Result<_, serde_json::Error>>()
        })
        .collect::<Result<_, _>>()?;

    let start = Instant::now();
    let mut revision: u64 = 0;
    for batch in rows {
        let tx = connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
        {
            let mut insert = tx.prepare_cached("INSERT INTO events (stream, revision, id, type, data, metadata) VALUES (?1, ?2, ?3, ?4, ?5, ?6)")?;
            for [id, event_type, data, metadata] in batch {
                insert.execute(params![stream, revision, id, event_type, data, metadata])?;
                revision += 1;
            }
        }
        tx.commit()?;
    }
    let elapsed = start.elapsed();
    Ok(CommitRate {
        per_commit,
        commits,
        elapsed,
    })
}
