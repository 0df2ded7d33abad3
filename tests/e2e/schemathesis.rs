//! Schemathesis (PyPI), a client no one here wrote, against `overture serve`: requests generated
//! from `/openapi.json`, sent with each of two tenants' tokens, every answer checked against the
//! document. Each tenant has deployments recorded, so the deployment routes are reached with
//! real ids (through the document's links) and not only with ids that answer 404.

use std::path::{Path, PathBuf};
use std::process::Command;

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::api::{parsed, streamed_all, Client, Server};
use crate::local_cloud::LocalCloud;
use crate::support::{text, Overture};

/// A deployment that succeeds: one harmless step on this machine.
const SUCCEEDS: &str =
    "name: greets\nsteps:\n  hello:\n    run: script\n    with: { command: 'echo hello' }\n";

/// A deployment that fails at once (and so may be redriven).
const FAILS: &str = "name: stumbles\nsteps:\n  hello:\n    run: script\n    retry: { step-failed: { times: 0 } }\n    with: { command: 'echo trying; exit 3' }\n";

/// A deployment still running while Schemathesis runs (and so may be cancelled), however long
/// a loaded machine takes for both runs: the test cancels it at its end.
const RUNS: &str = "name: lingers\nsteps:\n  hello:\n    run: script\n    with: { command: 'echo waiting; sleep 1800' }\n";

/// What Schemathesis is told beyond the document: the name of the steps above, which no answer
/// lists as a value, and which answers are right although the document cannot say so: a string
/// that is not a blueprint, `at` past the log's end, `attempt` and `destroy` together, secrets
/// the blueprint does not declare, a JSON body that is not a CloudEvent are refused with 400.
const CONFIG: &str = r#"
[dictionaries]
steps = { values = ["hello"] }

[parameters]
"path.step" = { dictionary = "steps", probability = 0.8 }
"path.id" = { dictionary = "ids", probability = 0.8 }

[[operations]]
include-operation-id = ["create_deployment", "get_deployment", "step_log", "redrive_deployment"]
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "404", "409"]

# A batch is answered event by event (200, each event its own answer or error), as the
# CloudEvents binding's batched mode asks: a batch holding something other than events is not
# refused whole.
[[operations]]
include-operation-id = ["post_event"]
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "404", "409"]
checks.negative_data_rejection.expected-statuses = ["200", "400", "401", "404", "413", "415"]
"#;

/// The configuration, with the ids of the deployments recorded (both tenants'), which Schemathesis
/// puts in the paths beside ids of its own.
fn configured(ids: &[String]) -> String {
    let ids: Vec<String> = ids.iter().map(|id| format!("\"{id}\"")).collect();
    format!(
        "{CONFIG}\n[dictionaries.ids]\nvalues = [{}]\n",
        ids.join(", ")
    )
}

/// The server's trigger file: events of source `schemathesis` deploy a greeting into acme.
fn triggers(dir: &Path, tenant: &str) -> PathBuf {
    std::fs::write(dir.join("greets.yaml"), SUCCEEDS).expect("write the blueprint");
    let file = dir.join("triggers.yaml");
    let text = format!(
        "triggers:\n  - name: greet\n    on: {{ source: schemathesis, type: greet }}\n    deploy: greets.yaml\n    tenant: {tenant}\n"
    );
    std::fs::write(&file, text).expect("write the trigger file");
    file
}

/// A client of the project's own virtual environment (`scripts/setup.sh` installs them).
fn client(name: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../.venv/bin")
        .join(name);
    assert!(
        path.is_file(),
        "{} is missing: run scripts/setup.sh",
        path.display()
    );
    path
}

/// Records `blueprint` for `caller` and follows it to its end; returns its id.
async fn deployed(server: &Server, caller: &Client, blueprint: &str) -> String {
    let id = started(server, caller, blueprint).await;
    streamed_all(caller, server, &id).await;
    id
}

/// Records `blueprint` for `caller`; returns its id.
async fn started(server: &Server, caller: &Client, blueprint: &str) -> String {
    let (status, body) = caller
        .post(
            &server.at("/v1/deployments"),
            &json!({ "blueprint": blueprint }),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    parsed(&body)["id"].as_str().expect("an id").to_owned()
}

/// Runs Schemathesis against `server` with `token`; its JSON report, after it passed.
fn schemathesis(server: &Server, token: &str, ids: &[String], dir: &Path) -> Value {
    let report = dir.join("report.json");
    let config = dir.join("schemathesis.toml");
    std::fs::write(&config, configured(ids)).expect("write the configuration");
    let output = Command::new(client("schemathesis"))
        .current_dir(dir)
        .env_remove("SCHEMATHESIS_HOOKS")
        .arg("--config-file")
        .arg(&config)
        .args(["run", &server.at("/openapi.json")])
        .args(["--checks", "all"])
        .args(["--max-examples", "20", "--seed", "29", "--workers", "1"])
        .args(["--generation-database", "none", "--no-color"])
        .args(["--header", &format!("X-Auth-Token: {token}")])
        .args(["--report", "json", "--report-json-path"])
        .arg(&report)
        .output()
        .expect("run schemathesis");
    let printed = format!("{}{}", text(&output.stdout), text(&output.stderr));
    assert!(output.status.success(), "schemathesis failed:\n{printed}");
    serde_json::from_slice(&std::fs::read(&report).expect("the report")).expect("JSON")
}

#[tokio::test(flavor = "multi_thread")]
async fn schemathesis_finds_every_answer_true_to_the_document_for_two_tenants() {
    let cloud = LocalCloud::up();
    let o = Overture::new();
    let files = tempfile::tempdir().expect("a temporary folder");
    let (_, acme) = cloud.token("acme");
    let trigger_file = triggers(files.path(), &cloud.project_id("acme"));
    let server = Server::with_triggers(&o, &cloud.auth_url, &trigger_file);
    let tokens = [acme, cloud.token("globex").1];
    let mut ids = Vec::new();
    for token in &tokens {
        let caller = Client::new(token);
        ids.push(deployed(&server, &caller, SUCCEEDS).await);
        ids.push(deployed(&server, &caller, FAILS).await);
        ids.push(started(&server, &caller, RUNS).await);
    }
    for token in &tokens {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let report = schemathesis(&server, token, &ids, dir.path());
        let operations = &report["operations"];
        assert_eq!(
            (operations["tested"].clone(), operations["skipped"].clone()),
            (operations["total"].clone(), json!(0)),
            "every operation is reached: {operations}"
        );
        assert_eq!(
            report["warnings"]["missing_test_data"],
            json!([]),
            "no operation answered only 404: the ids and steps given reach them"
        );
    }
    // What still runs is cancelled, so no step outlives the test.
    for token in &tokens {
        let caller = Client::new(token);
        let (_, body) = caller
            .get(&server.at("/v1/deployments?status=running"))
            .await;
        for running in parsed(&body).as_array().expect("a list") {
            let id = running["id"].as_str().expect("an id");
            let (status, body) = caller
                .post(
                    &server.at(&format!("/v1/deployments/{id}/cancel")),
                    &json!(null),
                )
                .await;
            assert!(
                [StatusCode::ACCEPTED, StatusCode::CONFLICT].contains(&status),
                "{body}"
            );
            streamed_all(&caller, &server, id).await;
        }
    }
}
