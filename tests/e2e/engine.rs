//! `overture engine` serving a data directory: every `overture deploy` on it hands its
//! deployment over, prints the same progress, status and exit code as when it drives the
//! deployment itself, and the engine carries the deployment on whatever becomes of that process.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{files_containing, text, Overture, Serving};

const CHAIN: &str = r#"
name: chain
steps:
  first: { run: script, with: { command: 'echo first' } }
  second: { run: noop, needs: [first] }
  beside: { run: noop }
"#;

/// A blueprint whose first step sleeps `seconds`, with a step after it.
fn sleeping(overture: &Overture, seconds: u32) -> std::path::PathBuf {
    overture.blueprint(
        "sleeps.yaml",
        &format!(
            "name: sleeps\nsteps:\n  waits: {{ run: script, with: {{ command: 'sleep {seconds}' }} }}\n  \
             after: {{ run: noop, needs: [waits] }}\n"
        ),
    )
}

/// `status ID --json` once the deployment has ended, waiting for it at most `deadline`.
fn ended_status(overture: &Overture, id: &str, deadline: Duration) -> Value {
    let start = Instant::now();
    loop {
        let status = overture.json(&["status", id, "--json"]);
        if !matches!(status["status"].as_str(), Some("running" | "pending")) {
            return status;
        }
        assert!(
            start.elapsed() < deadline,
            "deployment {id} still runs after {deadline:?}: {status}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_deploy_handed_to_the_engine_prints_what_it_would_print_driving_it_itself() {
    let (overture, file) = Overture::with_blueprint("chain.yaml", CHAIN);
    let serving = Serving::start(&overture);
    let (code, status, output) = overture.deploy(&file, &[]);
    assert_eq!(code, 0, "{}", text(&output.stderr));
    assert_eq!(status["status"], "succeeded");
    for step in ["first", "second", "beside"] {
        assert_eq!(status["steps"][step]["status"], "succeeded", "{step}");
    }
    let progress = text(&output.stderr);
    let id = status["id"].as_str().expect("an id");
    assert_eq!(
        status,
        overture.json(&["status", id, "--json"]),
        "the status printed is the one the read models hold"
    );
    assert!(
        progress.starts_with(&format!("deployment {id}\n")),
        "{progress}"
    );
    for line in [
        "deployment of `chain` for tenant `default`: 3 steps",
        "first                started (attempt 1)",
        "deployment succeeded",
    ] {
        assert!(
            progress.contains(line),
            "`{line}` missing from:\n{progress}"
        );
    }

    let (code, said) = serving.stop();
    assert_eq!(code, 0, "an idle engine stops cleanly on SIGTERM:\n{said}");
    assert!(
        !overture.data_dir().join("engine.sock").exists(),
        "the socket goes with the engine"
    );
    // With no engine serving, `deploy` drives its deployment itself again.
    let status = overture.deploy_ok(&file, &[]);
    assert_eq!(status["status"], "succeeded");
}

#[test]
fn the_engine_carries_a_deployment_on_when_its_deploy_process_dies() {
    let overture = Overture::new();
    let file = sleeping(&overture, 1);
    let _serving = Serving::start(&overture);
    let deploying = overture.deploy_until(&file, &["waits", "started"]);
    let id = deploying.id.clone();
    deploying.kill();
    let status = ended_status(&overture, &id, Duration::from_secs(60));
    assert_eq!(status["status"], "succeeded", "{status}");
    assert_eq!(status["steps"]["after"]["status"], "succeeded");
}

#[test]
fn ctrl_c_on_a_handed_over_deploy_cancels_its_deployment() {
    let overture = Overture::new();
    let file = sleeping(&overture, 60);
    let _serving = Serving::start(&overture);
    let mut deploying = overture.deploy_until(&file, &["waits", "started"]);
    deploying.signal(libc::SIGINT);
    let code = deploying.wait_within(Duration::from_secs(60));
    assert_eq!(code, 1, "{:?}", deploying.later_lines());
    let status = overture.json(&["status", &deploying.id, "--json"]);
    assert_eq!(status["status"], "cancelled", "{status}");
    assert_eq!(status["steps"]["after"]["status"], "pending", "{status}");
    let later = deploying.later_lines().join("\n");
    assert!(later.contains("Ctrl-C: cancelling deployment"), "{later}");
    assert!(later.contains("deployment cancelled"), "{later}");
}

#[test]
fn stopping_the_engine_cancels_what_it_drives_and_each_deploy_prints_its_end() {
    let overture = Overture::new();
    let file = sleeping(&overture, 60);
    let serving = Serving::start(&overture);
    let mut deploying = overture.deploy_until(&file, &["waits", "started"]);
    let (code, said) = serving.stop();
    assert_eq!(code, 0, "{said}");
    assert!(
        said.contains("SIGTERM: taking no more deployments, and cancelling the 1 running"),
        "{said}"
    );
    assert_eq!(deploying.wait_within(Duration::from_secs(60)), 1);
    let later = deploying.later_lines().join("\n");
    assert!(
        later.contains("deployment cancelled: SIGTERM on `overture engine`"),
        "{later}"
    );
    let status = overture.json(&["status", &deploying.id, "--json"]);
    assert_eq!(status["status"], "cancelled", "{status}");
}

#[test]
fn bad_input_handed_over_is_refused_as_without_an_engine() {
    let overture = Overture::new();
    let _serving = Serving::start(&overture);
    let file = overture.blueprint(
        "p.yaml",
        "name: p\nparams: { who: {} }\nsteps:\n  a: { run: noop }\n",
    );
    let output = overture.run(&["deploy", file.to_str().expect("path")]);
    let message = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{message}");
    for word in ["p.yaml", "params.who", "--param who=VALUE"] {
        assert!(message.contains(word), "`{word}` missing from:\n{message}");
    }
    assert_eq!(overture.json(&["list", "--json"]), serde_json::json!([]));
}

#[test]
fn a_secret_handed_over_appears_in_no_output_of_either_process_nor_any_file() {
    const SECRET: &str = "tok-51c0e2-handed-never-shown";
    let overture = Overture::new();
    let serving = Serving::start(&overture);
    let file = overture.blueprint(
        "secret.yaml",
        r#"
name: uses-a-secret
secrets: [token]
steps:
  echoes: { run: script, with: { command: 'echo "the token is {{ secrets.token }}"' } }
"#,
    );
    let (code, status, output) = overture.deploy_with_secret(&file, "token", SECRET);
    assert_eq!(code, 0, "{}", text(&output.stderr));
    let id = status["id"].as_str().expect("an id");
    let log = overture.run(&["logs", id, "echoes"]);
    assert!(
        text(&log.stdout).contains("the token is ***"),
        "the step had the secret, masked in its log: {}",
        text(&log.stdout)
    );
    let (_, said) = serving.stop();
    for printed in [text(&output.stdout), text(&output.stderr), said] {
        assert!(!printed.contains(SECRET), "printed:\n{printed}");
    }
    let leaks = files_containing(&overture.data_dir(), SECRET.as_bytes());
    assert!(leaks.is_empty(), "files holding the secret: {leaks:?}");
}

#[test]
fn one_engine_serves_a_data_directory() {
    let overture = Overture::new();
    let _serving = Serving::start(&overture);
    let second = overture.run(&["engine"]);
    let message = text(&second.stderr);
    assert_eq!(second.status.code(), Some(2), "{message}");
    assert!(
        message.contains("another `overture engine` serves"),
        "{message}"
    );
}
