//! `overture logs`: every attempt's output is kept, masked, and can be followed while it runs.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::http::Gate;
use crate::support::{text, Overture};

const SECRET: &str = "log-s3cr3t-81c2";

/// Fails its first attempt and succeeds on the second, printing a secret each time.
const FLAKY: &str = r#"
name: flaky-logs
secrets: [token]
steps:
  flaky:
    run: script
    retry: { step-failed: { times: 1 } }
    with:
      command: |
        echo "attempt $OVERTURE_ATTEMPT with {{ secrets.token }}"
        for i in 1 2 3; do echo "line $i of attempt $OVERTURE_ATTEMPT"; done
        test "$OVERTURE_ATTEMPT" = 2 || { echo "giving up on attempt $OVERTURE_ATTEMPT" >&2; exit 7; }
"#;

#[test]
fn each_attempt_keeps_its_own_masked_output() {
    let (overture, file) = Overture::with_blueprint("flaky.yaml", FLAKY);
    let status = overture.deploy_ok_with_secret(&file, "token", SECRET);
    let id = status["id"].as_str().expect("id");

    let latest = overture.run(&["logs", id, "flaky"]);
    assert!(latest.status.success(), "{}", text(&latest.stderr));
    assert_eq!(
        text(&latest.stdout),
        "attempt 2 with ***\nline 1 of attempt 2\nline 2 of attempt 2\nline 3 of attempt 2\n",
        "the last attempt by default, its secret masked"
    );

    let first = text(
        &overture
            .run(&["logs", id, "flaky", "--attempt", "1"])
            .stdout,
    );
    assert!(first.starts_with("attempt 1 with ***\n"), "{first}");
    assert!(first.ends_with("giving up on attempt 1\n"), "{first}");

    let failure = overture
        .events(id)
        .into_iter()
        .find(|e| e["type"] == "StepAttemptFailed")
        .expect("the first attempt failed");
    assert_eq!(failure["data"]["exit_code"], 7);
    let message = failure["data"]["message"].as_str().expect("message");
    assert!(
        message.contains("line 3 of attempt 1") && message.contains("giving up on attempt 1"),
        "the failure carries the last lines: {message}"
    );
    assert!(
        message.contains("***") && !message.contains(SECRET),
        "{message}"
    );
}

#[test]
fn asking_for_a_step_or_attempt_that_has_no_log_says_what_there_is() {
    let (overture, file) = Overture::with_blueprint(
        "one.yaml",
        "name: one\nsteps:\n  only: { run: script, with: { command: 'echo hi' } }\n",
    );
    let (code, status, _) = overture.deploy(&file, &[]);
    assert_eq!(code, 0);
    let id = status["id"].as_str().expect("id");

    let unknown = overture.run(&["logs", id, "other"]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(
        text(&unknown.stderr).contains("its steps are: only"),
        "{}",
        text(&unknown.stderr)
    );
    let missing = overture.run(&["logs", id, "only", "--attempt", "3"]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(text(&missing.stderr).contains("no output for attempt 3"));
}

#[test]
fn follow_prints_an_attempt_while_it_runs_and_stops_when_it_ends() {
    let (overture, file) = Overture::with_blueprint(
        "slow.yaml",
        "name: slow\nsteps:\n  slow: { run: script, with: { command: 'echo first; sleep 2; echo second' } }\n",
    );
    let mut deploy = overture
        .command(&["deploy", file.to_str().expect("path"), "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("deploy");

    // The deployment's id is in the data directory as soon as its first line is logged.
    let logs = overture.data_dir().join("logs");
    let start = Instant::now();
    let id = loop {
        let found = std::fs::read_dir(&logs)
            .into_iter()
            .flatten()
            .flatten()
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .find(|id| {
                std::fs::read_to_string(logs.join(id).join("slow").join("1.log"))
                    .is_ok_and(|log| log.contains("first"))
            });
        if let Some(id) = found {
            break id;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the step never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    };

    let followed = overture.run(&["logs", &id, "slow", "--follow"]);
    assert!(followed.status.success(), "{}", text(&followed.stderr));
    assert_eq!(text(&followed.stdout), "first\nsecond\n");
    let status = overture.json(&["status", &id, "--json"]);
    assert_eq!(
        status["steps"]["slow"]["status"], "succeeded",
        "follow returns only once the attempt has ended"
    );
    assert!(deploy.wait().expect("deploy ends").success());
}

#[test]
fn following_the_latest_attempt_waits_for_it_and_goes_on_through_the_retries() {
    // `flaky` starts only once its gate opens, and the test opens it only once `logs --follow`
    // has opened the log: the follow is there before the first attempt, however slow it starts.
    let gate = Gate::new();
    let (overture, file) = Overture::with_blueprint(
        "retried.yaml",
        &format!(
            r#"
name: retried
steps:
  may-start:
    run: http
    with: {{ url: "{}" }}
  flaky:
    run: script
    needs: [may-start]
    retry: {{ step-failed: {{ times: 1, wait: 1s }} }}
    with:
      command: |
        echo "attempt $OVERTURE_ATTEMPT"
        test "$OVERTURE_ATTEMPT" = 2
"#,
            gate.url()
        ),
    );
    let deploying = overture.deploy_until(&file, &["deployment "]);
    let following = overture
        .command(&["logs", &deploying.id, "flaky", "--follow"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("logs --follow");
    let database =
        std::fs::canonicalize(overture.data_dir().join("overture.db")).expect("the database");
    let start = Instant::now();
    while !holds_open(following.id(), &database) {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "logs --follow never opened {}",
            database.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    gate.open();
    let followed = following.wait_with_output().expect("logs --follow ends");
    assert!(followed.status.success(), "{}", text(&followed.stderr));
    assert_eq!(
        text(&followed.stdout),
        "attempt 1\n--- attempt 2 ---\nattempt 2\n"
    );
    let status = overture.json(&["status", &deploying.id, "--json"]);
    assert_eq!(status["steps"]["flaky"]["status"], "succeeded");
}

/// Whether process `pid` has `file` open.
fn holds_open(pid: u32, file: &Path) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
        .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|target| target == file))
}
