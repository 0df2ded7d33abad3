//! Cancelling a running deployment: with `overture cancel` from another process, with Ctrl-C or
//! SIGTERM on `overture deploy`, and after its engine died. Each ends as `cancelled`, with its
//! sandboxes' processes gone and its secrets purged; the bastion cases are in [`crate::cloud`].

use std::process::Output;
use std::time::Duration;

use serde_json::Value;

use crate::support::{
    files_containing, gone_within, id_of, marker, step_events, text, types, Deploying, Overture,
};

/// How long the test waits for a step to start or a cancel to be carried out before failing: a
/// runner notices its attempt abandoned within a heartbeat (1 s) and the engine reads the log
/// every half second, but a loaded machine starts sandboxes and processes slowly. Only a broken
/// cancel ever waits this long.
const WITHIN: Duration = Duration::from_secs(120);
/// How long a killed sandbox's processes may take to disappear.
const GONE_WITHIN: Duration = Duration::from_secs(60);
const SECRET: &str = "cancel-me-s3cr3t-value";

/// `slow` runs (a process carrying `marker`), `flaky` waits 10 minutes for its retry, `after`
/// needs `slow`: a cancel must stop the first, drop the second and never start the third. The
/// retry's wait must outlast the test's way to its cancel however slow the machine, and costs
/// nothing: the cancel drops it.
fn blueprint(o: &Overture, marker: &str) -> std::path::PathBuf {
    o.blueprint(
        "cancel.yaml",
        &format!(
            r#"
name: cancellable
secrets: [token]
steps:
  slow:
    run: script
    with: {{ command: 'echo "{{{{ secrets.token }}}}" > /dev/null; sleep 120 # {marker}' }}
  flaky:
    run: script
    retry: {{ step-failed: {{ times: 1, wait: 10m }} }}
    with: {{ command: 'exit 1' }}
  after:
    run: script
    needs: [slow]
    with: {{ command: 'true' }}
"#
        ),
    )
}

/// Starts deploying [`blueprint`] with its secret; returns once `flaky` waits for its retry
/// and `slow` runs.
fn deploying(o: &Overture, marker: &str) -> Deploying {
    let file = blueprint(o, marker);
    let mut command = o.command(&["deploy", file.to_str().expect("utf-8 path")]);
    command
        .arg("--secret")
        .arg("token=OVERTURE_E2E_SECRET")
        .env("OVERTURE_E2E_SECRET", SECRET);
    let deploying = Deploying::spawn(command, &["flaky", "retrying"]);
    wait_for_running(o, &deploying.id, "slow");
    deploying
}

fn wait_for_running(o: &Overture, id: &str, step: &str) {
    let start = std::time::Instant::now();
    while o.json(&["status", id, "--json"])["steps"][step]["status"] != "running" {
        assert!(start.elapsed() < WITHIN, "`{step}` never started");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// What every cancelled deployment shows once it has ended.
fn assert_cancelled(o: &Overture, id: &str, marker: &str, by: Option<&str>, reason: &str) {
    let status = o.json(&["status", id, "--json"]);
    assert_eq!(status["status"], "cancelled", "{status}");
    for step in ["slow", "flaky"] {
        assert_eq!(status["steps"][step]["status"], "abandoned", "{status}");
    }
    assert_eq!(status["steps"]["after"]["status"], "pending", "{status}");

    let events = o.events(id);
    let kinds = types(&events);
    assert_eq!(
        kinds.last().map(String::as_str),
        Some("DeploymentCancelled")
    );
    let purged = kinds
        .iter()
        .position(|t| t == "SecretsPurged")
        .expect("purged");
    let asked = kinds
        .iter()
        .position(|t| t == "CancellationRequested")
        .expect("the cancel is recorded");
    assert!(asked < purged, "{kinds:?}");
    let end: &Value = events.last().expect("events");
    assert_eq!(end["data"]["reason"], reason, "{end}");
    if let Some(by) = by {
        assert_eq!(end["data"]["requested_by"], by, "{end}");
    }
    assert!(
        step_events(&events, "after").is_empty(),
        "`after` never started: {kinds:?}"
    );
    assert_eq!(
        step_events(&events, "flaky")
            .iter()
            .filter(|(t, _)| t == "StepStarted")
            .count(),
        1,
        "the retry waiting was dropped"
    );

    let left = gone_within(marker, GONE_WITHIN);
    assert!(
        left.is_empty(),
        "the running step's sandbox is killed: {left:?}"
    );
    let seal = o.data_dir().join("seals").join(format!("{id}.json"));
    assert!(!seal.exists(), "the secrets are purged");
    assert_eq!(
        files_containing(&o.data_dir(), SECRET.as_bytes()),
        Vec::<String>::new()
    );
}

#[test]
fn cancel_from_another_process_ends_a_running_deployment_as_cancelled() {
    let o = Overture::new();
    let marker = marker("cancel-remote");
    let mut deploying = deploying(&o, &marker);
    let id = deploying.id.clone();

    let cancelled = cancel_as(&o, "ada", &[&id, "--reason", "wrong version", "--json"]);
    let status: Value = serde_json::from_slice(&cancelled.stdout).expect("status JSON");
    assert_eq!(
        status["status"], "cancelled",
        "cancel waits for the end: {status}"
    );

    assert_eq!(
        deploying.wait_within(WITHIN),
        1,
        "a cancelled deploy exits 1"
    );
    assert!(
        deploying
            .later_lines()
            .iter()
            .any(|line| line.contains("cancelled")),
        "the deploy says so: {:?}",
        deploying.later_lines()
    );
    assert_cancelled(&o, &id, &marker, Some("ada"), "wrong version");
}

#[test]
fn ctrl_c_on_deploy_cancels_the_deployment_and_says_so() {
    for (signal, name) in [(libc::SIGINT, "Ctrl-C"), (libc::SIGTERM, "SIGTERM")] {
        let o = Overture::new();
        let marker = marker("cancel-signal");
        let mut deploying = deploying(&o, &marker);
        let id = deploying.id.clone();

        deploying.signal(signal);
        assert_eq!(deploying.wait_within(WITHIN), 1, "{name}: exits 1");
        let lines = deploying.later_lines();
        assert!(
            lines
                .iter()
                .any(|line| line.contains(name) && line.contains("cancelling")),
            "{name}: the deploy says what it does: {lines:?}"
        );
        assert_cancelled(
            &o,
            &id,
            &marker,
            None,
            &format!("{name} on `overture deploy`"),
        );
    }
}

#[test]
fn a_second_ctrl_c_leaves_at_once_and_resume_finishes_the_cancel() {
    let marker = marker("cancel-twice");
    let (o, file) = Overture::with_blueprint(
        "twice.yaml",
        &format!(
            r#"
name: twice
steps:
  stubborn:
    run: script
    # Ignores the polite signals; only the sandbox's kill ends it.
    with: {{ command: 'trap "" INT TERM; sleep 120 # {marker}' }}
"#
        ),
    );
    let mut deploying = Deploying::spawn(
        o.command(&["deploy", file.to_str().expect("utf-8 path")]),
        &["stubborn", "started"],
    );
    let id = deploying.id.clone();
    deploying.signal(libc::SIGINT);
    let start = std::time::Instant::now();
    while !deploying
        .later_lines()
        .iter()
        .any(|line| line.contains("cancelling"))
    {
        assert!(
            start.elapsed() < WITHIN,
            "the first Ctrl-C is never answered"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    deploying.signal(libc::SIGINT);
    let code = deploying.wait_within(WITHIN);
    let lines = deploying.later_lines();
    if lines.iter().any(|line| line.contains("again")) {
        assert_eq!(code, 130, "{lines:?}");
        assert!(
            lines.iter().any(|line| line.contains("overture resume")),
            "it says who finishes the job: {lines:?}"
        );
        // Unless the engine had ended it just before leaving, resume carries the cancel out,
        // and a deployment it carried on that did not succeed makes it exit 1.
        let resumed = o.run(&["resume"]);
        let nothing_left = text(&resumed.stderr).contains("resuming 0 unfinished");
        let expected = if nothing_left { 0 } else { 1 };
        assert_eq!(
            resumed.status.code(),
            Some(expected),
            "{}",
            text(&resumed.stderr)
        );
    } else {
        // The cancel was carried out before the second Ctrl-C arrived.
        assert_eq!(code, 1, "{lines:?}");
    }
    let status = o.json(&["status", &id, "--json"]);
    assert_eq!(status["status"], "cancelled", "{status}");
    assert!(gone_within(&marker, GONE_WITHIN).is_empty());
}

#[test]
fn cancel_with_no_engine_running_carries_the_cancel_out_itself() {
    let o = Overture::new();
    let marker = marker("cancel-dead");
    let deploying = deploying(&o, &marker);
    let id = deploying.id.clone();
    deploying.kill();

    cancel_as(&o, "grace", &[&id]);
    assert_cancelled(
        &o,
        &id,
        &marker,
        Some("grace"),
        "cancelled from the command line",
    );
    let resumed = o.run(&["resume"]);
    assert!(
        text(&resumed.stderr).contains("resuming 0 unfinished"),
        "nothing is left for resume: {}",
        text(&resumed.stderr)
    );
}

/// `overture cancel ARGS` as the local user `user`; it must succeed.
fn cancel_as(o: &Overture, user: &str, args: &[&str]) -> Output {
    let output = o
        .command(&[&["cancel"], args].concat())
        .env("USER", user)
        .output()
        .expect("cancel");
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    output
}

fn refused(output: &Output, naming: &str) {
    assert_eq!(output.status.code(), Some(2), "{}", text(&output.stderr));
    assert!(
        text(&output.stderr).contains(naming),
        "the message names it: {}",
        text(&output.stderr)
    );
}

#[test]
fn cancelling_an_ended_or_unknown_deployment_is_refused_with_exit_code_2() {
    let (o, file) = Overture::with_blueprint(
        "done.yaml",
        "name: done\nsteps:\n  a: { run: script, with: { command: 'true' } }\n",
    );
    let status = o.deploy_ok(&file, &[]);
    let id = id_of(&status);
    let before = o.events(&id);

    let ended = o.run(&["cancel", &id]);
    refused(&ended, &id);
    assert!(text(&ended.stderr).contains("already ended (succeeded)"));
    assert_eq!(o.events(&id), before, "nothing recorded");

    let unknown = "0193f2c1-0000-7000-8000-000000000000";
    refused(&o.run(&["cancel", unknown]), unknown);
    refused(&o.run(&["cancel", "not-an-id"]), "not-an-id");
}
