//! Killing the engine in the middle of a step, then `overture resume`.

use std::path::Path;

use crate::support::{assert_causal, gone_within, marker, step_events, text, Overture};

#[test]
fn resume_after_sigkill_finishes_the_deployment_with_no_event_lost_or_duplicated() {
    let slow = marker("interrupted-step");
    let (overture, file) = Overture::with_blueprint(
        "resume.yaml",
        &format!(
            r#"
name: resumable
steps:
  first:
    run: script
    with: {{ command: 'echo "v=1" >> "$OVERTURE_OUTPUTS"' }}
  slow:
    run: script
    needs: [first]
    # No retry setting: an attempt cut short by the engine's death is run again by default.
    with: {{ command: 'if [ "$OVERTURE_ATTEMPT" = 1 ]; then sleep 120; fi; echo "v={{{{ steps.first.outputs.v }}}}" >> "$OVERTURE_OUTPUTS" # {slow}' }}
  last:
    run: script
    needs: [slow]
    with: {{ command: 'echo "v={{{{ steps.slow.outputs.v }}}}" >> "$OVERTURE_OUTPUTS"' }}
"#
        ),
    );

    let id = killed_when(&overture, &file, &["slow", "started (attempt 1)"]);

    let before = overture.events(&id);
    assert_eq!(
        before.last().expect("events")["type"],
        "StepStarted",
        "the engine died during `slow`"
    );
    let resumed = overture.run(&["resume"]);
    assert!(
        resumed.status.success(),
        "resume: {}",
        text(&resumed.stderr)
    );
    assert!(
        text(&resumed.stdout).contains(&format!("{id} succeeded")),
        "{}",
        text(&resumed.stdout)
    );

    let after = overture.events(&id);
    assert_eq!(
        &after[..before.len()],
        &before[..],
        "nothing recorded before the crash changed"
    );
    assert_causal(
        &after,
        &[("slow", vec!["first"]), ("last", vec!["slow"])].into(),
    );
    assert_eq!(
        attempts_of(&after, "slow"),
        [
            "StepScheduled#1",
            "StepStarted#1",
            "StepAttemptFailed#1",
            "StepRetryScheduled#1",
            "StepStarted#2",
            "StepSucceeded#2"
        ],
    );
    let interrupted = after
        .iter()
        .find(|e| e["type"] == "StepAttemptFailed")
        .expect("interrupted attempt");
    assert_eq!(interrupted["data"]["error_class"], "interrupted");
    assert!(
        interrupted["data"]["exit_code"].is_null(),
        "the step did not exit: its engine died"
    );
    assert!(interrupted["data"]["message"]
        .as_str()
        .expect("message")
        .contains("interrupted"));
    let first_successes = after
        .iter()
        .filter(|e| e["type"] == "StepSucceeded" && e["data"]["step"] == "first")
        .count();
    assert_eq!(first_successes, 1, "no success is recorded twice");

    // The interrupted sandbox died with its engine, or, if the engine died while the sandbox was
    // still being set up, resume killed it.
    let left = gone_within(&slow, std::time::Duration::from_secs(60));
    assert!(left.is_empty(), "the interrupted sandbox is gone: {left:?}");

    let status = overture.json(&["status", &id, "--json"]);
    assert_eq!(status["status"], "succeeded");
    assert_eq!(status["steps"]["last"]["outputs"]["v"], "1");
    assert!(overture.run(&["replay", "--check"]).status.success());
}

#[test]
fn a_retry_wait_in_progress_when_the_engine_dies_is_honoured_by_resume() {
    let (overture, file) = Overture::with_blueprint(
        "wait.yaml",
        r#"
name: waits
steps:
  flaky:
    run: script
    retry: { step-failed: { times: 1, wait: 3s } }
    with: { command: 'test "$OVERTURE_ATTEMPT" = 2' }
"#,
    );
    let id = killed_when(&overture, &file, &["retrying: attempt 2"]);
    assert_eq!(
        overture.events(&id).last().expect("events")["type"],
        "StepRetryScheduled",
        "the engine died during the wait"
    );

    let resumed = overture.run(&["resume"]);
    assert!(
        resumed.status.success(),
        "resume: {}",
        text(&resumed.stderr)
    );

    let events = overture.events(&id);
    let retry = events
        .iter()
        .find(|e| e["type"] == "StepRetryScheduled")
        .expect("the retry");
    let second = events
        .iter()
        .find(|e| e["type"] == "StepStarted" && e["data"]["attempt"] == 2)
        .expect("the second attempt");
    let not_before = timestamp(&retry["data"]["not_before"]);
    let started = timestamp(&second["metadata"]["recorded_at"]);
    assert!(
        started >= not_before,
        "attempt 2 started at {started}, before its wait ended at {not_before}"
    );
    assert_eq!(
        overture.json(&["status", &id, "--json"])["status"],
        "succeeded"
    );
}

/// Deploys `file` and kills the engine once its progress shows `words`; the deployment's id.
fn killed_when(overture: &Overture, file: &Path, words: &[&str]) -> String {
    let engine = overture.deploy_until(file, words);
    let id = engine.id.clone();
    engine.kill();
    id
}

/// The step's events, each as `TYPE#ATTEMPT`.
fn attempts_of(events: &[serde_json::Value], step: &str) -> Vec<String> {
    step_events(events, step)
        .iter()
        .map(|(t, a)| format!("{t}#{a}"))
        .collect()
}

fn timestamp(value: &serde_json::Value) -> chrono::DateTime<chrono::Utc> {
    value
        .as_str()
        .expect("a timestamp")
        .parse()
        .expect("RFC 3339")
}

#[test]
fn resume_with_nothing_to_do_says_so() {
    let overture = Overture::new();
    let resumed = overture.run(&["resume"]);
    assert!(resumed.status.success(), "{}", text(&resumed.stderr));
    assert!(text(&resumed.stderr).contains("resuming 0 unfinished deployment(s)"));
}

#[test]
fn a_step_that_opts_out_of_interrupted_retries_fails_and_resume_exits_1() {
    let slow = marker("run-once");
    let (overture, file) = Overture::with_blueprint(
        "once.yaml",
        &format!(
            r#"
name: run-once
steps:
  charge:
    run: script
    # Charging a card must never run twice, even after a crash.
    retry: {{ interrupted: {{ times: 0 }} }}
    with: {{ command: 'sleep 120 # {slow}' }}
"#
        ),
    );
    let id = killed_when(&overture, &file, &["charge", "started (attempt 1)"]);

    let resumed = overture.run(&["resume"]);
    assert_eq!(
        resumed.status.code(),
        Some(1),
        "a deployment resume carried on has failed: {}",
        text(&resumed.stderr)
    );
    assert!(
        text(&resumed.stdout).contains(&format!("{id} failed")),
        "{}",
        text(&resumed.stdout)
    );
    let events = overture.events(&id);
    assert_eq!(
        attempts_of(&events, "charge"),
        [
            "StepScheduled#1",
            "StepStarted#1",
            "StepAttemptFailed#1",
            "StepFailed#0"
        ],
        "the step ran once, and was not run again"
    );
    let failed = events
        .iter()
        .find(|e| e["type"] == "StepFailed")
        .expect("the step failed");
    assert_eq!(failed["data"]["error_class"], "interrupted");
    assert_eq!(
        overture.json(&["status", &id, "--json"])["status"],
        "failed"
    );
}
