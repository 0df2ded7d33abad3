//! Tenants are project ids (issue 27, docs/security/tenant-ids.md), against a local cloud with
//! Keystone domains: two projects named `acme` in two domains find nothing of each other on
//! any route of the API or any command through `--server`, answered exactly as an unknown id;
//! a project deleted and made again under its name sees none of the old one's deployments; and
//! a record made when the tenant was the project's name is read through its recorded
//! `project_id`, by its project only.

use std::process::Output;

use reqwest::header::ACCEPT;
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::api::{parsed, streamed_all, Client, Server};
use crate::local_cloud::LocalCloud;
use crate::support::{text, Overture};

/// Its step `app` runs once and succeeds.
const BLUEPRINT: &str =
    "name: app\nsteps:\n  app:\n    run: script\n    with: { command: 'echo app up' }\n";

/// One of the two `acme` projects: its id, and a caller with its token.
struct Acme {
    id: String,
    client: Client,
}

impl Acme {
    /// The `acme` of `domain` (made if new), with a fresh token.
    fn of(cloud: &LocalCloud, domain: &str) -> Self {
        let (_, token) = cloud.token_in("acme", domain);
        let id = cloud.project_in("acme", domain)["id"]
            .as_str()
            .expect("the project's id")
            .to_owned();
        Self {
            id,
            client: Client::new(&token),
        }
    }

    /// Deploys [`BLUEPRINT`] over HTTP and follows it to its end; returns its id.
    async fn deploys(&self, server: &Server) -> String {
        let (status, body) = self
            .client
            .post(
                &server.at("/v1/deployments"),
                &json!({ "blueprint": BLUEPRINT }),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        assert_eq!(parsed(&body)["tenant"], self.id.as_str(), "{body}");
        let id = parsed(&body)["id"].as_str().expect("an id").to_owned();
        streamed_all(&self.client, server, &id).await;
        id
    }

    /// What every route naming deployment `id` answers this caller: status and body, in the
    /// order of [`routes`].
    async fn answers_about(&self, server: &Server, id: &str) -> Vec<(StatusCode, String)> {
        let mut answers = Vec::new();
        for (method, path) in routes(id) {
            let answer = match method {
                "GET" => self.client.get(&server.at(&path)).await,
                "SSE" => {
                    let response = self
                        .client
                        .http
                        .get(server.at(&path))
                        .header("X-Auth-Token", &self.client.token)
                        .header(ACCEPT, "text/event-stream")
                        .send()
                        .await
                        .expect("GET");
                    (response.status(), response.text().await.expect("body"))
                }
                _ => self.client.post(&server.at(&path), &json!({})).await,
            };
            answers.push(answer);
        }
        answers
    }

    /// `overture --server URL ARGS` with this project's token.
    fn remotely(&self, o: &Overture, server: &Server, args: &[&str]) -> Output {
        let mut all = vec!["--server", server.url.as_str()];
        all.extend(args);
        o.command(&all)
            .env("OS_TOKEN", &self.client.token)
            .env_remove("OVERTURE_SERVER")
            .output()
            .expect("run overture")
    }

    /// What every command naming deployment `id` prints through the server: exit code, stdout
    /// and stderr, with `id` written as `ID`.
    fn commands_about(
        &self,
        o: &Overture,
        server: &Server,
        id: &str,
    ) -> Vec<(i32, String, String)> {
        commands(id)
            .iter()
            .map(|args| {
                let output = self.remotely(o, server, args);
                (
                    output.status.code().unwrap_or(-1),
                    text(&output.stdout).replace(id, "ID"),
                    text(&output.stderr).replace(id, "ID"),
                )
            })
            .collect()
    }
}

/// Every route that names a deployment, with the method it is called with (`SSE`: a GET
/// asking for the event stream).
fn routes(id: &str) -> Vec<(&'static str, String)> {
    vec![
        ("GET", format!("/v1/deployments/{id}")),
        ("GET", format!("/v1/deployments/{id}?at=0")),
        ("GET", format!("/v1/deployments/{id}/events")),
        ("SSE", format!("/v1/deployments/{id}/events")),
        ("GET", format!("/v1/deployments/{id}/logs/app")),
        ("GET", format!("/v1/deployments/{id}/logs/app?attempt=1")),
        ("POST", format!("/v1/deployments/{id}/cancel")),
        ("POST", format!("/v1/deployments/{id}/redrive")),
    ]
}

/// Every command that names a deployment.
fn commands(id: &str) -> Vec<Vec<&str>> {
    vec![
        vec!["status", id],
        vec!["status", id, "--json"],
        vec!["status", id, "--at", "0"],
        vec!["events", id],
        vec!["events", id, "--json"],
        vec!["logs", id, "app"],
        vec!["graph", id],
        vec!["cancel", id],
        vec!["redrive", id],
    ]
}

/// The ids `GET /v1/deployments` lists to `caller`.
async fn listed(caller: &Acme, server: &Server) -> Vec<String> {
    let (status, body) = caller.client.get(&server.at("/v1/deployments")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    parsed(&body)
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|view| view["id"].as_str().map(str::to_owned))
        .collect()
}

/// A deployment id nobody has.
fn unknown_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

/// The answers of the routes about `id`, with `id` written as `ID`.
fn with_id_hidden(answers: Vec<(StatusCode, String)>, id: &str) -> Vec<(StatusCode, String)> {
    answers
        .into_iter()
        .map(|(status, body)| (status, body.replace(id, "ID")))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn two_projects_named_alike_in_two_domains_find_nothing_of_each_other() {
    let cloud = LocalCloud::up();
    let ours = Acme::of(&cloud, "Default");
    let theirs = Acme::of(&cloud, "Other");
    assert_ne!(ours.id, theirs.id);
    let o = Overture::new();
    let server = Server::start(&o, &cloud.auth_url);
    let our_deployment = ours.deploys(&server).await;
    let their_deployment = theirs.deploys(&server).await;

    for (caller, own, other) in [
        (&ours, &our_deployment, &their_deployment),
        (&theirs, &their_deployment, &our_deployment),
    ] {
        // Its own deployment answers (cancel and redrive refuse an ended one with 409).
        let own_answers = caller.answers_about(&server, own).await;
        let statuses: Vec<StatusCode> = own_answers.iter().map(|(s, _)| *s).collect();
        assert_eq!(
            statuses,
            [
                StatusCode::OK,
                StatusCode::OK,
                StatusCode::OK,
                StatusCode::OK,
                StatusCode::OK,
                StatusCode::OK,
                StatusCode::CONFLICT,
                StatusCode::CONFLICT
            ],
            "{own_answers:?}"
        );

        // The other's: 404 on every route, each body as an unknown id's.
        let unknown = unknown_id();
        let answers = with_id_hidden(caller.answers_about(&server, other).await, other);
        let as_unknown = with_id_hidden(caller.answers_about(&server, &unknown).await, &unknown);
        assert_eq!(answers, as_unknown);
        for ((status, body), (_, path)) in answers.iter().zip(routes(other)) {
            assert_eq!(*status, StatusCode::NOT_FOUND, "{path}: {body}");
            assert_eq!(parsed(body)["code"], "not_found", "{path}: {body}");
        }

        // Lists, the summary, the grants and the registry hold its own only.
        assert_eq!(listed(caller, &server).await, std::slice::from_ref(own));
        let (_, body) = caller.client.get(&server.at("/v1/tenant")).await;
        let summary = parsed(&body);
        assert_eq!(
            (summary["tenant"].as_str(), summary["total"].as_u64()),
            (Some(caller.id.as_str()), Some(1)),
            "{body}"
        );
        for path in ["/v1/grants", "/v1/services"] {
            let (status, body) = caller.client.get(&server.at(path)).await;
            assert_eq!(status, StatusCode::OK, "{path}: {body}");
            assert!(!body.contains(other.as_str()), "{path}: {body}");
        }

        // Every command through the server: as for an unknown id, and nothing of the other's.
        let printed = caller.commands_about(&o, &server, other);
        let as_unknown = caller.commands_about(&o, &server, &unknown);
        assert_eq!(printed, as_unknown);
        for ((code, stdout, stderr), args) in printed.iter().zip(commands("ID")) {
            assert_eq!(*code, 2, "{args:?}: {stderr}");
            assert!(stdout.is_empty(), "{args:?}: {stdout}");
            assert!(stderr.contains("no deployment ID"), "{args:?}: {stderr}");
        }
        for args in [
            vec!["list", "--json"],
            vec!["list"],
            vec!["grants", "--json"],
            vec!["tenants", "--json"],
            vec!["services", "--json"],
        ] {
            let output = caller.remotely(&o, &server, &args);
            assert!(
                output.status.success(),
                "{args:?}: {}",
                text(&output.stderr)
            );
            let shown = text(&output.stdout);
            assert!(!shown.contains(other.as_str()), "{args:?}: {shown}");
        }
        let output = caller.remotely(&o, &server, &["tenants", "--json"]);
        let tenants: Vec<Value> = serde_json::from_slice(&output.stdout).expect("JSON");
        let named: Vec<&str> = tenants
            .iter()
            .filter_map(|t| t["tenant"].as_str())
            .collect();
        assert_eq!(named, [caller.id.as_str()], "only the caller's tenant");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_project_deleted_and_made_again_under_its_name_sees_none_of_the_old_deployments() {
    let cloud = LocalCloud::up();
    let old = Acme::of(&cloud, "Default");
    let o = Overture::new();
    let server = Server::start(&o, &cloud.auth_url);
    let deployment = old.deploys(&server).await;

    cloud.delete_project("acme", "Default");
    let (status, _) = old.client.get(&server.at("/v1/deployments")).await;
    assert_eq!(
        status,
        StatusCode::UNAUTHORIZED,
        "the old project's token is gone"
    );

    let new = Acme::of(&cloud, "Default");
    assert_ne!(new.id, old.id, "a new project, with a new id");
    let unknown = unknown_id();
    assert_eq!(
        with_id_hidden(new.answers_about(&server, &deployment).await, &deployment),
        with_id_hidden(new.answers_about(&server, &unknown).await, &unknown),
    );
    let (status, body) = new.client.get(&server.at("/v1/deployments")).await;
    assert_eq!((status, parsed(&body)), (StatusCode::OK, json!([])));
    let (_, body) = new.client.get(&server.at("/v1/tenant")).await;
    assert_eq!(parsed(&body)["total"], 0, "{body}");
    assert_eq!(
        new.commands_about(&o, &server, &deployment),
        new.commands_about(&o, &server, &unknown)
    );
    let output = new.remotely(&o, &server, &["list", "--json"]);
    assert_eq!(text(&output.stdout), "[]\n", "{}", text(&output.stderr));

    // Its own deployments are its own again.
    let fresh = new.deploys(&server).await;
    assert_eq!(listed(&new, &server).await, [fresh]);
}

/// The log of `o` as JSON lines, with every event of `stream` recorded for `tenant` as an
/// older build recorded it (the project's name, in the `DeploymentRequested` and in every
/// event's metadata), and a `ServiceRegistered` of its step `app` before its last event;
/// signed anew with the key of `o` (import it with `--trust` of that key).
fn as_recorded_by_name(o: &Overture, stream: &str, tenant: &str) -> String {
    let export = o.run(&["export"]);
    assert!(export.status.success(), "{}", text(&export.stderr));
    let lines: Vec<Value> = text(&export.stdout)
        .lines()
        .filter(|line| !line.starts_with("{\"trailer\""))
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect();
    let last = lines
        .iter()
        .rposition(|line| line["stream"] == stream)
        .expect("the stream's events");
    let mut out: Vec<Value> = Vec::new();
    for (index, mut line) in lines.into_iter().enumerate() {
        if line["stream"] != stream {
            out.push(line);
            continue;
        }
        line["metadata"]["tenant"] = json!(tenant);
        if line["type"] == "DeploymentRequested" {
            assert!(
                line["data"]["cloud"]["project_id"].is_string(),
                "the account is recorded: {line}"
            );
            line["data"]["tenant"] = json!(tenant);
        }
        if index == last {
            let mut registered = out.last().expect("an event before the end").clone();
            registered["id"] = json!(uuid::Uuid::now_v7().to_string());
            registered["type"] = json!("ServiceRegistered");
            registered["data"] = json!({"service": "app", "step": "app", "host": "app-1",
                                        "address": "10.0.0.9", "port": 8000});
            registered["revision"] = line["revision"].clone();
            line["revision"] = json!(line["revision"].as_u64().expect("a revision") + 1);
            out.push(registered);
        }
        out.push(line);
    }
    o.signed_export(&out)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_record_made_when_the_tenant_was_the_name_is_read_through_its_recorded_project_id() {
    let cloud = LocalCloud::up();
    let ours = Acme::of(&cloud, "Default");
    let theirs = Acme::of(&cloud, "Other");
    let recorded = Overture::new();
    let deployment = {
        let server = Server::start(&recorded, &cloud.auth_url);
        ours.deploys(&server).await
    };
    let old_log = as_recorded_by_name(&recorded, &format!("deployment-{deployment}"), "acme");

    // Imported into a new data directory, as a log moved from an older build would be.
    let (o, file) = Overture::with_blueprint("old.jsonl", &old_log);
    let key = recorded.key();
    let output = o.run(&[
        "import",
        file.to_str().expect("utf-8 path"),
        "--trust",
        &key,
    ]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let server = Server::start(&o, &cloud.auth_url);

    // Its project, by id: its deployment, its summary and its registry.
    let (status, body) = ours
        .client
        .get(&server.at(&format!("/v1/deployments/{deployment}")))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let view = parsed(&body);
    assert_eq!(view["tenant"], ours.id.as_str(), "{body}");
    assert_eq!(view["project"]["name"], "acme", "{body}");
    let (_, body) = ours.client.get(&server.at("/v1/deployments")).await;
    assert_eq!(parsed(&body).as_array().map(Vec::len), Some(1), "{body}");
    let (_, body) = ours.client.get(&server.at("/v1/tenant")).await;
    assert_eq!(parsed(&body)["total"], 1, "{body}");
    let (_, body) = ours.client.get(&server.at("/v1/services")).await;
    let services = parsed(&body);
    assert_eq!(services.as_array().map(Vec::len), Some(1), "{body}");
    assert_eq!(services[0]["deployment"], deployment.as_str(), "{body}");

    // The same-named project of the other domain: nothing, as for an unknown id.
    let unknown = unknown_id();
    assert_eq!(
        with_id_hidden(
            theirs.answers_about(&server, &deployment).await,
            &deployment
        ),
        with_id_hidden(theirs.answers_about(&server, &unknown).await, &unknown),
    );
    for path in ["/v1/deployments", "/v1/services", "/v1/grants"] {
        let (status, body) = theirs.client.get(&server.at(path)).await;
        assert_eq!(
            (status, parsed(&body)),
            (StatusCode::OK, json!([])),
            "{path}"
        );
    }
    let (_, body) = theirs.client.get(&server.at("/v1/tenant")).await;
    assert_eq!(parsed(&body)["total"], 0, "{body}");
    assert_eq!(
        theirs.commands_about(&o, &server, &deployment),
        theirs.commands_about(&o, &server, &unknown)
    );

    // On the data directory, by its operator: listed under the project's id, none under the name.
    let by_id = o.json(&["list", "--tenant", &ours.id, "--json"]);
    assert_eq!(by_id.as_array().map(Vec::len), Some(1), "{by_id}");
    assert_eq!(o.json(&["list", "--tenant", "acme", "--json"]), json!([]));
}
