//! A secret given with `--secret` appears in no event, read model, progress line, error or file,
//! and no step is handed `***` in its place.

use crate::support::{assert_not_shown, files_containing, text, Overture};

const SECRET: &str = "tok-7f3a9c-never-shown";

#[test]
fn a_secret_appears_in_no_event_read_model_output_or_file() {
    let (overture, file) = Overture::with_blueprint(
        "secret.yaml",
        r#"
name: uses-a-secret
secrets: [token]
on_failure: { grace: 10s }
steps:
  echoes:
    run: script
    with: { command: 'echo "the token is {{ secrets.token }}"; echo "copy={{ secrets.token }}" >> "$OVERTURE_OUTPUTS"' }
  fails-loudly:
    run: script
    needs: [echoes]
    with: { command: 'echo "failing with {{ secrets.token }}" >&2; exit 1' }
"#,
    );
    let (_, status, output) = overture.deploy_with_secret(&file, "token", SECRET);
    assert_eq!(
        output.status.code(),
        Some(1),
        "the second step fails: {}",
        text(&output.stderr)
    );
    let id = status["id"].as_str().expect("id");

    assert_eq!(
        status["steps"]["echoes"]["outputs"]["copy"], "***",
        "outputs are masked"
    );
    let events = overture.events(id);
    let failure = events
        .iter()
        .find(|e| e["type"] == "StepAttemptFailed")
        .expect("failure");
    assert!(failure["data"]["message"]
        .as_str()
        .expect("message")
        .contains("failing with ***"));

    let mut shown = vec![text(&output.stdout), text(&output.stderr)];
    shown.extend(overture.printed(&[
        vec!["events", id],
        vec!["events", id, "--json"],
        vec!["status", id],
        vec!["list"],
        vec!["tenants"],
    ]));
    assert_not_shown(&shown, SECRET);
    assert!(events.iter().any(|e| e["type"] == "SecretsPurged"));
    let leaks = files_containing(&overture.data_dir(), SECRET.as_bytes());
    assert!(leaks.is_empty(), "files holding the secret: {leaks:?}");
    assert!(!overture.seal(id).exists(), "the sealed secrets are purged");
}

#[test]
fn an_output_holding_a_secret_that_a_later_step_uses_fails_its_step_instead_of_handing_on_stars() {
    let (overture, file) = Overture::with_blueprint(
        "handover.yaml",
        r#"
name: hands-on-a-secret
secrets: [api_key]
steps:
  producer:
    run: script
    with: { command: 'echo "made {{ secrets.api_key }}-suffix"; echo "k={{ secrets.api_key }}-suffix" >> "$OVERTURE_OUTPUTS"' }
  consumer:
    run: script
    needs: [producer]
    with: { command: 'echo "got={{ steps.producer.outputs.k }}" >> "$OVERTURE_OUTPUTS"' }
"#,
    );
    let (code, status, output) = overture.deploy_with_secret(&file, "api_key", SECRET);
    let progress = text(&output.stderr);
    assert_eq!(code, 1, "{progress}");
    let id = status["id"].as_str().expect("id");
    assert_eq!(status["steps"]["producer"]["status"], "failed");
    assert!(
        status["steps"]["consumer"]["outputs"].is_null()
            && status["steps"]["consumer"]["attempts"]
                .as_u64()
                .unwrap_or(0)
                == 0,
        "the consumer never ran, so it never got `***-suffix`: {}",
        status["steps"]["consumer"]
    );

    let events = overture.events(id);
    assert!(
        !events
            .iter()
            .any(|e| e["type"] == "StepStarted" && e["data"]["step"] == "consumer"),
        "the consumer never started"
    );
    let failure = events
        .iter()
        .find(|e| e["type"] == "StepAttemptFailed")
        .expect("the producer's attempt failed");
    assert_eq!(failure["data"]["error_class"], "step-failed");
    let message = failure["data"]["message"].as_str().expect("message");
    let expected = "output `k`, which another step uses, contains the value of secret `api_key`; pass the secret to the next step with {{ secrets.api_key }} instead";
    assert!(message.starts_with(expected), "{message}");
    assert!(
        message.ends_with("last output:\nmade ***-suffix"),
        "{message}"
    );
    assert!(
        progress.contains(&format!("attempt 1 failed (step-failed): {expected}")),
        "{progress}"
    );

    let mut shown = vec![text(&output.stdout), progress];
    shown.extend(overture.printed(&[
        vec!["events", id, "--json"],
        vec!["status", id, "--json"],
        vec!["logs", id, "producer"],
    ]));
    assert_not_shown(&shown, SECRET);
    let leaks = files_containing(&overture.data_dir(), SECRET.as_bytes());
    assert!(leaks.is_empty(), "files holding the secret: {leaks:?}");
}
