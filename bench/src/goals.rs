//! The speed goals as one table: each figure beside its goal, its limit, and whether it is met;
//! and the same as JSON.

use crate::replay::Replay;
use crate::speed::{
    Concurrent, Sequential, Sized, CONCURRENT_AT_ONCE, CONCURRENT_DEPLOYMENTS, CONCURRENT_GOAL,
    CONCURRENT_STEPS, FLAT_CAP, FLAT_RUNS, FLAT_SPREAD, SEQUENTIAL_GOAL_MS, SEQUENTIAL_RUNS,
    SEQUENTIAL_STEPS,
};

/// Goal: events per second rebuilding every read model, at least.
pub const REPLAY_GOAL: f64 = 1_000_000.0;

/// Everything the goals are judged on, from one run.
#[derive(Clone, Debug)]
pub struct Speed {
    /// The chain of 200 steps.
    pub sequential: Sequential,
    /// The flat-cost series.
    pub flat: Vec<Sized>,
    /// 200 deployments, 16 at once.
    pub concurrent: Concurrent,
    /// The rebuild of every read model from a million events.
    pub replay: Replay,
}

/// One line of the table.
struct Line {
    goal: String,
    figure: String,
    target: String,
    limit: String,
    met: bool,
}

fn verdict(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "MISSED"
    }
}

/// The largest per-step cost of `shape` over its smallest, if every size finished.
fn spread(flat: &[Sized], shape: &str) -> Option<f64> {
    let costs: Option<Vec<f64>> = flat
        .iter()
        .filter(|s| s.shape == shape)
        .map(|s| s.ms_per_step)
        .collect();
    let costs = costs?;
    let max = costs.iter().copied().fold(f64::MIN, f64::max);
    let min = costs.iter().copied().fold(f64::MAX, f64::min);
    Some(max / min)
}

fn flat_figures(flat: &[Sized], shape: &str) -> String {
    flat.iter()
        .filter(|s| s.shape == shape)
        .map(|s| match s.ms_per_step {
            Some(ms) => format!("{}: {ms:.2}", s.steps),
            None => format!("{}: did not finish in {} s", s.steps, FLAT_CAP.as_secs()),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn lines(s: &Speed) -> Vec<Line> {
    let sequential = s.sequential.median_ms_per_step();
    let mut lines = vec![Line {
        goal: format!("sequential: chain of {SEQUENTIAL_STEPS} noop steps, whole process, median of {SEQUENTIAL_RUNS}"),
        figure: format!("{sequential:.2} ms/step"),
        target: format!("<= {SEQUENTIAL_GOAL_MS:.1} ms/step"),
        limit: format!(
            "one durable commit (fsync, WAL, synchronous=FULL): {:.2} ms",
            s.sequential.durable_commit_ms
        ),
        met: sequential <= SEQUENTIAL_GOAL_MS,
    }];
    let runs: Vec<String> = FLAT_RUNS.iter().map(usize::to_string).collect();
    let runs = runs.join("/");
    for shape in ["chain", "wide"] {
        let spread = spread(&s.flat, shape);
        lines.push(Line {
            goal: format!(
                "flat cost: {shape}, ms/step by steps (first event to last, median of {runs} runs)"
            ),
            figure: flat_figures(&s.flat, shape),
            target: format!("spread <= {FLAT_SPREAD}x, all finish"),
            limit: match spread {
                Some(spread) => format!("spread {spread:.2}x"),
                None => "not every size finished".into(),
            },
            met: spread.is_some_and(|spread| spread <= FLAT_SPREAD),
        });
    }
    let together = format!(
        "{CONCURRENT_DEPLOYMENTS} deployments of {CONCURRENT_STEPS} noop steps, {CONCURRENT_AT_ONCE} at once"
    );
    for (how, figure) in [
        ("in one engine", s.concurrent.one_engine),
        (
            "as processes on one data directory, served by `overture engine`",
            s.concurrent.served,
        ),
        (
            "as processes on one data directory, each its own engine",
            s.concurrent.processes,
        ),
    ] {
        lines.push(Line {
            goal: format!("concurrent: {together}, {how}"),
            figure: format!("{figure:.0} steps/s"),
            target: format!(">= {CONCURRENT_GOAL:.0} steps/s"),
            limit: format!(
                "{:.0} durable commits/s, shared by every deployment",
                1_000.0 / s.sequential.durable_commit_ms
            ),
            met: figure >= CONCURRENT_GOAL,
        });
    }
    let replayed = s.replay.replayed_per_sec();
    lines.push(Line {
        goal: format!("replay: every read model from {} events", s.replay.events),
        figure: format!("{replayed:.0} events/s"),
        target: format!(">= {REPLAY_GOAL:.0} events/s"),
        limit: format!(
            "writing the log in bulk: {:.0} events/s",
            s.replay.written_per_sec()
        ),
        met: replayed >= REPLAY_GOAL,
    });
    lines
}

/// The goals as an aligned table.
pub fn table(s: &Speed) -> String {
    let rows: Vec<[String; 5]> = lines(s)
        .into_iter()
        .map(|l| [l.goal, l.figure, l.target, l.limit, verdict(l.met).into()])
        .collect();
    crate::report::aligned(["goal", "figure", "target", "limit", "verdict"], &rows, &[])
}

fn two_decimals(value: f64) -> f64 {
    (value * 100.0).round() / 100.0
}

/// The goals as JSON, with stable keys.
pub fn json(s: &Speed) -> serde_json::Value {
    let flat: Vec<serde_json::Value> = s
        .flat
        .iter()
        .map(|sized| {
            serde_json::json!({
                "shape": sized.shape,
                "steps": sized.steps,
                "ms_per_step": sized.ms_per_step.map(two_decimals),
                "finished": sized.ms_per_step.is_some(),
                "wall_seconds": two_decimals(sized.wall.as_secs_f64()),
            })
        })
        .collect();
    let met: Vec<bool> = lines(s).iter().map(|l| l.met).collect();
    serde_json::json!({
        "sequential_ms_per_step": two_decimals(s.sequential.median_ms_per_step()),
        "sequential_runs_ms_per_step": s.sequential.runs_ms_per_step.iter().copied().map(two_decimals).collect::<Vec<_>>(),
        "sequential_goal_ms_per_step": SEQUENTIAL_GOAL_MS,
        "durable_commit_ms": two_decimals(s.sequential.durable_commit_ms),
        "flat": flat,
        "flat_spread_chain": spread(&s.flat, "chain").map(two_decimals),
        "flat_spread_wide": spread(&s.flat, "wide").map(two_decimals),
        "flat_goal_spread": FLAT_SPREAD,
        "concurrent_one_engine_steps_per_sec": s.concurrent.one_engine.round(),
        "concurrent_processes_steps_per_sec": s.concurrent.processes.round(),
        "concurrent_served_processes_steps_per_sec": s.concurrent.served.round(),
        "concurrent_goal_steps_per_sec": CONCURRENT_GOAL,
        "replay_events_per_sec": s.replay.replayed_per_sec().round(),
        "replay_goal_events_per_sec": REPLAY_GOAL,
        "goals_met": met.iter().filter(|m| **m).count(),
        "goals": met.len(),
    })
}
