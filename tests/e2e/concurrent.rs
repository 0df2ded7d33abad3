//! Many `overture deploy` processes on one data directory side by side: each prints the final
//! status of its own deployment and exits by the outcome its log recorded, however far the others
//! have fed the shared read models. Nothing rewrites the read models under a running deploy.

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use serde_json::Value;

use crate::support::{marker, text, Overture, Serving};

/// How many `deploy` processes run, on one data directory.
const PROCESSES: usize = 100;
/// How many of them run at any moment: all of them, each committing through the one file.
const AT_ONCE: usize = 100;
/// Every this many deployments, one fails on purpose.
const FAILING_EVERY: usize = 10;

const SUCCEEDS: &str = r#"
name: succeeds
steps:
  first: { run: noop }
  second: { run: noop, needs: [first] }
  beside: { run: noop }
"#;

const FAILS: &str = r#"
name: fails
steps:
  first: { run: noop }
  breaks: { run: script, needs: [first], with: { command: 'exit 1' } }
  after: { run: noop, needs: [breaks] }
"#;

/// Whether deployment `n` is one of those failing on purpose: one in every [`FAILING_EVERY`],
/// spread among the others.
fn fails_on_purpose(n: usize) -> bool {
    n % FAILING_EVERY == FAILING_EVERY / 2
}

/// The outcome the deployment's log recorded: the type of its ending event.
fn recorded_outcome(events: &[Value]) -> &str {
    let ends = [
        "DeploymentSucceeded",
        "DeploymentFailed",
        "DeploymentCancelled",
    ];
    let found: Vec<&str> = events
        .iter()
        .filter_map(|event| event["type"].as_str())
        .filter(|kind| ends.contains(kind))
        .collect();
    assert_eq!(found.len(), 1, "one ending is recorded: {found:?}");
    found[0]
}

#[test]
fn a_hundred_deploys_at_once_each_print_and_exit_by_their_own_outcome() {
    a_hundred_deploys_at_once(&Overture::new());
}

/// The same, each deploy handing its deployment to the engine serving the data directory.
#[test]
fn a_hundred_deploys_handed_to_one_engine_each_print_and_exit_by_their_own_outcome() {
    let overture = Overture::new();
    let serving = Serving::start(&overture);
    a_hundred_deploys_at_once(&overture);
    let (code, said) = serving.stop();
    assert_eq!(code, 0, "{said}");
}

/// Runs [`PROCESSES`] deploys, [`AT_ONCE`] at a time, and checks each printed and exited by
/// the outcome its log recorded.
fn a_hundred_deploys_at_once(overture: &Overture) {
    let succeeds = overture.blueprint("succeeds.yaml", SUCCEEDS);
    let fails = overture.blueprint("fails.yaml", FAILS);
    // Made before they start: this test is about deploys sharing a data directory, not about
    // making one.
    let made = overture.run(&["list"]);
    assert!(made.status.success(), "{}", text(&made.stderr));

    let next = AtomicUsize::new(0);
    let outputs: Mutex<Vec<Option<Output>>> = Mutex::new(vec![None; PROCESSES]);
    std::thread::scope(|scope| {
        for _ in 0..AT_ONCE {
            scope.spawn(|| loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= PROCESSES {
                    break;
                }
                let file = if fails_on_purpose(n) {
                    &fails
                } else {
                    &succeeds
                };
                let output = overture
                    .command(&["deploy", file.to_str().expect("utf-8 path"), "--json"])
                    .output()
                    .expect("run overture deploy");
                outputs.lock().expect("the outputs")[n] = Some(output);
            });
        }
    });
    let outputs: Vec<Output> = outputs
        .into_inner()
        .expect("the outputs")
        .into_iter()
        .map(|output| output.expect("every deploy ran"))
        .collect();

    let mut ids = HashSet::new();
    for (n, output) in outputs.iter().enumerate() {
        let stderr = text(&output.stderr);
        let printed: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|error| {
            panic!(
                "deploy {n} printed no status ({error}), exit {:?}:\n{}\n{stderr}",
                output.status.code(),
                text(&output.stdout)
            )
        });
        let id = printed["id"].as_str().expect("the status has an id");
        assert!(ids.insert(id.to_owned()), "deploy {n}: {id} printed twice");

        let (outcome, status, code) = if fails_on_purpose(n) {
            ("DeploymentFailed", "failed", 1)
        } else {
            ("DeploymentSucceeded", "succeeded", 0)
        };
        assert_eq!(
            recorded_outcome(&overture.events(id)),
            outcome,
            "deploy {n}: {id}"
        );
        assert_eq!(
            output.status.code(),
            Some(code),
            "deploy {n}: {id} recorded {outcome} and printed {printed}\n{stderr}"
        );
        assert_eq!(printed["status"], status, "deploy {n}: {id}\n{stderr}");
        assert_eq!(
            overture.json(&["status", id, "--json"]),
            printed,
            "deploy {n}: {id} printed its final status"
        );
    }
    assert_eq!(ids.len(), PROCESSES);
}

/// A data directory with `slow.yaml`: one step, `waits`, that sleeps two minutes (its
/// processes marked for `test`).
fn one_slow_step(test: &str) -> (Overture, PathBuf) {
    let slow = marker(test);
    Overture::with_blueprint(
        "slow.yaml",
        &format!(
            r#"
name: slow
steps:
  waits: {{ run: script, with: {{ command: 'sleep 120 # {slow}' }} }}
"#
        ),
    )
}

#[test]
fn rebuilding_or_importing_the_read_models_is_refused_while_a_deploy_runs() {
    let (overture, file) = one_slow_step("rebuild-refused");
    let export = overture.blueprint("export.jsonl", "");
    let deploying = overture.deploy_until(&file, &["waits", "started"]);

    // Either would clear or overwrite the views the deploy reads back at its end.
    for args in [
        vec!["replay"],
        vec!["import", export.to_str().expect("utf-8 path")],
    ] {
        let refused = overture.run(&args);
        assert_eq!(refused.status.code(), Some(2), "{args:?}");
        assert!(
            text(&refused.stderr).contains("another overture process is driving deployments"),
            "{args:?}: {}",
            text(&refused.stderr)
        );
    }
    let checked = overture.run(&["replay", "--check"]);
    assert!(checked.status.success(), "{}", text(&checked.stderr));

    let cancel = overture.run(&["cancel", &deploying.id]);
    assert!(cancel.status.success(), "{}", text(&cancel.stderr));
    assert_eq!(
        deploying.wait(),
        1,
        "a cancelled deployment ends deploy with 1"
    );
    let rebuilt = overture.run(&["replay"]);
    assert!(rebuilt.status.success(), "{}", text(&rebuilt.stderr));
}

#[test]
fn a_deploy_prints_its_own_end_when_the_shared_feed_is_past_its_view() {
    let (overture, file) = one_slow_step("feed-ahead");
    let mut deploying = overture
        .command(&["deploy", file.to_str().expect("utf-8 path"), "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start overture deploy");
    let mut progress = BufReader::new(deploying.stderr.take().expect("stderr")).lines();
    let mut id = String::new();
    for line in progress.by_ref() {
        let line = line.expect("a progress line");
        if let Some(rest) = line.strip_prefix("deployment ") {
            id = rest.trim().to_owned();
        }
        if line.contains("waits") && line.contains("started") {
            break;
        }
    }
    assert!(!id.is_empty(), "the deployment's id is printed");
    let drained = std::thread::spawn(move || progress.map_while(Result::ok).collect::<Vec<_>>());

    // The feed position every process reads from now says the whole log has been folded in,
    // while this deployment's view stays where it is: what a feed that moved on without folding
    // its records would leave.
    let moved = Command::new("sqlite3")
        // The engine writes meanwhile (its job's lease): wait for its lock as it waits for ours,
        // as long as a loaded machine may hold it.
        .args(["-cmd", ".timeout 60000"])
        .arg(overture.data_dir().join("overture.db"))
        .arg("UPDATE checkpoints SET position = 1000000000000 WHERE name = 'read-models'")
        .status()
        .expect("sqlite3");
    assert!(moved.success());
    let cancel = overture.run(&["cancel", &id]);
    assert!(cancel.status.success(), "{}", text(&cancel.stderr));

    let output = deploying
        .wait_with_output()
        .expect("wait for overture deploy");
    let progress = drained.join().expect("the progress").join("\n");
    assert_eq!(output.status.code(), Some(1), "cancelled: {progress}");
    let printed: Value = serde_json::from_slice(&output.stdout).expect("a status on stdout");
    assert_eq!(printed["status"], "cancelled", "{printed}");
    assert_eq!(
        printed["steps"]["waits"]["status"], "abandoned",
        "{printed}"
    );
    assert_eq!(overture.json(&["status", &id, "--json"]), printed);
}

#[test]
fn one_deploy_of_several_blueprints_drives_them_all_and_prints_each_end_in_order() {
    let overture = Overture::new();
    let succeeds = overture.blueprint("succeeds.yaml", SUCCEEDS);
    let fails = overture.blueprint("fails.yaml", FAILS);
    let files: Vec<&str> = [&succeeds, &fails, &succeeds, &succeeds]
        .iter()
        .map(|file| file.to_str().expect("utf-8 path"))
        .collect();
    let mut args = vec!["deploy", "--at-once", "2", "--json"];
    args.extend(&files);
    let output = overture.run(&args);

    // One of them failed, so the whole command did.
    assert_eq!(output.status.code(), Some(1), "{}", text(&output.stderr));
    let printed: Vec<Value> =
        serde_json::from_slice(&output.stdout).expect("an array of status objects");
    let statuses: Vec<&str> = printed
        .iter()
        .map(|view| view["status"].as_str().expect("a status"))
        .collect();
    assert_eq!(statuses, ["succeeded", "failed", "succeeded", "succeeded"]);
    for view in &printed {
        let id = view["id"].as_str().expect("an id");
        assert_eq!(&overture.json(&["status", id, "--json"]), view);
    }
}

#[test]
fn a_bad_blueprint_among_several_records_none_of_them() {
    let overture = Overture::new();
    let succeeds = overture.blueprint("succeeds.yaml", SUCCEEDS);
    let broken = overture.blueprint(
        "broken.yaml",
        "name: broken\nsteps:\n  a: { run: nothing-such }\n",
    );
    let output = overture.run(&[
        "deploy",
        succeeds.to_str().expect("utf-8 path"),
        broken.to_str().expect("utf-8 path"),
    ]);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output.stderr));
    assert!(
        text(&output.stderr).contains("broken.yaml"),
        "the error names the file: {}",
        text(&output.stderr)
    );
    let listed = overture.json(&["list", "--json"]);
    assert_eq!(listed, serde_json::json!([]), "nothing was recorded");
}

/// Attempts of one deployment that finish together take turns recording their outcomes: none is
/// refused for a revision another changed, and left until its lease ends to run again.
#[test]
fn parallel_attempts_of_one_deployment_each_run_once_with_no_warning() {
    const STEPS: usize = 100;
    let overture = Overture::new();
    let mut blueprint = String::from("name: wide\nsteps:\n");
    for step in 0..STEPS {
        blueprint.push_str(&format!("  s{step:03}: {{ run: noop }}\n"));
    }
    let file = overture.blueprint("wide.yaml", &blueprint);
    let output = overture
        .command(&[
            "deploy",
            file.to_str().expect("utf-8 path"),
            "--json",
            "--parallelism",
            "16",
        ])
        .env("OVERTURE_LOG", "warn")
        .output()
        .expect("run overture");
    let stderr = text(&output.stderr);
    assert!(output.status.success(), "the deployment succeeds: {stderr}");
    assert!(!stderr.contains("WARN"), "nothing went wrong: {stderr}");

    let status: Value = serde_json::from_slice(&output.stdout).expect("JSON status");
    let id = status["id"].as_str().expect("an id");
    let starts = crate::support::types(&overture.events(id))
        .into_iter()
        .filter(|kind| kind == "StepStarted")
        .count();
    assert_eq!(starts, STEPS, "each step started once");
}
