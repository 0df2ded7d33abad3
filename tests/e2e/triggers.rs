//! Triggers: `overture trigger send` deploys what a trigger file says an event calls for, once
//! per event however often it is delivered, follows chains up to the depth limit, and
//! `overture triggers log` says why each trigger did or did not deploy.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::api::Server;
use crate::http::Gate;
use crate::support::{text, Overture};

const RELEASE_BLUEPRINT: &str = "name: release\nparams:\n  version: {}\nsteps:\n  \
    show:\n    run: script\n    with: { command: 'echo \"version={{ params.version }}\" >> \"$OVERTURE_OUTPUTS\"' }\n";

const TRIGGERS: &str = r#"
triggers:
  - name: deploy-on-release
    on: { source: artifacts, type: release.published }
    where: { "data.channel": stable }
    deploy: release.yaml
    tenant: acme
    params: { version: "{{ event.data.version }}" }
"#;

fn release_event(overture: &Overture, name: &str, id: &str, channel: &str) -> PathBuf {
    let event = json!({
        "specversion": "1.0", "id": id, "source": "artifacts", "type": "release.published",
        "data": { "channel": channel, "version": "1.2.3" }
    });
    overture.blueprint(name, &event.to_string())
}

fn send(overture: &Overture, event: &Path, triggers: &Path) -> std::process::Output {
    overture.run(&[
        "trigger",
        "send",
        event.to_str().expect("path"),
        "--triggers",
        triggers.to_str().expect("path"),
    ])
}

fn decisions(overture: &Overture) -> Vec<Value> {
    overture
        .json(&["triggers", "log", "--json"])
        .as_array()
        .expect("a list")
        .clone()
}

fn given_release_triggers(overture: &Overture) -> PathBuf {
    overture.blueprint("release.yaml", RELEASE_BLUEPRINT);
    overture.blueprint("triggers.yaml", TRIGGERS)
}

#[test]
fn a_matching_event_deploys_with_the_templated_param() {
    let overture = Overture::new();
    let triggers = given_release_triggers(&overture);
    let event = release_event(&overture, "event.json", "e-1", "stable");

    let output = send(&overture, &event, &triggers);

    assert!(output.status.success(), "{}", text(&output.stderr));
    let ids = overture.deployment_ids();
    assert_eq!(ids.len(), 1);
    let requested = &overture.events(&ids[0])[0];
    assert_eq!(requested["type"], "DeploymentRequested");
    assert_eq!(requested["data"]["params"]["version"], "1.2.3");
    assert_eq!(requested["data"]["trigger"], "trigger:deploy-on-release");
    assert_eq!(requested["data"]["requested_by"], "event:artifacts/e-1");
    let log = decisions(&overture);
    assert_eq!(log[0]["decision"], "deployed");
    assert_eq!(log[0]["deployment"], ids[0].as_str());
    assert_eq!(log[0]["event_id"], "e-1");
    // The deployment's end is fed back as an event of its own, which this trigger ignores.
    assert_eq!(log.len(), 2);
    assert_eq!(log[1]["source"], "overture");
    assert_eq!(log[1]["event_id"], format!("{}.succeeded", ids[0]));
    assert_eq!(log[1]["decision"], "not-matched");
}

#[test]
fn a_non_matching_event_deploys_nothing_and_the_log_says_why() {
    let overture = Overture::new();
    let triggers = given_release_triggers(&overture);
    let event = release_event(&overture, "event.json", "e-2", "beta");

    let output = send(&overture, &event, &triggers);

    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(overture.deployment_ids().is_empty());
    let log = decisions(&overture);
    assert_eq!(log.len(), 1);
    assert_eq!(log[0]["decision"], "not-matched");
    assert_eq!(
        log[0]["reason"],
        "where data.channel: is `beta`, not `stable`"
    );
    let shown = text(&overture.run(&["triggers", "log"]).stdout);
    assert!(shown.contains("not-matched"), "{shown}");
}

#[test]
fn the_same_event_sent_20_times_at_once_starts_one_deployment() {
    let overture = Overture::new();
    let triggers = given_release_triggers(&overture);
    let event = release_event(&overture, "event.json", "e-3", "stable");

    let children: Vec<_> = (0..20)
        .map(|_| {
            overture
                .command(&[
                    "trigger",
                    "send",
                    event.to_str().expect("path"),
                    "--triggers",
                    triggers.to_str().expect("path"),
                ])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn")
        })
        .collect();
    for child in children {
        let output = child.wait_with_output().expect("wait");
        assert!(output.status.success(), "{}", text(&output.stderr));
    }

    assert_eq!(overture.deployment_ids().len(), 1);
    let log = decisions(&overture);
    let count = |decision: &str| log.iter().filter(|d| d["decision"] == decision).count();
    assert_eq!((count("deployed"), count("duplicate")), (1, 19));
}

#[test]
fn the_chained_example_runs_both_deployments() {
    let overture = Overture::new();
    let examples = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/triggers");
    let output = overture
        .command(&[
            "trigger",
            "send",
            &format!("{examples}/release-event.json"),
            "--triggers",
            &format!("{examples}/triggers.yaml"),
            "--json",
        ])
        .env("GREETER_TOKEN", "s3cr3t")
        .output()
        .expect("run overture");

    assert!(output.status.success(), "{}", text(&output.stderr));
    let statuses: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let ran: Vec<_> = statuses
        .as_array()
        .expect("a list")
        .iter()
        .map(|view| (view["blueprint"].clone(), view["status"].clone()))
        .collect();
    assert_eq!(
        ran,
        [
            (json!("hello-world"), json!("succeeded")),
            (json!("smoke"), json!("succeeded"))
        ]
    );
    let log = decisions(&overture);
    let smoke = log
        .iter()
        .find(|d| d["trigger"] == "smoke-after-deploy" && d["decision"] == "deployed")
        .expect("the smoke check was deployed");
    assert_eq!(smoke["source"], "overture");
    // The secret the trigger file names reaches hello-world's step, and nothing a user reads.
    let everything = format!(
        "{}{}{}",
        text(&output.stdout),
        text(&output.stderr),
        serde_json::to_string(&log).expect("JSON")
    );
    assert!(!everything.contains("s3cr3t"), "the secret leaked");
}

#[test]
fn a_looping_chain_stops_at_the_depth_limit() {
    let overture = Overture::new();
    overture.blueprint("loop.yaml", "name: loop\nsteps:\n  once: { run: noop }\n");
    let triggers = overture.blueprint(
        "triggers.yaml",
        "triggers:\n  - name: start\n    on: { source: artifacts, type: release.published }\n    \
         deploy: loop.yaml\n    tenant: acme\n  - name: again\n    \
         on: { source: overture, type: deployment.succeeded }\n    \
         where: { \"data.blueprint\": loop }\n    deploy: loop.yaml\n    tenant: acme\n",
    );
    let event = release_event(&overture, "event.json", "e-4", "stable");

    let output = send(&overture, &event, &triggers);

    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(overture.deployment_ids().len(), 8);
    let log = decisions(&overture);
    let refused: Vec<_> = log.iter().filter(|d| d["decision"] == "refused").collect();
    assert_eq!(refused.len(), 1, "{log:#?}");
    assert_eq!(refused[0]["trigger"], "again");
    assert_eq!(refused[0]["reason"], "chain depth limit 8 reached");
}

#[test]
fn an_invalid_trigger_file_exits_2_naming_file_field_and_fix() {
    let overture = Overture::new();
    let triggers = overture.blueprint(
        "broken-triggers.yaml",
        "triggers:\n  - name: a\n    on: { source: artifacts }\n    deploy: x.yaml\n    tenant: acme\n",
    );
    let event = release_event(&overture, "event.json", "e-5", "stable");

    let output = send(&overture, &event, &triggers);

    assert_eq!(output.status.code(), Some(2));
    let message = text(&output.stderr);
    for word in [
        "broken-triggers.yaml",
        "triggers.a.on.type",
        "missing",
        "release.published",
    ] {
        assert!(message.contains(word), "`{word}` missing from: {message}");
    }
    assert!(
        !overture.data_dir().join("overture.db").exists() || overture.deployment_ids().is_empty()
    );
}

#[test]
fn a_malformed_event_exits_2_and_says_what_is_wrong() {
    let overture = Overture::new();
    let triggers = given_release_triggers(&overture);
    let event = overture.blueprint(
        "bad.json",
        r#"{"specversion": "1.0", "id": "x", "type": "t"}"#,
    );

    let output = send(&overture, &event, &triggers);

    assert_eq!(output.status.code(), Some(2));
    let message = text(&output.stderr);
    assert!(
        message.contains("bad.json") && message.contains("`source`"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn events_over_http_deploy_only_into_the_callers_tenant_and_only_once() {
    let cloud = crate::local_cloud::LocalCloud::up();
    let (_, token) = cloud.token("acme");
    // Over the API the tenant is the token's project id: the trigger file names acme by it.
    let acme = cloud.project_id("acme");
    let overture = Overture::new();
    overture.blueprint("release.yaml", RELEASE_BLUEPRINT);
    let triggers = overture.blueprint(
        "triggers.yaml",
        &format!(
            "{}  - name: into-globex\n    on: {{ source: artifacts, type: release.published }}\n    \
             deploy: release.yaml\n    tenant: globex\n",
            TRIGGERS.replace("tenant: acme", &format!("tenant: {acme}"))
        ),
    );
    let server = Server::with_triggers(&overture, &cloud.auth_url, &triggers);
    let http = reqwest::Client::new();
    let post = |body: String| {
        http.post(format!("{}/v1/events", server.url))
            .header("X-Auth-Token", &token)
            .header("Content-Type", "application/cloudevents+json")
            .body(body)
            .send()
    };
    let event = json!({
        "specversion": "1.0", "id": "h-1", "source": "artifacts", "type": "release.published",
        "data": { "channel": "stable", "version": "2.0.0" }
    });

    let first = post(event.to_string()).await.expect("POST");
    assert_eq!(first.status(), reqwest::StatusCode::ACCEPTED);
    let first: Value = first.json().await.expect("JSON");
    let again: Value = post(event.to_string())
        .await
        .expect("POST")
        .json()
        .await
        .expect("JSON");
    let bad = post("{\"id\": 1}".into()).await.expect("POST");

    assert_eq!(first["deployments"].as_array().map(Vec::len), Some(1));
    let decided = |answer: &Value| -> Vec<(String, String)> {
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
    };
    let pairs = |list: &[(&str, &str)]| -> Vec<(String, String)> {
        list.iter()
            .map(|(t, d)| ((*t).to_owned(), (*d).to_owned()))
            .collect()
    };
    assert_eq!(
        decided(&first),
        pairs(&[
            ("deploy-on-release", "deployed"),
            ("into-globex", "refused")
        ])
    );
    assert!(first["decisions"][1]["reason"]
        .as_str()
        .is_some_and(|r| r.contains(&format!("caller's tenant `{acme}`"))));
    assert_eq!(
        decided(&again),
        pairs(&[
            ("deploy-on-release", "duplicate"),
            ("into-globex", "refused")
        ])
    );
    assert_eq!(again["deployments"], json!([]));
    assert_eq!(bad.status(), reqwest::StatusCode::BAD_REQUEST);
    drop(server);
    let ids = overture.deployment_ids();
    assert_eq!(ids.len(), 1);
    assert_eq!(overture.events(&ids[0])[0]["data"]["tenant"], acme);
}

/// A chain whose first deployment runs until the test lets it end, then a quick second one on
/// its success.
const SLOW_CHAIN: &str = r#"triggers:
  - name: slow-on-release
    on: { source: artifacts, type: release.published }
    deploy: slow.yaml
    tenant: acme
  - name: quick-after-slow
    on: { source: overture, type: deployment.succeeded }
    where: { "data.blueprint": slow }
    deploy: quick.yaml
    tenant: acme
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_restarted_server_carries_on_the_chains_of_the_deployments_it_resumes() {
    let cloud = crate::local_cloud::LocalCloud::up();
    let (_, token) = cloud.token("acme");
    let acme = cloud.project_id("acme");
    let overture = Overture::new();
    let gate = Gate::new();
    let triggers = gated_chain(&overture, &acme, &gate);
    let server = gated_server(&overture, &cloud.auth_url, &triggers);
    let answer: Value = reqwest::Client::new()
        .post(format!("{}/v1/events", server.url))
        .header("X-Auth-Token", &token)
        .header("Content-Type", "application/json")
        .body(
            json!({"specversion": "1.0", "id": "r-1", "source": "artifacts",
                   "type": "release.published"})
            .to_string(),
        )
        .send()
        .await
        .expect("POST")
        .json()
        .await
        .expect("JSON");
    let slow = answer["deployments"][0]
        .as_str()
        .expect("started")
        .to_owned();

    // The server dies while the slow deployment's step runs (held by its gate), before its end
    // could be delivered.
    gate.wait_called();
    drop(server);
    let log = overture.json(&["triggers", "log", "--json"]);
    assert!(
        !log.as_array()
            .expect("a list")
            .iter()
            .any(|d| d["trigger"] == "quick-after-slow" && d["decision"] == "deployed"),
        "nothing chained yet: {log:#}"
    );

    gate.open();
    let again = gated_server(&overture, &cloud.auth_url, &triggers);
    wait_for(|| overture.deployment_ids().len() == 2);
    let quick = overture
        .deployment_ids()
        .into_iter()
        .find(|id| *id != slow)
        .expect("the chained deployment");
    wait_for(|| {
        overture
            .events(&quick)
            .iter()
            .any(|event| event["type"] == "DeploymentSucceeded")
    });
    drop(again);
    let requested = &overture.events(&quick)[0];
    assert_eq!(
        requested["data"]["triggered_by"]["trigger"],
        "quick-after-slow"
    );
    assert_eq!(
        requested["data"]["triggered_by"]["event_id"],
        format!("{slow}.succeeded")
    );
    assert_eq!(requested["data"]["triggered_by"]["depth"], 1);
    assert!(overture
        .events(&slow)
        .iter()
        .any(|event| event["type"] == "DeploymentSucceeded"));
}

/// [`SLOW_CHAIN`] for `tenant`, beside its blueprints (the slow one an `http` step calling
/// `gate`, so it runs until the test opens it); the trigger file's path. Serve it with
/// [`gated_server`].
pub(crate) fn gated_chain(overture: &Overture, tenant: &str, gate: &Gate) -> PathBuf {
    overture.blueprint(
        "slow.yaml",
        &format!(
            "name: slow\negress: [\"{}\"]\nsteps:\n  wait: {{ run: http, with: {{ url: \"{}\" }} }}\n",
            gate.address(),
            gate.url()
        ),
    );
    overture.blueprint("quick.yaml", "name: quick\nsteps:\n  done: { run: noop }\n");
    overture.blueprint(
        "triggers.yaml",
        &SLOW_CHAIN.replace("tenant: acme", &format!("tenant: {tenant}")),
    )
}

/// `overture serve --triggers FILE`, its tenants' steps allowed the loopback ports their
/// blueprints declare (a [`Gate`]'s).
pub(crate) fn gated_server(overture: &Overture, auth_url: &str, triggers: &Path) -> Server {
    Server::with_flags(
        overture,
        auth_url,
        &[
            "--triggers",
            triggers.to_str().expect("utf-8 path"),
            "--allow-loopback-egress",
        ],
    )
}

/// Looks every 100 ms until `done`, failing the test after two minutes: the server works on its
/// own time.
fn wait_for(mut done: impl FnMut() -> bool) {
    let started = std::time::Instant::now();
    while !done() {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(120),
            "not within two minutes"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}
