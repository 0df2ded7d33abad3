//! `http` steps of an API tenant (through `overture serve`) aimed at the engine host: a service
//! the test runs on 127.0.0.1 and the cloud metadata address 169.254.169.254. Without
//! `--allow-loopback-egress` both fail their one attempt at once as `egress-refused`, naming the
//! destination, and nothing reaches the service; with the flag, a port the blueprint declares
//! under `egress:` is reached, and one it does not declare is still refused.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::api::{parsed, streamed_all, Client, Server};
use crate::http::{HttpServer, Reply};
use crate::local_cloud::LocalCloud;
use crate::support::Overture;

/// A host service a tenant must not read.
fn host_service() -> HttpServer {
    HttpServer::start(|_, _| Reply(200, "OK", json!({"secret": "host-only"}).to_string()))
}

/// A blueprint of one `http` step, `call`, on `url`, declaring `egress`.
fn calling(url: &str, egress: &str) -> String {
    format!(
        r#"
name: probe-the-host
egress: {egress}
steps:
  call:
    run: http
    with: {{ url: "{url}", expect_status: 200 }}
"#
    )
}

/// Deploys `blueprint` as `client`'s tenant and follows it to its end: its id and every event,
/// as the API lists them.
async fn deploy(server: &Server, client: &Client, blueprint: &str) -> (String, Vec<Value>) {
    let (status, body) = client
        .post(
            &server.at("/v1/deployments"),
            &json!({ "blueprint": blueprint }),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let id = parsed(&body)["id"].as_str().expect("an id").to_owned();
    streamed_all(client, server, &id).await;
    let (status, body) = client
        .get(&server.at(&format!("/v1/deployments/{id}/events")))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    (id, parsed(&body).as_array().expect("events").clone())
}

fn of_type<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == kind).collect()
}

/// `call` ran exactly one attempt, which failed as `egress-refused` with a message holding
/// every one of `named`, and the deployment failed without a retry.
fn assert_refused_once(events: &[Value], named: &[&str]) {
    assert_eq!(of_type(events, "StepStarted").len(), 1, "one attempt");
    assert!(
        of_type(events, "StepRetryScheduled").is_empty(),
        "never retried"
    );
    let failures = of_type(events, "StepAttemptFailed");
    assert_eq!(failures.len(), 1, "{failures:?}");
    let failure = &failures[0]["data"];
    assert_eq!(failure["error_class"], "egress-refused", "{failure}");
    let message = failure["message"].as_str().expect("a message");
    for name in named {
        assert!(message.contains(name), "{name} in {message}");
    }
    let failed = of_type(events, "StepFailed");
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0]["data"]["error_class"], "egress-refused");
    assert_eq!(of_type(events, "DeploymentFailed").len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_api_tenants_http_step_to_the_hosts_loopback_or_metadata_is_refused_at_once() {
    let cloud = LocalCloud::up();
    let (_, token) = cloud.token("acme");
    let o = Overture::new();
    let server = Server::start(&o, &cloud.auth_url);
    let tenant = Client::new(&token);
    let service = host_service();
    let target = service.url("").replace("http://", "");

    // Declaring the port is not enough: this engine's operator allows none of its loopback.
    let (_, events) = deploy(
        &server,
        &tenant,
        &calling(&service.url("/"), &format!("[\"{target}\"]")),
    )
    .await;
    assert_refused_once(
        &events,
        &[
            &target,
            "on the engine host's loopback",
            "--allow-loopback-egress",
        ],
    );
    assert!(
        service.received().is_empty(),
        "nothing reached the host's service"
    );

    let (_, events) = deploy(
        &server,
        &tenant,
        &calling("http://169.254.169.254/latest/meta-data/", "[]"),
    )
    .await;
    assert_refused_once(&events, &["169.254.169.254:80", "link-local"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn with_loopback_egress_allowed_a_declared_port_is_reached_and_an_undeclared_one_refused() {
    let cloud = LocalCloud::up();
    let (_, token) = cloud.token("acme");
    let o = Overture::new();
    let server = Server::with_flags(&o, &cloud.auth_url, &["--allow-loopback-egress"]);
    let tenant = Client::new(&token);
    let service = host_service();
    let target = service.url("").replace("http://", "");

    let (id, events) = deploy(
        &server,
        &tenant,
        &calling(&service.url("/health"), &format!("[\"{target}\"]")),
    )
    .await;
    assert_eq!(
        of_type(&events, "DeploymentSucceeded").len(),
        1,
        "{id}: {events:?}"
    );
    assert_eq!(service.received().len(), 1, "one request");
    let policy = of_type(&events, "StepNetworkPolicyApplied");
    assert!(
        policy[0]["data"]["allowed"]
            .as_array()
            .expect("allowed")
            .iter()
            .any(|allowed| allowed == target.as_str()),
        "{policy:?}"
    );

    let (_, events) = deploy(&server, &tenant, &calling(&service.url("/health"), "[]")).await;
    assert_refused_once(&events, &[&target, &format!("declare \"{target}\"")]);
    assert_eq!(
        service.received().len(),
        1,
        "the undeclared call reached nothing"
    );

    let (_, events) = deploy(
        &server,
        &tenant,
        &calling("http://169.254.169.254/latest/meta-data/", "[]"),
    )
    .await;
    assert_refused_once(&events, &["169.254.169.254:80", "link-local"]);
}
