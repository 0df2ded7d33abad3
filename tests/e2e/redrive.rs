//! `overture redrive` carries a failed deployment on in its own stream, reusing what succeeded;
//! `overture redeploy` runs a recorded request again as a new deployment.

use std::time::Duration;

use crate::support::{files_containing, id_of, marker, step_events, text, Overture};

/// `stamp` makes a value no second run of it would make again; `check` fails unless the key
/// it is given opens (starts with `open-`), and passes `stamp` on.
const GATED: &str = r#"
name: gated
params:
  greeting: { default: "hello" }
secrets: [key]
steps:
  stamp:
    run: script
    with: { command: 'echo "stamp={{ params.greeting }}-$(date +%s%N)" >> "$OVERTURE_OUTPUTS"' }
  check:
    run: script
    needs: [stamp]
    with:
      command: |
        case "{{ secrets.key }}" in
          open-*) echo "key accepted: {{ secrets.key }}" ;;
          *) echo "key refused: {{ secrets.key }}" >&2; exit 1 ;;
        esac
        echo "seen={{ steps.stamp.outputs.stamp }}" >> "$OVERTURE_OUTPUTS"
"#;

const WRONG_KEY: &str = "shut-4b1d-first-key";
const RIGHT_KEY: &str = "open-9e2c-second-key-never-shown";

/// Runs `overture ARGS --json --secret key=VAR` with the key in that variable.
fn with_key(overture: &Overture, args: &[&str], key: &str) -> (i32, serde_json::Value, String) {
    let output = overture
        .command(args)
        .arg("--json")
        .arg("--secret")
        .arg("key=OVERTURE_E2E_KEY")
        .env("OVERTURE_E2E_KEY", key)
        .output()
        .expect("run overture");
    let status = serde_json::from_slice(&output.stdout).unwrap_or(serde_json::Value::Null);
    let shown = format!("{}{}", text(&output.stdout), text(&output.stderr));
    (output.status.code().unwrap_or(-1), status, shown)
}

fn failed_gated(overture: &Overture) -> (String, serde_json::Value) {
    let file = overture.blueprint("gated.yaml", GATED);
    let path = file.to_str().expect("utf-8 path");
    let (code, status, shown) = with_key(overture, &["deploy", path], WRONG_KEY);
    assert_eq!(code, 1, "check refuses the first key: {shown}");
    assert_eq!(status["steps"]["stamp"]["status"], "succeeded");
    assert_eq!(status["steps"]["check"]["status"], "failed");
    (id_of(&status), status)
}

#[test]
fn a_redrive_carries_a_failed_deployment_on_without_running_what_succeeded() {
    let overture = Overture::new();
    let (id, failed) = failed_gated(&overture);
    let stamp = failed["steps"]["stamp"]["outputs"]["stamp"]
        .as_str()
        .expect("stamp's output")
        .to_owned();
    let before = overture.events(&id).len();

    let missing = overture.run(&["redrive", &id]);
    assert_eq!(
        missing.status.code(),
        Some(2),
        "the secret must be given again"
    );
    assert!(
        text(&missing.stderr).contains("--secret key=ENV_VAR"),
        "{}",
        text(&missing.stderr)
    );
    assert_eq!(
        overture.events(&id).len(),
        before,
        "a refusal records nothing"
    );

    let (code, status, shown) = with_key(&overture, &["redrive", &id], RIGHT_KEY);
    assert_eq!(code, 0, "{shown}");
    assert_eq!(status["id"], id.as_str(), "the same deployment");
    assert_eq!(status["status"], "succeeded");
    assert_eq!(status["steps"]["stamp"]["attempts"], 1, "stamp ran once");
    assert_eq!(status["steps"]["stamp"]["outputs"]["stamp"], stamp.as_str());
    assert_eq!(status["steps"]["check"]["status"], "succeeded");
    assert_eq!(status["steps"]["check"]["attempts"], 2, "numbered on");
    assert_eq!(
        status["steps"]["check"]["outputs"]["seen"],
        stamp.as_str(),
        "check was given stamp's output from the first run"
    );

    let events = overture.events(&id);
    assert!(events.len() > before, "recorded in the same stream");
    let types: Vec<&str> = events[before..]
        .iter()
        .map(|e| e["type"].as_str().expect("type"))
        .collect();
    assert_eq!(types.first(), Some(&"DeploymentRedriven"), "{types:?}");
    assert_eq!(
        events[before]["data"]["steps"],
        serde_json::json!(["check"])
    );
    assert!(types.contains(&"CredentialsSealed"), "{types:?}");
    assert_eq!(
        types[types.len() - 2..],
        ["SecretsPurged", "DeploymentSucceeded"],
        "the redriven run ends as every run does"
    );
    let stamp_started = step_events(&events, "stamp")
        .into_iter()
        .filter(|(kind, _)| kind == "StepStarted")
        .count();
    assert_eq!(stamp_started, 1, "no new StepStarted for stamp");
    assert!(
        !overture.seal(&id).exists(),
        "the secrets sealed again are purged again"
    );

    // The key given again reached the step, and is shown nowhere.
    let log = overture.run(&["logs", &id, "check"]);
    assert!(
        text(&log.stdout).contains("key accepted: ***"),
        "{}",
        text(&log.stdout)
    );
    let mut printed = vec![shown];
    for args in [
        vec!["events", &id],
        vec!["events", &id, "--json"],
        vec!["status", &id],
    ] {
        let out = overture.run(&args);
        printed.push(format!("{}{}", text(&out.stdout), text(&out.stderr)));
    }
    for output in &printed {
        assert!(!output.contains(RIGHT_KEY), "shows the key:\n{output}");
    }
    let leaks = files_containing(&overture.data_dir(), RIGHT_KEY.as_bytes());
    assert!(leaks.is_empty(), "files holding the key: {leaks:?}");

    let again = overture.run(&["redrive", &id]);
    assert_eq!(again.status.code(), Some(2));
    let said = text(&again.stderr);
    assert!(
        said.contains("succeeded") && said.contains(&format!("overture redeploy {id}")),
        "{said}"
    );
    assert_eq!(
        overture.events(&id).len(),
        events.len(),
        "a refused redrive records nothing"
    );
}

#[test]
fn a_redrive_of_an_unknown_deployment_is_refused() {
    let (overture, file) = Overture::with_blueprint("gated.yaml", GATED);
    let _ = with_key(
        &overture,
        &["deploy", file.to_str().expect("path")],
        RIGHT_KEY,
    );
    let unknown = "0193a5b2-0000-7000-8000-000000000000";
    for command in ["redrive", "redeploy"] {
        let output = overture.run(&[command, unknown]);
        assert_eq!(output.status.code(), Some(2), "{command}");
        assert!(
            text(&output.stderr).contains("no deployment"),
            "{command}: {}",
            text(&output.stderr)
        );
    }
    // On the aws backend too, once it is told where the stack is (here it is not).
    let aws = overture.run(&["--backend", "aws", "redrive", unknown]);
    assert_eq!(aws.status.code(), Some(2));
    assert!(
        text(&aws.stderr).contains("--backend aws: the environment variable"),
        "{}",
        text(&aws.stderr)
    );
}

#[test]
fn a_redeploy_runs_the_recorded_request_again_as_a_new_deployment() {
    let (overture, file) = Overture::with_blueprint("gated.yaml", GATED);
    let path = file.to_str().expect("utf-8 path");
    let (code, first, shown) = with_key(
        &overture,
        &["deploy", path, "--param", "greeting=bonjour"],
        RIGHT_KEY,
    );
    assert_eq!(code, 0, "{shown}");
    let from = first["id"].as_str().expect("id").to_owned();
    // The blueprint's file changes afterwards: the redeploy runs the snapshot recorded.
    std::fs::write(&file, "name: changed\nsteps:\n  x: { run: noop }\n").expect("rewrite");

    let (code, status, shown) = with_key(&overture, &["redeploy", &from], RIGHT_KEY);
    assert_eq!(code, 0, "{shown}");
    let id = status["id"].as_str().expect("id");
    assert_ne!(id, from, "a new deployment");
    assert_eq!(status["status"], "succeeded");
    assert_eq!(status["blueprint"], "gated");
    assert_eq!(status["tenant"], first["tenant"]);
    let stamp = status["steps"]["stamp"]["outputs"]["stamp"]
        .as_str()
        .expect("stamp");
    assert!(
        stamp.starts_with("bonjour-"),
        "the recorded params: {stamp}"
    );
    assert_ne!(
        stamp, first["steps"]["stamp"]["outputs"]["stamp"],
        "it ran again"
    );

    let requested = |id: &str| overture.events(id).remove(0);
    let (old, new) = (requested(&from), requested(id));
    assert_eq!(new["type"], "DeploymentRequested");
    assert_eq!(new["data"]["trigger"], "redeploy");
    assert_eq!(new["data"]["source"], format!("deployment:{from}"));
    for same in ["blueprint", "blueprint_hash", "params", "tenant"] {
        assert_eq!(new["data"][same], old["data"][same], "{same}");
    }
    let leaks = files_containing(&overture.data_dir(), RIGHT_KEY.as_bytes());
    assert!(leaks.is_empty(), "files holding the key: {leaks:?}");
}

#[test]
fn a_running_or_cancelled_deployment_is_not_redriven() {
    let (overture, file) = Overture::with_blueprint(
        "slow.yaml",
        &format!(
            "name: slow\nsteps:\n  wait:\n    run: script\n    with: {{ command: 'sleep 120 # {}' }}\n",
            marker("redrive")
        ),
    );
    let mut deploying = overture.deploy_until(&file, &["wait", "started"]);
    let id = deploying.id.clone();

    let running = overture.run(&["redrive", &id]);
    assert_eq!(running.status.code(), Some(2));
    assert!(
        text(&running.stderr).contains("still running"),
        "{}",
        text(&running.stderr)
    );

    let cancel = overture.run(&["cancel", &id]);
    assert!(cancel.status.success(), "{}", text(&cancel.stderr));
    assert_eq!(deploying.wait_within(Duration::from_secs(120)), 1);
    let events = overture.events(&id).len();

    let cancelled = overture.run(&["redrive", &id]);
    assert_eq!(cancelled.status.code(), Some(2));
    let said = text(&cancelled.stderr);
    assert!(
        said.contains("cancelled") && said.contains(&format!("overture redeploy {id}")),
        "{said}"
    );
    assert_eq!(overture.events(&id).len(), events, "nothing recorded");
}
