//! `overture-bench`: how fast Overture's embedded engine is, on this machine's disk.
//!
//! Run it with `make bench`, that is
//! `cargo build --release -p overture -p overture-bench && target/release/overture-bench`.
//! It needs the `overture` binary beside its own, `bwrap` for the script steps, and for the
//! cluster (8) root, `ip netns` and `/usr/sbin/haproxy`. Everything happens in temporary
//! directories that are removed afterwards; a run takes a few minutes on two cores. It prints a
//! table, then the same figures as one JSON object on the last line.
//!
//! What it measures, always with the engine's durability settings (WAL, `synchronous=FULL`):
//! 1. [`log_rate::log_appends`]: appends per second through `EventLog::append` with an exact
//!    expected revision, one and ten `StepSucceeded` events per append;
//! 2. [`log_rate::raw_inserts`]: beside them, plain rusqlite transactions of rows of the same
//!    size, the limit the log can approach;
//! 3. [`replay::replay`]: events per second rebuilding every read model
//!    (`overture_projector::rebuild`) from a log of a million events, checked afterwards;
//! 4. [`deploy::deploy`]: wall time per step of the real `overture deploy` process on wide DAGs
//!    of `noop` steps (the engine's own overhead) and of `script` steps running `true` in
//!    bubblewrap;
//! 5. [`sandbox::start_up`]: what the sandbox itself costs a step: `true` started one at a time
//!    in a fresh sandbox, beside the same `/bin/sh -c true` started without one, and in a
//!    sandbox with a network of its own (a networked step's firewall and `pasta`);
//! 6. [`dynamodb::dynamodb`]: the DynamoDB event log in the local AWS emulator: appends per
//!    second, the rate of reading streams back, and the DynamoDB requests each costs;
//! 7. [`aws_costs::aws_costs`]: `examples/hello-world` deployed through the local AWS form
//!    (`scripts/local-aws.sh`): the Lambda invocations, DynamoDB request units, SQS, KMS and S3
//!    requests per deployment and per step, and what 1,000 deployments cost on AWS.
//!
//! 8. [`cluster::cluster`]: `examples/haproxy-cluster` on the local cloud (`overture cloud up`),
//!    its steps waiting for services at run time, beside the same workflow forced into a strict
//!    sequence (every step after the one before it), alternately from the same run: the wall
//!    time each way, the gain, and how long `db` and `app-install` ran side by side. It needs
//!    root, `ip netns` and haproxy; `overture-bench cluster` runs it alone.
//!
//! 9. [`speed`]: the engine's speed goals (a chain of 200 steps, the cost per step from 10 to
//!    10,000 steps, 200 deployments 16 at a time, and the replay above), printed by [`goals`]
//!    beside their targets and limits. `overture-bench goals` measures these alone.
//!
//! [`fixtures`] builds the events and blueprints; [`report`] prints the figures.
//!
//! `overture-bench replay` runs the replay alone (3) and prints its figure; `overture-bench
//! cluster` runs the cluster alone (8) and prints its figures, then them as JSON.

mod aws_costs;
mod cluster;
mod deploy;
mod dynamodb;
mod fixtures;
mod goals;
mod log_rate;
mod replay;
mod report;
mod sandbox;
mod speed;

use std::process::ExitCode;

use anyhow::Context;

use crate::fixtures::StepKind;
use crate::report::Figures;

/// The allocator the `overture` program uses, so that what the bench runs in its own process
/// (the rebuild of the read models) is measured as `overture rebuild` runs it.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Appends of one event each.
const SINGLE_APPENDS: usize = 2_000;
/// Appends of ten events each.
const BATCH_APPENDS: usize = 500;
/// Deployments of 100 events each in the replayed log.
const REPLAY_DEPLOYMENTS: usize = 10_000;
/// Steps of the noop deployment: a root, 998 parallel steps, a final step.
const NOOP_STEPS: usize = 1_000;
/// Steps of the script deployment, shaped likewise.
const SCRIPT_STEPS: usize = 200;
/// Commands started each way to measure the sandbox's start-up cost.
const SANDBOX_STARTS: usize = 200;
/// Appends of one event, and of ten, to the DynamoDB log in the emulator. Few: moto copies
/// every table a transaction touches, so each append costs more as the table grows.
const DYNAMODB_APPENDS: usize = 100;
const DYNAMODB_BATCHES: usize = 30;
/// Whole deployments (100 events each) written to the DynamoDB log and read back.
const DYNAMODB_DEPLOYMENTS: usize = 5;

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> anyhow::Result<()> {
    let only_goals = match std::env::args().nth(1).as_deref() {
        None => false,
        Some("replay") => return replay_alone().await,
        Some("cluster") => return cluster_alone().await,
        Some("goals") => true,
        Some(other) => anyhow::bail!(
            "no section `{other}`: run `overture-bench` for every figure, `overture-bench goals` for the speed goals alone, `overture-bench replay` for the replay alone, or `overture-bench cluster` for the haproxy cluster on the local cloud alone"
        ),
    };
    // Before anything slow: a missing binary should fail at once.
    let overture = deploy::overture_binary()?;
    if !only_goals {
        cluster::check_prerequisites()?;
    }
    let speed = speed_goals(&overture).await?;
    if only_goals {
        println!();
        print!("{}", goals::table(&speed));
        println!();
        println!("{}", serde_json::json!({ "goals": goals::json(&speed) }));
        return Ok(());
    }
    let nproc = std::thread::available_parallelism()
        .map(usize::from)
        .unwrap_or(1);

    eprintln!("log appends: {SINGLE_APPENDS} of 1 event, {BATCH_APPENDS} of 10 events");
    let log_1 = log_rate::log_appends(1, SINGLE_APPENDS).await?;
    let log_10 = log_rate::log_appends(10, BATCH_APPENDS).await?;
    eprintln!("raw SQLite inserts, likewise");
    let raw_1 = tokio::task::spawn_blocking(|| log_rate::raw_inserts(1, SINGLE_APPENDS))
        .await
        .context("the raw insert task failed")??;
    let raw_10 = tokio::task::spawn_blocking(|| log_rate::raw_inserts(10, BATCH_APPENDS))
        .await
        .context("the raw insert task failed")??;

    let replay = speed.replay;

    eprintln!("overture deploy: {NOOP_STEPS} noop steps");
    let noop = deploy::deploy(&overture, NOOP_STEPS, StepKind::Noop).await?;
    eprintln!("overture deploy: {SCRIPT_STEPS} script steps");
    let script = deploy::deploy(&overture, SCRIPT_STEPS, StepKind::ScriptTrue).await?;

    eprintln!(
        "sandbox start-up: {SANDBOX_STARTS} `true` in a sandbox and {SANDBOX_STARTS} without"
    );
    let start_up = sandbox::start_up(SANDBOX_STARTS).await?;

    eprintln!("DynamoDB log in the emulator: {DYNAMODB_APPENDS} appends of 1 event, {DYNAMODB_BATCHES} of 10, then reading the streams back");
    let dynamodb =
        dynamodb::dynamodb(DYNAMODB_APPENDS, DYNAMODB_BATCHES, DYNAMODB_DEPLOYMENTS).await?;

    eprintln!(
        "the local AWS form: hello-world once to warm up, then {} deployments counted",
        aws_costs::DEPLOYMENTS
    );
    let aws = aws_costs::aws_costs(&overture).await?;

    let cluster = cluster_section(&overture).await?;

    let figures = Figures {
        nproc,
        log_1,
        log_10,
        raw_1,
        raw_10,
        replay,
        noop,
        script,
        start_up,
        dynamodb,
        aws,
        cluster,
    };
    println!();
    print!("{}", report::table(&figures));
    println!();
    print!("{}", goals::table(&speed));
    println!();
    let mut json = report::json(&figures);
    json["goals"] = goals::json(&speed);
    println!("{json}");
    Ok(())
}

/// Measures the speed goals, from the replay on.
async fn speed_goals(overture: &std::path::Path) -> anyhow::Result<goals::Speed> {
    let replay = replay_section().await?;
    eprintln!(
        "sequential: a chain of {} noop steps, {} times",
        speed::SEQUENTIAL_STEPS,
        speed::SEQUENTIAL_RUNS
    );
    let sequential = speed::sequential(overture).await?;
    eprintln!("flat cost: chains and wide deployments of 10 to 10,000 noop steps");
    let flat = speed::flat(overture).await?;
    eprintln!(
        "concurrent: {} deployments of {} noop steps, {} at once",
        speed::CONCURRENT_DEPLOYMENTS,
        speed::CONCURRENT_STEPS,
        speed::CONCURRENT_AT_ONCE
    );
    let concurrent = speed::concurrent(overture).await?;
    Ok(goals::Speed {
        sequential,
        flat,
        concurrent,
        replay,
    })
}

async fn replay_section() -> anyhow::Result<replay::Replay> {
    eprintln!("replay: writing {REPLAY_DEPLOYMENTS} deployments of {} events, then rebuilding the read models", 3 * fixtures::REPLAY_STEPS + 4);
    replay::replay(REPLAY_DEPLOYMENTS).await
}

async fn replay_alone() -> anyhow::Result<()> {
    let replay = replay_section().await?;
    println!("{}", report::replay_line(&replay));
    Ok(())
}

async fn cluster_section(overture: &std::path::Path) -> anyhow::Result<cluster::Cluster> {
    eprintln!(
        "the haproxy cluster on the local cloud: run-time waits and a strict sequence, alternately, {} times each",
        cluster::RUNS
    );
    cluster::cluster(overture).await
}

async fn cluster_alone() -> anyhow::Result<()> {
    let overture = deploy::overture_binary()?;
    cluster::check_prerequisites()?;
    let cluster = cluster_section(&overture).await?;
    println!();
    print!("{}", report::cluster_table(&cluster));
    println!();
    println!(
        "{}",
        serde_json::json!({ "cluster": report::cluster_json(&cluster) })
    );
    Ok(())
}
