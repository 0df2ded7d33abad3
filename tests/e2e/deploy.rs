//! Deployments that succeed, that fail, and that fail while siblings run.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::http::Gate;
use crate::support::{
    assert_causal, assert_step, gone_within, marker, processes_with, step_events, text, types,
    Deploying, Overture,
};

/// How long the test waits for what the engine does on its own time before failing: only a
/// broken engine takes this long, a loaded machine a few seconds.
const WITHIN: Duration = Duration::from_secs(120);

const DIAMOND: &str = r#"
name: diamond
params:
  base: { default: "7" }
steps:
  source:
    run: script
    with: { command: 'echo "n={{ params.base }}" >> "$OVERTURE_OUTPUTS"' }
  double:
    run: script
    needs: [source]
    with: { command: 'echo "n=$(( {{ steps.source.outputs.n }} * 2 ))" >> "$OVERTURE_OUTPUTS"' }
  square:
    run: script
    needs: [source]
    with: { command: 'echo "n=$(( {{ steps.source.outputs.n }} * {{ steps.source.outputs.n }} ))" >> "$OVERTURE_OUTPUTS"' }
  total:
    run: script
    needs: [double, square]
    with: { command: 'echo "sum=$(( {{ steps.double.outputs.n }} + {{ steps.square.outputs.n }} ))" >> "$OVERTURE_OUTPUTS"' }
"#;

fn diamond_needs() -> BTreeMap<&'static str, Vec<&'static str>> {
    [
        ("double", vec!["source"]),
        ("square", vec!["source"]),
        ("total", vec!["double", "square"]),
    ]
    .into()
}

#[test]
fn a_diamond_passes_outputs_along_and_succeeds() {
    let (overture, file) = Overture::with_blueprint("diamond.yaml", DIAMOND);
    let (code, status, output) = overture.deploy(&file, &["--param", "base=5"]);
    assert_eq!(code, 0, "{}", text(&output.stderr));

    assert_eq!(status["status"], "succeeded");
    assert_eq!(status["blueprint"], "diamond");
    assert_eq!(status["tenant"], "default");
    assert_eq!(
        status["steps"]["total"]["outputs"]["sum"], "35",
        "10 + 25 from base 5"
    );
    for step in ["source", "double", "square", "total"] {
        assert_step(&status, step, "succeeded", 1);
    }
    assert!(status["started_at"].is_string() && status["finished_at"].is_string());

    let id = status["id"].as_str().expect("id");
    let stderr = text(&output.stderr);
    let announced = stderr
        .find(&format!("deployment {id}"))
        .expect("the id is printed");
    let first_start = stderr
        .find("started (attempt 1)")
        .expect("progress shows starts");
    assert!(
        announced < first_start,
        "the id is printed before any step starts:\n{stderr}"
    );

    let events = overture.events(id);
    assert_causal(&events, &diamond_needs());
    assert_eq!(events[0]["type"], "DeploymentRequested");
    assert_eq!(events[0]["data"]["params"]["base"], "5");

    // The status, list and tenant summary agree, and the read models match the log.
    assert_eq!(overture.json(&["status", id, "--json"]), status);
    let list = overture.json(&["list", "--json"]);
    assert_eq!(list[0]["id"], id);
    assert!(list[0].get("steps").is_none(), "list leaves steps out");
    let tenants = overture.json(&["tenants", "--json"]);
    assert_eq!(tenants[0]["tenant"], "default");
    assert_eq!(
        (
            tenants[0]["succeeded"].as_u64(),
            tenants[0]["total"].as_u64()
        ),
        (Some(1), Some(1))
    );
    let check = overture.run(&["replay", "--check"]);
    assert!(check.status.success(), "{}", text(&check.stderr));
}

#[test]
fn a_failing_step_fails_the_deployment_while_its_grace_period_lets_a_sibling_finish() {
    let slow = marker("slow-sibling");
    // `quick` runs until its gate opens, `breaks` starts only once its own has: the test opens
    // the second once `quick` and `slow` run, and the first once the grace period has begun.
    // So `quick` is running when `breaks` fails and ends within the grace period however slow
    // the machine; only the grace's deadline, which `slow` outlives, is waited for in full.
    let (quick_gate, breaks_gate) = (Gate::new(), Gate::new());
    let (overture, file) = Overture::with_blueprint(
        "grace.yaml",
        &format!(
            r#"
name: grace
on_failure: {{ grace: 20s }}
secrets: [token]
steps:
  may-break:
    run: http
    with: {{ url: "{}" }}
  breaks:
    run: script
    needs: [may-break]
    with: {{ command: "echo 'cannot connect' >&2; exit 3" }}
  quick:
    run: http
    with: {{ url: "{}" }}
  slow:
    run: script
    with: {{ command: "sleep 120 # {slow}" }}
  after-quick:
    run: noop
    needs: [quick]
"#,
            breaks_gate.url(),
            quick_gate.url()
        ),
    );
    let mut command = overture.command(&["deploy", file.to_str().expect("utf-8 path")]);
    command
        .arg("--secret")
        .arg("token=OVERTURE_E2E_SECRET")
        .env("OVERTURE_E2E_SECRET", "grace-token-value");
    let mut deploying = Deploying::spawn(command, &["quick", "started"]);
    let id = deploying.id.clone();
    quick_gate.wait_called();
    let start = Instant::now();
    while processes_with(&slow).is_empty() {
        assert!(start.elapsed() < WITHIN, "`slow` never ran");
        std::thread::sleep(Duration::from_millis(20));
    }
    breaks_gate.open();
    let start = Instant::now();
    while !types(&overture.events(&id)).contains(&"FailureGracePeriodStarted".to_owned()) {
        assert!(start.elapsed() < WITHIN, "no grace period began");
        std::thread::sleep(Duration::from_millis(20));
    }
    quick_gate.open();
    let code = deploying.wait_within(WITHIN);
    assert_eq!(
        code,
        1,
        "a failed deployment exits 1: {:?}",
        deploying.later_lines()
    );
    let status = overture.json(&["status", &id, "--json"]);
    assert_eq!(status["status"], "failed");
    assert_eq!(status["steps"]["breaks"]["status"], "failed");
    assert_eq!(
        status["steps"]["quick"]["status"], "succeeded",
        "it ended within the grace period"
    );
    assert_eq!(
        status["steps"]["slow"]["status"], "abandoned",
        "it was still running at the deadline"
    );
    assert_eq!(
        status["steps"]["after-quick"]["status"], "pending",
        "nothing new starts once failing"
    );

    let events = overture.events(&id);
    assert_causal(
        &events,
        &[
            ("after-quick", vec!["quick"]),
            ("breaks", vec!["may-break"]),
        ]
        .into(),
    );
    let failed = events
        .iter()
        .find(|e| e["type"] == "StepAttemptFailed")
        .expect("a failed attempt");
    assert_eq!(failed["data"]["step"], "breaks");
    assert_eq!(failed["data"]["error_class"], "step-failed");
    assert_eq!(failed["data"]["exit_code"], 3);
    assert!(
        failed["data"]["message"]
            .as_str()
            .expect("message")
            .contains("cannot connect"),
        "the message carries the output's tail"
    );
    assert_eq!(
        step_events(&events, "breaks").len(),
        4,
        "step-failed is not retried by default: {:?}",
        step_events(&events, "breaks")
    );

    let all = types(&events);
    let grace = all
        .iter()
        .position(|t| t == "FailureGracePeriodStarted")
        .expect("grace period");
    let quick_done = events
        .iter()
        .position(|e| e["type"] == "StepSucceeded" && e["data"]["step"] == "quick")
        .expect("quick");
    let abandoned = events
        .iter()
        .position(|e| e["type"] == "StepAbandoned" && e["data"]["step"] == "slow")
        .expect("slow abandoned");
    let purged = all
        .iter()
        .position(|t| t == "SecretsPurged")
        .expect("the cleanup ran");
    assert!(grace < quick_done && quick_done < abandoned && abandoned < purged);
    assert_eq!(*all.last().expect("events"), "DeploymentFailed");
    let seals: Vec<_> = std::fs::read_dir(overture.data_dir().join("seals"))
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(seals.is_empty(), "the sealed secrets are gone: {seals:?}");

    let left = gone_within(&slow, Duration::from_secs(60));
    assert!(
        left.is_empty(),
        "the abandoned step's processes are gone: {left:?}"
    );
    let sandboxes = overture.data_dir().join("sandboxes");
    let left: Vec<_> = std::fs::read_dir(&sandboxes)
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "no workspace is left behind: {left:?}");
}

#[test]
fn a_step_retried_by_its_own_policy_succeeds_on_a_later_attempt() {
    let (overture, file) = Overture::with_blueprint(
        "flaky.yaml",
        r#"
name: flaky
steps:
  flaky:
    run: script
    retry: { step-failed: { times: 2, wait: 200ms } }
    with: { command: 'echo "$OVERTURE_ATTEMPT" | grep -qx 3' }
"#,
    );
    let (code, status, output) = overture.deploy(&file, &[]);
    assert_eq!(code, 0, "{}", text(&output.stderr));
    assert_eq!(status["steps"]["flaky"]["attempts"], 3);
    let events = overture.events(status["id"].as_str().expect("id"));
    assert_causal(&events, &BTreeMap::new());
    let retries: Vec<_> = events
        .iter()
        .filter(|e| e["type"] == "StepRetryScheduled")
        .collect();
    assert_eq!(retries.len(), 2);
    assert!(retries.iter().all(|r| r["data"]["delay_ms"] == 200));
    assert!(
        text(&output.stderr).contains("retrying: attempt 2 in 200ms"),
        "progress shows retries"
    );
}

#[test]
fn a_tampered_read_model_is_caught_by_replay_check_and_mended_by_replay() {
    let (overture, file) =
        Overture::with_blueprint("one.yaml", "name: one\nsteps:\n  only: { run: noop }\n");
    let (code, status, _) = overture.deploy(&file, &[]);
    assert_eq!(code, 0);
    let db = overture.data_dir().join("overture.db");
    let tamper = std::process::Command::new("sqlite3")
        .arg(&db)
        .arg("UPDATE deployment_views SET view = json_set(view, '$.status', 'failed')")
        .status()
        .expect("sqlite3");
    assert!(tamper.success());

    let check = overture.run(&["replay", "--check"]);
    assert_eq!(check.status.code(), Some(1), "a difference exits 1");
    assert!(
        text(&check.stderr).contains(status["id"].as_str().expect("id")),
        "it names the deployment"
    );

    assert!(overture.run(&["replay"]).status.success());
    assert!(overture.run(&["replay", "--check"]).status.success());
    assert_eq!(
        overture.json(&["status", status["id"].as_str().expect("id"), "--json"])["status"],
        "succeeded"
    );
}

#[test]
fn graph_draws_a_blueprint_and_a_deployment_with_its_states() {
    let (overture, file) = Overture::with_blueprint("diamond.yaml", DIAMOND);
    let drawn = overture.run(&["graph", file.to_str().expect("path")]);
    assert!(drawn.status.success());
    assert!(text(&drawn.stdout).contains("source --> double"));
    let (_, status, _) = overture.deploy(&file, &[]);
    let dot = overture.run(&[
        "graph",
        status["id"].as_str().expect("id"),
        "--format",
        "dot",
    ]);
    assert!(text(&dot.stdout).contains("\"double\" -> \"total\""));
    assert!(text(&dot.stdout).contains("total (succeeded)"));
}
