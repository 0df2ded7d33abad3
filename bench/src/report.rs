//! The figures of one run, as a table for people and as one JSON object for machines.

use std::fmt::Write as _;

use crate::aws_costs::{AwsCosts, STEPS};
use crate::cluster::Cluster;
use crate::deploy::Deployed;
use crate::dynamodb::DynamoFigures;
use crate::log_rate::CommitRate;
use crate::replay::Replay;
use crate::sandbox::StartUp;

/// Everything one run measured.
#[derive(Clone, Debug)]
pub struct Figures {
    /// CPUs this process may use.
    pub nproc: usize,
    /// Log appends of one event each.
    pub log_1: CommitRate,
    /// Log appends of ten events each.
    pub log_10: CommitRate,
    /// Raw SQLite transactions of one insert each.
    pub raw_1: CommitRate,
    /// Raw SQLite transactions of ten inserts each.
    pub raw_10: CommitRate,
    /// Rebuilding the read models.
    pub replay: Replay,
    /// The deployment of noop steps.
    pub noop: Deployed,
    /// The deployment of script steps.
    pub script: Deployed,
    /// A command started in a sandbox and without one.
    pub start_up: StartUp,
    /// The DynamoDB log in the local emulator.
    pub dynamodb: DynamoFigures,
    /// hello-world through the local AWS form.
    pub aws: AwsCosts,
    /// The haproxy cluster on the local cloud, with run-time waits and in a strict sequence.
    pub cluster: Cluster,
}

fn per_sec(value: f64) -> u64 {
    value.round() as u64
}

fn two_decimals(value: f64) -> f64 {
    (value * 100.0).round() / 100.0
}

/// `part` as a percentage of `whole`.
fn share(part: f64, whole: f64) -> String {
    format!("{:.0}%", 100.0 * part / whole)
}

/// The replay goal of issue 13, in events per second.
pub const REPLAY_GOAL: f64 = 1_000_000.0;

fn replay_limit(replay: &Replay) -> String {
    let cpu = replay.rebuild_cpu.map_or_else(String::new, |cpu| {
        format!(", {:.2} s of CPU", cpu.as_secs_f64())
    });
    format!(
        "{} events in {:.2} s{cpu}; goal >= {} events/s",
        replay.events,
        replay.rebuilt_in.as_secs_f64(),
        per_sec(REPLAY_GOAL)
    )
}

/// The replay's figure alone, as `overture-bench replay` prints it.
pub fn replay_line(replay: &Replay) -> String {
    format!(
        "replay: rebuild read models of {} deployments: {} events/s ({})",
        replay.deployments,
        per_sec(replay.replayed_per_sec()),
        replay_limit(replay)
    )
}

/// The figures as an aligned table: figure, value, unit, and the limit to compare with.
pub fn table(f: &Figures) -> String {
    let mut rows = log_rows(f);
    rows.extend(deploy_rows(f));
    rows.extend(dynamodb_rows(&f.dynamodb));
    rows.extend(aws_rows(&f.aws));
    rows.extend(cluster_rows(&f.cluster));
    rows.push([
        "CPUs (nproc)".into(),
        f.nproc.to_string(),
        String::new(),
        String::new(),
    ]);
    aligned(["figure", "value", "unit", "limit / note"], &rows, &[1])
}

/// The log's rows: appends and events a second against raw SQLite, the bulk write, the replay.
fn log_rows(f: &Figures) -> Vec<[String; 4]> {
    vec![
        [
            format!("log appends, {} event each", f.log_1.per_commit),
            per_sec(f.log_1.commits_per_sec()).to_string(),
            "appends/s".into(),
            limit(
                f.raw_1.commits_per_sec(),
                "commits/s",
                f.log_1.commits_per_sec(),
            ),
        ],
        [
            format!("log appends, {} events each", f.log_10.per_commit),
            per_sec(f.log_10.commits_per_sec()).to_string(),
            "appends/s".into(),
            limit(
                f.raw_10.commits_per_sec(),
                "commits/s",
                f.log_10.commits_per_sec(),
            ),
        ],
        [
            format!("log events, {} per append", f.log_10.per_commit),
            per_sec(f.log_10.events_per_sec()).to_string(),
            "events/s".into(),
            limit(
                f.raw_10.events_per_sec(),
                "rows/s",
                f.log_10.events_per_sec(),
            ),
        ],
        [
            format!(
                "bulk log write, {} events per append",
                f.replay.events / f.replay.deployments.max(1) as u64
            ),
            per_sec(f.replay.written_per_sec()).to_string(),
            "events/s".into(),
            String::new(),
        ],
        [
            format!(
                "replay: rebuild read models of {} deployments",
                f.replay.deployments
            ),
            per_sec(f.replay.replayed_per_sec()).to_string(),
            "events/s".into(),
            replay_limit(&f.replay),
        ],
    ]
}

/// The embedded engine's rows: a deployment's time per step, and what a sandbox costs to start.
fn deploy_rows(f: &Figures) -> Vec<[String; 4]> {
    vec![
        [
            format!("overture deploy, {} noop steps (wide DAG)", f.noop.steps),
            format!("{:.2}", f.noop.ms_per_step()),
            "ms/step".into(),
            format!("{:.1} s in all", f.noop.elapsed.as_secs_f64()),
        ],
        [
            format!(
                "overture deploy, {} script `true` steps (wide DAG)",
                f.script.steps
            ),
            format!("{:.2}", f.script.ms_per_step()),
            "ms/step".into(),
            format!("{:.1} s in all", f.script.elapsed.as_secs_f64()),
        ],
        [
            format!(
                "sandbox start-up, `true` x {}, one at a time",
                f.start_up.runs
            ),
            format!("{:.2}", f.start_up.sandboxed_ms()),
            "ms/step".into(),
            format!(
                "without a sandbox: {:.2} ms; the sandbox adds {:.2} ms",
                f.start_up.plain_ms(),
                f.start_up.sandboxed_ms() - f.start_up.plain_ms()
            ),
        ],
        [
            format!(
                "sandbox start-up with a network of its own (nftables, pasta), `true` x {}",
                f.start_up.runs
            ),
            format!("{:.2}", f.start_up.networked_ms()),
            "ms/step".into(),
            format!(
                "the step's own network adds {:.2} ms",
                f.start_up.networked_ms() - f.start_up.sandboxed_ms()
            ),
        ],
    ]
}

/// The DynamoDB log's rows, in the local emulator.
fn dynamodb_rows(d: &DynamoFigures) -> Vec<[String; 4]> {
    vec![
        [
            "DynamoDB log (emulator), appends of 1 event".into(),
            per_sec(d.appends_1.commits_per_sec()).to_string(),
            "appends/s".into(),
            format!("{:.2} DynamoDB requests per append", d.requests_per_append),
        ],
        [
            format!(
                "DynamoDB log (emulator), appends of {} events",
                d.appends_10.per_commit
            ),
            per_sec(d.appends_10.commits_per_sec()).to_string(),
            "appends/s".into(),
            format!(
                "{} events/s; the emulator's rate, not AWS's",
                per_sec(d.appends_10.events_per_sec())
            ),
        ],
        [
            "DynamoDB log (emulator), replay stream by stream".into(),
            per_sec(d.replayed_per_sec).to_string(),
            "events/s".into(),
            format!("{:.2} DynamoDB requests per stream", d.requests_per_stream),
        ],
    ]
}

/// The AWS form's rows: what one hello-world deployment costs, request by request.
fn aws_rows(a: &AwsCosts) -> Vec<[String; 4]> {
    vec![
        [
            "AWS form: Lambda invocations per step (hello-world)".into(),
            format!("{:.1}", a.invocations() / STEPS as f64),
            "invocations".into(),
            format!(
                "{:.1} per deployment: {}",
                a.invocations(),
                a
                    .invocations
                    .iter()
                    .map(|(function, n)| format!(
                        "{function} {:.1}",
                        *n as f64 / a.deployments as f64
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ],
        [
            "AWS form: DynamoDB write units per step".into(),
            format!("{:.1}", a.write_units() / STEPS as f64),
            "WRU".into(),
            format!("{:.1} per deployment", a.write_units()),
        ],
        [
            "AWS form: DynamoDB read units per step".into(),
            format!("{:.1}", a.read_units() / STEPS as f64),
            "RRU".into(),
            format!(
                "{:.1} per deployment (strongly consistent)",
                a.read_units()
            ),
        ],
        [
            "AWS form: SQS requests per step".into(),
            format!("{:.1}", a.sqs_requests() / STEPS as f64),
            "requests".into(),
            format!(
                "{:.1} per deployment, the trigger's receive and delete included",
                a.sqs_requests()
            ),
        ],
        [
            "AWS form: KMS and S3 requests per deployment".into(),
            format!(
                "{:.1}",
                a.kms_requests() + a.s3_requests().0 + a.s3_requests().1
            ),
            "requests".into(),
            format!(
                "KMS {:.1}, S3 writes {:.1}, S3 reads {:.1}",
                a.kms_requests(),
                a.s3_requests().0,
                a.s3_requests().1
            ),
        ],
        [
            "AWS form: 1,000 hello-world deployments cost".into(),
            format!("{:.3}", a.per_thousand()),
            "$".into(),
            format!(
                "orchestration only; the steps on Fargate add ${:.2}; Step Functions Standard's transitions alone: ${:.2}",
                a.steps_per_thousand(),
                a.step_functions_per_thousand()
            ),
        ],
        [
            "AWS form: one hello-world deployment, locally".into(),
            format!("{:.1}", a.wall.as_secs_f64()),
            "s".into(),
            "emulator, cargo lambda watch and the poller on this machine".into(),
        ],
    ]
}

/// Seconds, two decimals each, in the order run.
fn each_secs(values: &[std::time::Duration]) -> String {
    values
        .iter()
        .map(|value| format!("{:.2}", value.as_secs_f64()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The cluster's rows: each variant's wall time, the gain, and the overlap behind it.
fn cluster_rows(c: &Cluster) -> Vec<[String; 4]> {
    vec![
        [
            "haproxy cluster, run-time waits (median)".into(),
            format!("{:.2}", c.waits_secs()),
            "s".into(),
            format!("each run: {} s", each_secs(&c.waits)),
        ],
        [
            "haproxy cluster, strict sequence (median)".into(),
            format!("{:.2}", c.sequence_secs()),
            "s".into(),
            format!("each run: {} s", each_secs(&c.sequence)),
        ],
        [
            "haproxy cluster, gain of run-time waits".into(),
            format!("{:.2}", c.gain_secs()),
            "s".into(),
            format!("{:.0}% of the strict sequence", c.gain_percent()),
        ],
        [
            "haproxy cluster, db and app-install side by side".into(),
            format!("{:.2}", c.overlap_secs()),
            "s".into(),
            format!("each run-time-waits run: {} s", each_secs(&c.overlap)),
        ],
    ]
}

/// The cluster's figures alone, as `overture-bench cluster` prints them.
pub fn cluster_table(c: &Cluster) -> String {
    aligned(
        ["figure", "value", "unit", "limit / note"],
        &cluster_rows(c),
        &[1],
    )
}

/// The cluster's figures as JSON, with stable keys.
pub fn cluster_json(c: &Cluster) -> serde_json::Value {
    let secs = |values: &[std::time::Duration]| -> Vec<f64> {
        values
            .iter()
            .map(|value| two_decimals(value.as_secs_f64()))
            .collect()
    };
    serde_json::json!({
        "runs": c.waits.len(),
        "waits_seconds": two_decimals(c.waits_secs()),
        "sequence_seconds": two_decimals(c.sequence_secs()),
        "gain_seconds": two_decimals(c.gain_secs()),
        "gain_percent": two_decimals(c.gain_percent()),
        "overlap_seconds": two_decimals(c.overlap_secs()),
        "waits_seconds_each": secs(&c.waits),
        "sequence_seconds_each": secs(&c.sequence),
        "overlap_seconds_each": secs(&c.overlap),
    })
}

/// Rows under a header, each column as wide as its widest cell, two spaces apart; the columns
/// listed in `right` aligned to the right (numbers), the last one left ragged.
pub fn aligned<const N: usize>(header: [&str; N], rows: &[[String; N]], right: &[usize]) -> String {
    let header = header.map(String::from);
    let widths: Vec<usize> = (0..N)
        .map(|c| {
            rows.iter()
                .chain([&header])
                .map(|row| row[c].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut text = String::new();
    for row in [&header].into_iter().chain(rows) {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(c, (cell, &width))| match c {
                c if c + 1 == N => cell.clone(),
                c if right.contains(&c) => format!("{cell:>width$}"),
                _ => format!("{cell:<width$}"),
            })
            .collect();
        let _ = writeln!(text, "{}", cells.join("  "));
    }
    text
}

/// The raw SQLite figure beside an engine figure, and how much of it the engine reaches.
fn limit(raw: f64, unit: &str, engine: f64) -> String {
    format!(
        "raw SQLite: {} {unit} (log reaches {})",
        per_sec(raw),
        share(engine, raw)
    )
}

/// The figures as one JSON object with stable keys.
///
/// `log_appends_per_sec_N` and `raw_sqlite_inserts_per_sec_N` both count commits (an append, a
/// transaction) of N events or rows each, so they compare one to one; `log_events_per_sec_10`
/// and `raw_sqlite_rows_per_sec_10` count the events and rows themselves.
pub fn json(f: &Figures) -> serde_json::Value {
    let mut json = serde_json::json!({
        "nproc": f.nproc,
        "log_appends_per_sec_1": per_sec(f.log_1.commits_per_sec()),
        "log_appends_per_sec_10": per_sec(f.log_10.commits_per_sec()),
        "log_events_per_sec_10": per_sec(f.log_10.events_per_sec()),
        "raw_sqlite_inserts_per_sec_1": per_sec(f.raw_1.commits_per_sec()),
        "raw_sqlite_inserts_per_sec_10": per_sec(f.raw_10.commits_per_sec()),
        "raw_sqlite_rows_per_sec_10": per_sec(f.raw_10.events_per_sec()),
        "bulk_write_events_per_sec": per_sec(f.replay.written_per_sec()),
        "replay_events": f.replay.events,
        "replay_deployments": f.replay.deployments,
        "replay_seconds": two_decimals(f.replay.rebuilt_in.as_secs_f64()),
        "replay_events_per_sec": per_sec(f.replay.replayed_per_sec()),
        "replay_goal_events_per_sec": per_sec(REPLAY_GOAL),
        "noop_steps": f.noop.steps,
        "noop_seconds": two_decimals(f.noop.elapsed.as_secs_f64()),
        "noop_ms_per_step": two_decimals(f.noop.ms_per_step()),
        "script_steps": f.script.steps,
        "script_seconds": two_decimals(f.script.elapsed.as_secs_f64()),
        "script_ms_per_step": two_decimals(f.script.ms_per_step()),
        "sandbox_starts": f.start_up.runs,
        "sandbox_start_ms": two_decimals(f.start_up.sandboxed_ms()),
        "networked_sandbox_start_ms": two_decimals(f.start_up.networked_ms()),
        "plain_start_ms": two_decimals(f.start_up.plain_ms()),
        "dynamodb_appends_per_sec_1": per_sec(f.dynamodb.appends_1.commits_per_sec()),
        "dynamodb_appends_per_sec_10": per_sec(f.dynamodb.appends_10.commits_per_sec()),
        "dynamodb_requests_per_append": two_decimals(f.dynamodb.requests_per_append),
        "dynamodb_replay_events_per_sec": per_sec(f.dynamodb.replayed_per_sec),
        "dynamodb_requests_per_stream": two_decimals(f.dynamodb.requests_per_stream),
        "aws_deployments_counted": f.aws.deployments,
        "aws_invocations_per_deployment": two_decimals(f.aws.invocations()),
        "aws_invocations_by_function": f.aws.invocations,
        "aws_dynamodb_write_units_per_deployment": two_decimals(f.aws.write_units()),
        "aws_dynamodb_read_units_per_deployment": two_decimals(f.aws.read_units()),
        "aws_sqs_requests_per_deployment": two_decimals(f.aws.sqs_requests()),
        "aws_kms_requests_per_deployment": two_decimals(f.aws.kms_requests()),
        "aws_s3_writes_per_deployment": two_decimals(f.aws.s3_requests().0),
        "aws_s3_reads_per_deployment": two_decimals(f.aws.s3_requests().1),
        "aws_cost_per_1000_deployments": (f.aws.per_thousand() * 1000.0).round() / 1000.0,
        "aws_fargate_steps_per_1000_deployments": two_decimals(f.aws.steps_per_thousand()),
        "step_functions_transitions_per_1000_deployments": two_decimals(f.aws.step_functions_per_thousand()),
        "aws_seconds_per_deployment_locally": two_decimals(f.aws.wall.as_secs_f64()),
    });
    json["cluster"] = cluster_json(&f.cluster);
    json
}
