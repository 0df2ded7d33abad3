//! Rebuilding every read model from a log of a million events.

use std::time::{Duration, Instant};

use anyhow::Context;
use overture_domain::projection::DeploymentStatus;
use overture_events::DeploymentId;
use overture_infra::sqlite::read_models::LogChanges;
use overture_infra::sqlite::{Database, EventLog, ExpectedRevision, ListFilter, SqliteReadModels};
use uuid::Uuid;

use crate::fixtures::{replay_blueprint, Recorder, TENANTS};

/// The environment variable naming a file to keep the replayed log in and read it again from.
const KEEP_LOG: &str = "OVERTURE_BENCH_REPLAY_LOG";

/// A replay and the log it read.
#[derive(Clone, Copy, Debug)]
pub struct Replay {
    /// Events folded.
    pub events: u64,
    /// Deployments in the log (and views rebuilt).
    pub deployments: usize,
    /// How long appending the log took (whole streams per append; building events excluded).
    pub written_in: Duration,
    /// How long [`overture_projector::rebuild`] took.
    pub rebuilt_in: Duration,
    /// The CPU time the process spent meanwhile (every thread, user and system): what the
    /// rebuild cost, whatever else the machine was running.
    pub rebuild_cpu: Option<Duration>,
}

/// The CPU time this process has used so far (user and system, every thread), from
/// `/proc/self/stat`; `None` where that cannot be read.
fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // The kernel's USER_HZ, 100 on every Linux this runs on.
    Some(Duration::from_millis(ticks * 10))
}

impl Replay {
    /// Events written per second while building the log.
    pub fn written_per_sec(&self) -> f64 {
        self.events as f64 / self.written_in.as_secs_f64()
    }

    /// Events folded per second while rebuilding.
    pub fn replayed_per_sec(&self) -> f64 {
        self.events as f64 / self.rebuilt_in.as_secs_f64()
    }
}

/// Writes `deployments` whole successful deployments, one stream per append, then times
/// rebuilding the read models from them (the log read with [`LogChanges`], decoding only what
/// the views need) and checks every deployment came out succeeded.
pub async fn replay(deployments: usize) -> anyhow::Result<Replay> {
    let dir = tempfile::tempdir().context("creating a temporary directory")?;
    let path = dir.path().join("overture.db");
    // For profiling the rebuild alone: the log written once is kept there and copied for
    // later runs. The figures reported come from runs without it, which write a fresh log.
    let kept = std::env::var_os(KEEP_LOG).map(std::path::PathBuf::from);
    let reused = match &kept {
        Some(kept) if kept.exists() => {
            std::fs::copy(kept, &path).with_context(|| format!("copying {}", kept.display()))?;
            true
        }
        _ => false,
    };
    let db = Database::open(&path).await?;
    let log = EventLog::new(db.clone());
    let read_models = SqliteReadModels::new(db.clone());
    let parsed = replay_blueprint()?;

    let mut written = 0;
    let mut written_in = Duration::ZERO;
    if reused {
        written = db
            .read(|c| {
                c.query_row("SELECT count(*) FROM events", [], |row| {
                    row.get::<_, i64>(0)
                })
            })
            .await? as u64;
    } else {
        for (i, tenant) in (0..deployments).zip(TENANTS.iter().cycle()) {
            let deployment = DeploymentId::from_uuid(Uuid::now_v7());
            let events = Recorder::new(deployment, tenant).whole_deployment(&parsed)?;
            let start = Instant::now();
            written += log
                .append(&deployment.stream(), ExpectedRevision::NoStream, events)
                .await?
                .len() as u64;
            written_in += start.elapsed();
            if (i + 1) % (deployments / 4).max(1) == 0 {
                eprintln!("  log: {} of {deployments} deployments written", i + 1);
            }
        }
        if let Some(kept) = &kept {
            let into = kept.to_string_lossy().into_owned();
            // A connection of its own: VACUUM does not run inside the writer's transactions.
            rusqlite::Connection::open(&path)?.execute("VACUUM INTO ?1", [into])?;
        }
    }

    // The log read on a connection of its own, so reading overlaps writing the read models.
    let reader = LogChanges::new(Database::open(&path).await?);
    let start = Instant::now();
    let cpu_before = cpu_time();
    let events =
        overture_projector::rebuild(&reader, &read_models, overture_projector::BATCH).await?;
    let rebuilt_in = start.elapsed();
    let rebuild_cpu = cpu_before
        .zip(cpu_time())
        .map(|(before, after)| after.saturating_sub(before));

    anyhow::ensure!(
        events == written,
        "the rebuild folded {events} events, but the log holds {written}"
    );
    let views = read_models.list(ListFilter::default()).await?;
    anyhow::ensure!(
        views.len() == deployments,
        "the rebuild made {} deployment views from {deployments} deployments",
        views.len()
    );
    let unfinished = views
        .iter()
        .filter(|view| view.status != DeploymentStatus::Succeeded)
        .count();
    anyhow::ensure!(
        unfinished == 0,
        "{unfinished} rebuilt deployment views are not `succeeded`"
    );
    let counted: u64 = read_models
        .tenants()
        .await?
        .iter()
        .map(|tenant| tenant.succeeded)
        .sum();
    anyhow::ensure!(
        counted == deployments as u64,
        "the tenant views count {counted} successes, not {deployments}"
    );

    Ok(Replay {
        events,
        deployments,
        written_in,
        rebuilt_in,
        rebuild_cpu,
    })
}
