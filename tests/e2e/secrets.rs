//! A secret given with `--secret` appears in no event, read model, progress line, error or file.

use crate::support::{files_containing, text, Overture};

const SECRET: &str = "tok-7f3a9c-never-shown";

#[test]
fn a_secret_appears_in_no_event_read_model_output_or_file() {
    let overture = Overture::new();
    let file = overture.blueprint(
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
    for args in [
        vec!["events", id],
        vec!["events", id, "--json"],
        vec!["status", id],
        vec!["list"],
        vec!["tenants"],
    ] {
        let out = overture.run(&args);
        shown.push(text(&out.stdout));
        shown.push(text(&out.stderr));
    }
    for (i, printed) in shown.iter().enumerate() {
        assert!(
            !printed.contains(SECRET),
            "output {i} shows the secret:\n{printed}"
        );
    }
    assert!(events.iter().any(|e| e["type"] == "SecretsPurged"));
    let leaks = files_containing(&overture.data_dir(), SECRET.as_bytes());
    assert!(leaks.is_empty(), "files holding the secret: {leaks:?}");
    assert!(
        !overture
            .data_dir()
            .join("seals")
            .join(format!("{id}.json"))
            .exists(),
        "the sealed secrets are purged"
    );
}
