//! Masking that cannot be split: a secret in one long line is masked wherever the line is cut
//! (at the masker's 64 KiB boundary, at the start of the output's kept tail) in `overture logs`,
//! the API's log answer, the failure's message and every file of the data directory; and a
//! secret too short to be masked is refused at every door, nothing recorded.

use reqwest::StatusCode;
use serde_json::json;

use crate::api::{code, parsed, Client, Server};
use crate::local_cloud::LocalCloud;
use crate::support::{files_containing, text, Overture};

/// 26 bytes; a half of it is as much a leak as the whole.
const SECRET: &str = "mask-e2e-0123456789-abcdef";
const HALVES: [&str; 2] = ["mask-e2e-0123", "456789-abcdef"];

/// One step that prints 128 KiB lines with the secret at every offset from just before 64 KiB
/// to just after it, so that whatever the pipe's reads, some line is cut inside the secret at the
/// masker's boundary; the last line puts it across the start of the 64 KiB tail a failure keeps.
const LONG_LINES: &str = r#"
name: long-lines
secrets: [token]
steps:
  prints:
    run: script
    with:
      command: |
        s="{{ secrets.token }}"
        line() { head -c "$1" /dev/zero | tr '\0' x; printf %s "$s"; head -c "$((131045 - $1))" /dev/zero | tr '\0' y; echo; }
        b=65508
        while [ "$b" -le 65538 ]; do line "$b"; b=$((b + 1)); done
        line 65523
        exit 1
"#;

/// Whichever of the secret's halves `shown` holds.
fn leaked(shown: &str) -> Vec<&'static str> {
    HALVES
        .into_iter()
        .filter(|half| shown.contains(half))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_secret_anywhere_around_64_kib_of_one_long_line_is_masked_everywhere() {
    let cloud = LocalCloud::up();
    let (_, token) = cloud.token("acme");
    let o = Overture::new();
    let server = Server::start(&o, &cloud.auth_url);
    let client = Client::new(&token);

    let (status, body) = client
        .post(
            &server.at("/v1/deployments"),
            &json!({"blueprint": LONG_LINES, "secrets": {"token": SECRET}}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let id = parsed(&body)["id"].as_str().expect("an id").to_owned();
    let streamed = client
        .events(
            &server.at(&format!("/v1/deployments/{id}/events")),
            None,
            |_, _| false,
        )
        .await;
    assert_eq!(
        streamed.last().map(|(_, event, _)| event.as_str()),
        Some("DeploymentFailed")
    );

    let (status, answer) = client
        .get(&server.at(&format!("/v1/deployments/{id}/logs/prints")))
        .await;
    assert_eq!(status, StatusCode::OK);
    let logs = o.run(&["logs", &id, "prints"]);
    assert!(logs.status.success(), "{}", text(&logs.stderr));
    let printed = text(&logs.stdout);
    assert_eq!(
        printed.matches("***").count(),
        32,
        "every line's secret is masked whole"
    );
    assert!(
        printed
            .lines()
            .all(|line| line.len() == 131_072 - 1 - 26 + 3),
        "and nothing else of the line changed"
    );

    let message = o
        .events(&id)
        .into_iter()
        .find(|e| e["type"] == "StepAttemptFailed")
        .expect("the attempt failed")["data"]["message"]
        .as_str()
        .expect("a message")
        .to_owned();
    assert!(message.ends_with(&"y".repeat(100)), "the tail: {message}");
    let events = text(&o.run(&["events", &id, "--json"]).stdout);

    for (what, shown) in [
        ("the API's log answer", &answer),
        ("overture logs", &printed),
        ("the failure's message", &message),
        ("overture events", &events),
    ] {
        assert_eq!(leaked(shown), Vec::<&str>::new(), "{what} shows the secret");
    }
    for half in HALVES {
        assert_eq!(
            files_containing(&o.data_dir(), half.as_bytes()),
            Vec::<String>::new(),
            "files of the data directory holding part of the secret"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_secret_shorter_than_4_bytes_is_refused_at_every_door_and_nothing_is_recorded() {
    let (o, file) = Overture::with_blueprint("long-lines.yaml", LONG_LINES);
    let (code_cli, _, output) = o.deploy_with_secret(&file, "token", "abc");
    let said = text(&output.stderr);
    assert_eq!(code_cli, 2, "{said}");
    assert!(
        said.contains("secrets.token") && said.contains("at least 4 bytes"),
        "the message names the secret and the fix: {said}"
    );
    assert!(!said.contains("abc"), "nor shows the value: {said}");

    let cloud = LocalCloud::up();
    let (_, token) = cloud.token("acme");
    let server = Server::start(&o, &cloud.auth_url);
    let client = Client::new(&token);
    let (status, body) = client
        .post(
            &server.at("/v1/deployments"),
            &json!({"blueprint": LONG_LINES, "secrets": {"token": "abc"}}),
        )
        .await;
    assert_eq!(
        (status, code(&body).as_str()),
        (StatusCode::BAD_REQUEST, "invalid"),
        "{body}"
    );
    assert!(body.contains("secrets.token"), "{body}");

    assert_eq!(o.json(&["list", "--json"]), json!([]), "nothing recorded");
}
