//! CloudEvents sent by the official Python SDK (`cloudevents`, from the project's `.venv`) to
//! `overture serve --triggers`: in binary mode, in structured mode, with the SDK's older API too,
//! and in a batch of its JSON format. Each event id deploys once whichever mode carries it, and
//! the deployment is really recorded and run.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::api::Server;
use crate::local_cloud::LocalCloud;
use crate::support::{text, Overture};

const RELEASE: &str = "name: release\nparams:\n  version: {}\nsteps:\n  \
    show:\n    run: script\n    with: { command: 'echo \"version={{ params.version }}\" >> \"$OVERTURE_OUTPUTS\"' }\n";

/// The id of the first event: a space and a non-ASCII letter, which binary mode percent-encodes.
const FIRST: &str = "release 2.0 ü";

/// Runs the SDK's client script: `events` sent in `mode` to the server, one result per request.
fn send(server: &Server, token: &str, mode: &str, events: &[Value]) -> Vec<Value> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let python = root.join(".venv/bin/python");
    assert!(
        python.is_file(),
        "{} is missing: run scripts/setup.sh",
        python.display()
    );
    let script: PathBuf = root.join("tests/e2e/clients/cloudevents_send.py");
    let mut child = Command::new(&python)
        .arg(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the SDK's client");
    let request = json!({"url": server.at("/v1/events"), "token": token, "mode": mode,
                         "events": events});
    child
        .stdin
        .take()
        .expect("its stdin")
        .write_all(request.to_string().as_bytes())
        .expect("the request");
    let output = child.wait_with_output().expect("it ends");
    assert!(
        output.status.success(),
        "the SDK's client failed in {mode} mode: {}",
        text(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("a JSON list of results")
}

/// A release event as the SDK builds it: its attributes and its data.
fn release(id: &str, channel: &str, version: &str) -> Value {
    json!({
        "attributes": {"id": id, "source": "artifacts", "type": "release.published"},
        "data": {"channel": channel, "version": version}
    })
}

/// The (trigger, decision) pairs of one event's answer.
fn decided(answer: &Value) -> Vec<(String, String)> {
    answer["decisions"]
        .as_array()
        .expect("decisions")
        .iter()
        .map(|d| {
            (
                d["trigger"].as_str().unwrap_or_default().to_owned(),
                d["decision"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// The one answer of a single-event request, after checking it was accepted.
fn accepted(results: &[Value]) -> &Value {
    assert_eq!(results.len(), 1, "{results:?}");
    assert_eq!(results[0]["status"], 202, "{}", results[0]);
    &results[0]["answer"]
}

fn deployed() -> Vec<(String, String)> {
    vec![("deploy-on-release".into(), "deployed".into())]
}

fn duplicate() -> Vec<(String, String)> {
    vec![("deploy-on-release".into(), "duplicate".into())]
}

fn not_matched() -> Vec<(String, String)> {
    vec![("deploy-on-release".into(), "not-matched".into())]
}

#[test]
fn the_sdks_binary_structured_and_batched_events_deploy_once_per_event_id() {
    let cloud = LocalCloud::up();
    let (_, token) = cloud.token("acme");
    let acme = cloud.project_id("acme");
    let overture = Overture::new();
    overture.blueprint("release.yaml", RELEASE);
    let triggers = overture.blueprint(
        "triggers.yaml",
        &format!(
            "triggers:\n  - name: deploy-on-release\n    on: {{ source: artifacts, type: \
             release.published }}\n    where: {{ \"data.channel\": stable }}\n    deploy: \
             release.yaml\n    tenant: {acme}\n    params: {{ version: \"{{{{ event.data.version \
             }}}}\" }}\n"
        ),
    );
    let server = Server::with_triggers(&overture, &cloud.auth_url, &triggers);
    let mut first = release(FIRST, "stable", "2.0.0");
    first["attributes"]["subject"] = json!("a \"quoted\" 100% subject");

    let binary = send(&server, &token, "binary", std::slice::from_ref(&first));
    let structured = send(&server, &token, "structured", std::slice::from_ref(&first));
    let binary_v1 = send(
        &server,
        &token,
        "binary-v1",
        &[release("b-1", "stable", "2.1.0")],
    );
    let structured_v1 = send(
        &server,
        &token,
        "structured-v1",
        &[release("c-1", "stable", "2.2.0")],
    );
    let text_data = send(
        &server,
        &token,
        "binary",
        &[json!({
            "attributes": {"id": "t-1", "source": "artifacts", "type": "release.published",
                           "datacontenttype": "text/plain"},
            "data_text": "channel=stable"
        })],
    );
    let forged = send(
        &server,
        &token,
        "binary",
        &[json!({
            "attributes": {"id": "x.succeeded", "source": "overture",
                           "type": "deployment.succeeded"},
            "data": {"blueprint": "release"}
        })],
    );
    let batch = send(
        &server,
        &token,
        "batch",
        &[
            release("d-1", "stable", "3.0.0"),
            first.clone(),
            release("e-1", "beta", "3.1.0"),
            release("b-1", "stable", "2.1.0"),
        ],
    );

    let answer = accepted(&binary);
    assert_eq!(answer["id"], FIRST, "the id is percent-decoded");
    assert_eq!(decided(answer), deployed());
    assert_eq!(answer["deployments"].as_array().map(Vec::len), Some(1));
    let again = accepted(&structured);
    assert_eq!(decided(again), duplicate(), "one event id, two modes");
    assert_eq!(again["deployments"], json!([]));
    assert_eq!(decided(accepted(&binary_v1)), deployed());
    assert_eq!(decided(accepted(&structured_v1)), deployed());
    assert_eq!(
        decided(accepted(&text_data)),
        not_matched(),
        "text data is read, as a string without fields"
    );
    assert_eq!(
        forged[0]["status"], 400,
        "only the engine speaks for overture"
    );
    assert!(
        forged[0]["answer"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("`source` is `overture`")),
        "{}",
        forged[0]
    );
    assert_eq!(batch.len(), 1);
    assert_eq!(batch[0]["status"], 200, "{}", batch[0]);
    let results = batch[0]["answer"]["results"].as_array().expect("results");
    let outcomes: Vec<(Value, Value, Vec<(String, String)>)> = results
        .iter()
        .map(|r| {
            (
                r["status"].clone(),
                r["id"].clone(),
                decided(&r["delivered"]),
            )
        })
        .collect();
    assert_eq!(
        outcomes,
        vec![
            (json!(202), json!("d-1"), deployed()),
            (json!(202), json!(FIRST), duplicate()),
            (json!(202), json!("e-1"), not_matched()),
            (json!(202), json!("b-1"), duplicate()),
        ]
    );

    let ids = overture.deployment_ids();
    assert_eq!(ids.len(), 4, "{ids:?}");
    let deadline = Instant::now() + Duration::from_secs(180);
    for id in &ids {
        while !overture
            .events(id)
            .iter()
            .any(|event| event["type"] == "DeploymentSucceeded")
        {
            assert!(
                Instant::now() < deadline,
                "{id} did not succeed within three minutes"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    drop(server);
    let started: BTreeSet<(String, String)> = ids
        .iter()
        .map(|id| {
            let requested = &overture.events(id)[0];
            (
                requested["data"]["triggered_by"]["event_id"]
                    .as_str()
                    .expect("triggered by an event")
                    .to_owned(),
                overture.json(&["status", id, "--json"]).to_string(),
            )
        })
        .collect();
    let event_ids: BTreeSet<&str> = started.iter().map(|(e, _)| e.as_str()).collect();
    assert_eq!(event_ids, BTreeSet::from([FIRST, "b-1", "c-1", "d-1"]));
    for (event, status) in &started {
        let version = match event.as_str() {
            FIRST => "2.0.0",
            "b-1" => "2.1.0",
            "c-1" => "2.2.0",
            _ => "3.0.0",
        };
        assert!(
            status.contains(&format!("version={version}"))
                || status.contains(&format!("\"version\":\"{version}\"")),
            "{event}: the data's version reached the deployment: {status}"
        );
    }
}
