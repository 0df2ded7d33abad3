//! The engine's speed goals, each measured with real `overture deploy` processes on fresh data
//! directories and printed beside its goal and its limit:
//!
//! - [`sequential`]: a chain of 200 `noop` steps, whole process, median of 5 runs on one data
//!   directory, beside one durable commit (the least a step can cost while each transition
//!   survives an OS crash);
//! - [`flat`]: the cost per step of chains and wide deployments of 10 to 10,000 steps, taken
//!   from the log (first event to last), so the process's start-up does not weigh on small ones;
//!   the median of several runs for the sizes that take milliseconds, whose single runs vary
//!   by a tenth either way;
//! - [`concurrent`]: 200 deployments of 5 `noop` steps, 16 at a time, as 16 processes on one
//!   data directory (each driving its own deployment, then handing it to the `overture engine`
//!   serving the directory), and in one engine (`overture deploy` of several blueprints).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use overture_infra::sqlite::{Database, EventLog};
use tokio::sync::Semaphore;

use crate::fixtures::{chain_blueprint, wide_blueprint, StepKind};

/// The sequential goal's chain.
pub const SEQUENTIAL_STEPS: usize = 200;
/// Runs of the chain; the median is the figure.
pub const SEQUENTIAL_RUNS: usize = 5;
/// The sizes whose per-step costs must stay within [`FLAT_SPREAD`] of each other.
pub const FLAT_SIZES: [usize; 4] = [10, 100, 1_000, 10_000];
/// Runs of each of [`FLAT_SIZES`], each on a fresh data directory; the median is the figure.
pub const FLAT_RUNS: [usize; 4] = [7, 5, 3, 1];
/// How long one deployment of the flat-cost series may take before it counts as not finished.
pub const FLAT_CAP: Duration = Duration::from_secs(120);
/// Deployments of the concurrent goal, their steps, and how many run at once.
pub const CONCURRENT_DEPLOYMENTS: usize = 200;
/// Steps of each deployment of the concurrent goal, in a chain.
pub const CONCURRENT_STEPS: usize = 5;
/// How many of the concurrent goal's deployments run at once.
pub const CONCURRENT_AT_ONCE: usize = 16;

/// Goal: milliseconds per step of the chain of 200, at most.
pub const SEQUENTIAL_GOAL_MS: f64 = 1.0;
/// Goal: the largest per-step cost of a shape over its smallest, at most.
pub const FLAT_SPREAD: f64 = 1.5;
/// Goal: steps per second with 16 deployments at once, at least.
pub const CONCURRENT_GOAL: f64 = 2_000.0;

/// The sequential figure and its limit.
#[derive(Clone, Debug)]
pub struct Sequential {
    /// Milliseconds per step of each run, in the order run.
    pub runs_ms_per_step: Vec<f64>,
    /// One commit of one small row with `synchronous=FULL` in WAL mode, in milliseconds.
    pub durable_commit_ms: f64,
}

impl Sequential {
    /// The median run.
    pub fn median_ms_per_step(&self) -> f64 {
        median(&self.runs_ms_per_step)
    }
}

/// One deployment of the flat-cost series.
#[derive(Clone, Debug)]
pub struct Sized {
    /// `chain` or `wide`.
    pub shape: &'static str,
    /// Its steps.
    pub steps: usize,
    /// Milliseconds per step from its first event to its last, the median of its runs; `None`
    /// if a run did not finish within [`FLAT_CAP`].
    pub ms_per_step: Option<f64>,
    /// Wall time of the whole process, the longest of its runs (the cap when one did not
    /// finish).
    pub wall: Duration,
}

/// Steps per second of the concurrent goal, each way.
#[derive(Clone, Copy, Debug)]
pub struct Concurrent {
    /// 16 `overture deploy` processes at a time on one data directory, each driving its own
    /// deployment.
    pub processes: f64,
    /// The same processes on a data directory an `overture engine` serves: each hands its
    /// deployment over and follows it.
    pub served: f64,
    /// One `overture deploy` of all the blueprints, 16 deployments at a time.
    pub one_engine: f64,
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted.get(sorted.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Runs the chain of [`SEQUENTIAL_STEPS`] noop steps [`SEQUENTIAL_RUNS`] times, and measures one
/// durable commit on the same disk.
pub async fn sequential(overture: &Path) -> anyhow::Result<Sequential> {
    // One data directory for every run, as a user's: the first run also makes it.
    let dir = tempfile::tempdir().context("creating a temporary directory")?;
    let blueprint = write(
        dir.path(),
        "chain.yaml",
        &chain_blueprint("bench-chain", SEQUENTIAL_STEPS),
    )?;
    let data = dir.path().join("data");
    let mut runs_ms_per_step = Vec::new();
    for _ in 0..SEQUENTIAL_RUNS {
        let start = Instant::now();
        deploy(overture, &data, std::slice::from_ref(&blueprint), None).await?;
        runs_ms_per_step.push(start.elapsed().as_secs_f64() * 1_000.0 / SEQUENTIAL_STEPS as f64);
    }
    let commits = 500;
    let rate = tokio::task::spawn_blocking(move || crate::log_rate::raw_inserts(1, commits))
        .await
        .context("the raw commit task failed")??;
    Ok(Sequential {
        runs_ms_per_step,
        durable_commit_ms: 1_000.0 / rate.commits_per_sec(),
    })
}

/// Deploys a chain and a wide deployment of each of [`FLAT_SIZES`] steps, [`FLAT_RUNS`] times
/// each.
pub async fn flat(overture: &Path) -> anyhow::Result<Vec<Sized>> {
    let mut sized = Vec::new();
    for (steps, runs) in FLAT_SIZES.into_iter().zip(FLAT_RUNS) {
        for shape in ["chain", "wide"] {
            eprintln!("  {shape} of {steps} noop steps, {runs} times");
            let text = match shape {
                "chain" => chain_blueprint("bench-chain", steps),
                _ => wide_blueprint("bench-wide", steps, StepKind::Noop),
            };
            let mut spans = Vec::new();
            let mut wall = Duration::ZERO;
            for _ in 0..runs {
                let dir = tempfile::tempdir().context("creating a temporary directory")?;
                let blueprint = write(dir.path(), "blueprint.yaml", &text)?;
                let data = dir.path().join("data");
                let start = Instant::now();
                let finished = deploy(overture, &data, &[blueprint], Some(FLAT_CAP)).await?;
                wall = wall.max(start.elapsed());
                if !finished {
                    spans.clear();
                    break;
                }
                spans.push(logged_span(&data).await?.as_secs_f64() * 1_000.0 / steps as f64);
            }
            sized.push(Sized {
                shape,
                steps,
                ms_per_step: (!spans.is_empty()).then(|| median(&spans)),
                wall,
            });
        }
    }
    Ok(sized)
}

/// Runs [`CONCURRENT_DEPLOYMENTS`] chains of [`CONCURRENT_STEPS`] noop steps, 16 at a time, as
/// separate processes on one data directory and then in one engine.
pub async fn concurrent(overture: &Path) -> anyhow::Result<Concurrent> {
    let steps = (CONCURRENT_DEPLOYMENTS * CONCURRENT_STEPS) as f64;
    let dir = tempfile::tempdir().context("creating a temporary directory")?;
    let blueprint = write(
        dir.path(),
        "chain.yaml",
        &chain_blueprint("bench-five", CONCURRENT_STEPS),
    )?;

    let processes =
        steps / deploy_as_processes(overture, &dir.path().join("processes"), &blueprint).await?;
    let served_data = dir.path().join("served");
    let engine = Serving::start(overture, &served_data).await?;
    let served = steps / deploy_as_processes(overture, &served_data, &blueprint).await?;
    engine.stop().await?;

    let blueprints = vec![blueprint; CONCURRENT_DEPLOYMENTS];
    let start = Instant::now();
    deploy_together(overture, &dir.path().join("one-engine"), &blueprints).await?;
    let one_engine = steps / start.elapsed().as_secs_f64();
    Ok(Concurrent {
        processes,
        served,
        one_engine,
    })
}

/// Runs [`CONCURRENT_DEPLOYMENTS`] `overture deploy` processes of `blueprint` on `data`,
/// [`CONCURRENT_AT_ONCE`] at a time; returns how many seconds they took.
async fn deploy_as_processes(
    overture: &Path,
    data: &Path,
    blueprint: &Path,
) -> anyhow::Result<f64> {
    let data = Arc::new(data.to_path_buf());
    let overture_path = Arc::new(overture.to_path_buf());
    let at_once = Arc::new(Semaphore::new(CONCURRENT_AT_ONCE));
    let start = Instant::now();
    let mut running = tokio::task::JoinSet::new();
    for _ in 0..CONCURRENT_DEPLOYMENTS {
        let permit = Arc::clone(&at_once).acquire_owned().await?;
        let (overture, data, blueprint) = (
            Arc::clone(&overture_path),
            Arc::clone(&data),
            blueprint.to_path_buf(),
        );
        running.spawn(async move {
            let deployed = deploy(&overture, &data, &[blueprint], None).await;
            drop(permit);
            deployed
        });
    }
    while let Some(deployed) = running.join_next().await {
        deployed.context("a deploy task failed")??;
    }
    Ok(start.elapsed().as_secs_f64())
}

/// An `overture engine` serving a data directory for the bench; killed when dropped.
struct Serving {
    child: tokio::process::Child,
}

impl Serving {
    /// Starts the engine and returns once it says it serves `data`.
    async fn start(overture: &Path, data: &Path) -> anyhow::Result<Self> {
        use tokio::io::AsyncBufReadExt;
        let mut child = tokio::process::Command::new(overture)
            .arg("--data-dir")
            .arg(data)
            .arg("engine")
            .env_remove("OVERTURE_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("running {} engine", overture.display()))?;
        let stderr = child.stderr.take().context("the engine's stderr")?;
        let mut lines = tokio::io::BufReader::new(stderr).lines();
        while let Some(line) = lines.next_line().await? {
            if line.starts_with("serving deployments in") {
                // Drained from here on, so the engine never blocks on a full pipe.
                tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
                return Ok(Self { child });
            }
        }
        anyhow::bail!("`overture engine` ended without serving {}", data.display())
    }

    /// Stops the engine with SIGTERM, as a service manager would, and waits for it.
    async fn stop(mut self) -> anyhow::Result<()> {
        let pid = self.child.id().context("the engine's pid")?;
        let pid = i32::try_from(pid).context("the engine's pid")?;
        // SAFETY: signals the child this bench started, by its PID; it is not reaped yet.
        anyhow::ensure!(
            unsafe { libc::kill(pid, libc::SIGTERM) } == 0,
            "signalling the engine"
        );
        let status = self.child.wait().await.context("waiting for the engine")?;
        anyhow::ensure!(status.success(), "`overture engine` ended with {status}");
        Ok(())
    }
}

fn write(dir: &Path, name: &str, text: &str) -> anyhow::Result<PathBuf> {
    let path = dir.join(name);
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// Runs `overture deploy` of `blueprints` on `data`; it must succeed. Returns `false` when it
/// was stopped at `cap` before it ended.
async fn deploy(
    overture: &Path,
    data: &Path,
    blueprints: &[PathBuf],
    cap: Option<Duration>,
) -> anyhow::Result<bool> {
    let mut command = tokio::process::Command::new(overture);
    command
        .arg("--data-dir")
        .arg(data)
        .arg("deploy")
        .args(blueprints)
        .env_remove("OVERTURE_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let child = command
        .spawn()
        .with_context(|| format!("running {}", overture.display()))?;
    let output = match cap {
        Some(cap) => match tokio::time::timeout(cap, child.wait_with_output()).await {
            Ok(output) => output,
            // Dropping the future kills the process (kill_on_drop).
            Err(_) => return Ok(false),
        },
        None => child.wait_with_output().await,
    }
    .with_context(|| format!("waiting for {}", overture.display()))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(20).collect();
        anyhow::bail!(
            "`overture deploy` ended with {}; last lines of its output:\n{}",
            output.status,
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
    Ok(true)
}

/// One `overture deploy` of all `blueprints`, [`CONCURRENT_AT_ONCE`] deployments at a time.
async fn deploy_together(
    overture: &Path,
    data: &Path,
    blueprints: &[PathBuf],
) -> anyhow::Result<()> {
    let mut command = tokio::process::Command::new(overture);
    command
        .arg("--data-dir")
        .arg(data)
        .arg("deploy")
        .arg("--at-once")
        .arg(CONCURRENT_AT_ONCE.to_string())
        .args(blueprints)
        .env_remove("OVERTURE_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    let status = command
        .status()
        .await
        .with_context(|| format!("running {}", overture.display()))?;
    anyhow::ensure!(
        status.success(),
        "`overture deploy` of {} blueprints ended with {status}",
        blueprints.len()
    );
    Ok(())
}

/// The time from the log's first event to its last, as recorded.
async fn logged_span(data: &Path) -> anyhow::Result<Duration> {
    let log = EventLog::new(Database::open(data.join("overture.db")).await?);
    let first = log.read_all(0, 1).await?;
    let head = log.head_position().await?;
    let last = log.read_all(head.saturating_sub(1), 1).await?;
    let (Some(first), Some(last)) = (first.first(), last.first()) else {
        anyhow::bail!("the log of {} is empty", data.display());
    };
    Ok(
        (last.envelope.metadata.recorded_at - first.envelope.metadata.recorded_at)
            .to_std()
            .unwrap_or_default(),
    )
}
