//! Services across hosts, on a local cloud of each test's own: the haproxy cluster
//! (`examples/haproxy-cluster`) deploys with its steps waiting for services at run time,
//! registers each instance only once it answers its check through the bastion, gives haproxy
//! exactly the registered members, and re-runs only the watching step when a second deployment
//! scales the application out and when that deployment is destroyed (at once given the token;
//! without it, by the `overture resume` given it). In `overture serve`, a re-run the server holds
//! no token for waits for a request of the watcher's user.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::api::{parsed, Client, Server};
use crate::cloud::{assert_closed_and_purged, deploy, step};
use crate::local_cloud::{in_namespace, LocalCloud};
use crate::support::{id_of, text, Overture};

/// The example's folder.
fn cluster() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/haproxy-cluster")
}

/// A copy of one of the example's blueprints with `change` applied, beside its playbooks.
fn cluster_blueprint(o: &Overture, name: &str, change: impl Fn(String) -> String) -> PathBuf {
    let original = std::fs::read_to_string(cluster().join(name)).expect("example");
    let path = o.blueprint(name, &change(original));
    let folder = path.parent().expect("folder").join("playbooks");
    std::fs::create_dir_all(&folder).expect("playbooks folder");
    for entry in std::fs::read_dir(cluster().join("playbooks")).expect("playbooks") {
        let entry = entry.expect("entry");
        std::fs::copy(entry.path(), folder.join(entry.file_name())).expect("copy a playbook");
    }
    path
}

/// The events of a deployment of `type`.
fn of_type(o: &Overture, id: &str, kind: &str) -> Vec<Value> {
    o.events(id)
        .into_iter()
        .filter(|event| event["type"] == kind)
        .collect()
}

/// When a step's first attempt started and when it succeeded, from the events' times.
fn span(o: &Overture, id: &str, name: &str) -> (String, String) {
    let at = |kind: &str| {
        of_type(o, id, kind)
            .into_iter()
            .find(|event| event["data"]["step"] == name)
            .unwrap_or_else(|| panic!("{name} has no {kind}"))["metadata"]["recorded_at"]
            .as_str()
            .expect("recorded_at")
            .to_owned()
    };
    (at("StepStarted"), at("StepSucceeded"))
}

/// The members of the service of the cloud's `project`, as `overture services --json` lists
/// them under the project's id (its tenant).
fn registered(o: &Overture, cloud: &LocalCloud, project: &str, service: &str) -> BTreeSet<String> {
    let tenant = cloud.project(project)["id"].clone();
    let listed = o.json(&["services", "--json"]);
    listed["tenants"]
        .as_array()
        .expect("tenants")
        .iter()
        .filter(|t| t["tenant"] == tenant)
        .flat_map(|t| t["services"].as_array().expect("services").clone())
        .filter(|s| s["service"] == service)
        .flat_map(|s| s["instances"].as_array().expect("instances").clone())
        .map(|i| i["member"].as_str().expect("member").to_owned())
        .collect()
}

/// The members haproxy's configuration on the load balancer lists, one `server` line each.
fn haproxy_members(cloud: &LocalCloud, tenant: &str) -> BTreeSet<String> {
    cloud
        .server_srv_file(tenant, "lb-1", "/srv/haproxy/haproxy.cfg")
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            (words.next() == Some("server"))
                .then(|| words.nth(1).map(str::to_owned))
                .flatten()
        })
        .collect()
}

/// The application servers that answer through haproxy, asked from the bastion `count` times.
fn answering(cloud: &LocalCloud, tenant: &str, bastion: &str, count: usize) -> BTreeSet<String> {
    let bastion = cloud.server(tenant, bastion);
    let namespace = bastion["namespace"].as_str().expect("namespace");
    let lb = cloud.server(tenant, "lb-1")["address"]
        .as_str()
        .expect("address")
        .to_owned();
    (0..count)
        .map(|_| {
            let body = in_namespace(
                namespace,
                &[
                    "curl",
                    "-sS",
                    "--max-time",
                    "5",
                    &format!("http://{lb}:8080/"),
                ],
            );
            let answer: Value = serde_json::from_str(&body).expect("the application's JSON");
            answer["app"].as_str().expect("app").to_owned()
        })
        .collect()
}

fn names(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|name| (*name).to_owned()).collect()
}

#[test]
fn the_cluster_waits_at_run_time_and_haproxy_serves_exactly_the_registered_members() {
    let cloud = LocalCloud::up();
    let (token_file, _) = cloud.token("acme");
    let o = Overture::new();
    let file = cluster_blueprint(&o, "blueprint.yaml", |text| text);
    let (code, status, output) = deploy(&o, &cloud, &file, &token_file);
    assert_eq!(code, 0, "{}", text(&output.stderr));
    let id = id_of(&status);

    // Both application servers answered through haproxy, each with the database's answer.
    let answers: BTreeSet<String> = ["check-1", "check-2"]
        .iter()
        .map(|check| {
            let outputs = &step(&status, check)["outputs"];
            assert_eq!(outputs["db"], "db-1 ready", "{outputs}");
            outputs["app"].as_str().expect("app").to_owned()
        })
        .collect();
    assert_eq!(answers, names(&["app-1", "app-2"]), "round robin over both");

    // The database and the application's install overlap: neither waited for the other.
    let (db_started, db_done) = span(&o, &id, "db");
    let (install_started, install_done) = span(&o, &id, "app-install");
    assert!(
        install_started < db_done && db_started < install_done,
        "db {db_started}..{db_done} and app-install {install_started}..{install_done} overlap"
    );
    // The application waited for the database's registration, not for a `needs`.
    let db_registered = of_type(&o, &id, "ServiceRegistered")
        .into_iter()
        .find(|event| event["data"]["service"] == "db")
        .expect("db registered");
    let (app_started, _) = span(&o, &id, "app");
    assert!(
        db_registered["metadata"]["recorded_at"].as_str() < Some(app_started.as_str()),
        "app starts only once db is registered"
    );

    let app = registered(&o, &cloud, "acme", "app");
    assert_eq!(app.len(), 2, "{app:?}");
    assert_eq!(registered(&o, &cloud, "acme", "db").len(), 1);
    assert_eq!(
        haproxy_members(&cloud, "acme"),
        app,
        "haproxy lists exactly the registered members"
    );
    let resolved = of_type(&o, &id, "ServicesResolved")
        .into_iter()
        .find(|event| event["data"]["step"] == "lb")
        .expect("lb's members are recorded");
    let seen: BTreeSet<String> = resolved["data"]["services"]["app"]
        .as_array()
        .expect("members")
        .iter()
        .map(|m| m.as_str().expect("member").to_owned())
        .collect();
    assert_eq!(seen, app, "the audit trail says which members lb was given");

    // It watches `app`, so it keeps its seal, but the bastion is closed.
    let group = cloud.security_group("acme", "bastion");
    assert_eq!(group["rules"], serde_json::json!([]), "{group}");
    assert!(!of_type(&o, &id, "BastionAccessRevoked").is_empty());
    assert!(of_type(&o, &id, "SecretsPurged").is_empty());
}

#[test]
fn a_scale_out_reruns_only_the_watching_step_and_its_destroy_takes_the_member_out() {
    let cloud = LocalCloud::up();
    let (token_file, _) = cloud.token("acme");
    let o = Overture::new();
    let cluster_file = cluster_blueprint(&o, "blueprint.yaml", |text| text);
    let (code, status, output) = deploy(&o, &cloud, &cluster_file, &token_file);
    assert_eq!(code, 0, "{}", text(&output.stderr));
    let first = id_of(&status);
    let started_before = of_type(&o, &first, "StepStarted").len();

    let scale_file = cluster_blueprint(&o, "scale-out.yaml", |text| text);
    let (code, status, output) = deploy(&o, &cloud, &scale_file, &token_file);
    assert_eq!(code, 0, "{}", text(&output.stderr));
    let second = id_of(&status);

    // The first deployment's lb alone ran again, for the reason the trail gives.
    let reruns = of_type(&o, &first, "StepRerunRequested");
    assert_eq!(reruns.len(), 1, "{reruns:?}");
    let rerun = &reruns[0]["data"];
    assert_eq!(rerun["step"], "lb");
    assert_eq!(rerun["service"], "app");
    assert_eq!(rerun["from"].as_array().expect("from").len(), 2);
    assert_eq!(rerun["to"].as_array().expect("to").len(), 3);
    let started: Vec<Value> = of_type(&o, &first, "StepStarted");
    let again: Vec<&Value> = started[started_before..].iter().collect();
    assert_eq!(again.len(), 1, "{again:?}");
    assert_eq!(again[0]["data"]["step"], "lb");
    assert_eq!(again[0]["data"]["attempt"], 2, "a new attempt");
    let trail = text(&o.run(&["events", &first]).stdout);
    assert!(
        trail.contains("step rerun requested: lb")
            && trail.contains("service app changed its members"),
        "{trail}"
    );

    let three = registered(&o, &cloud, "acme", "app");
    assert_eq!(three.len(), 3, "{three:?}");
    assert_eq!(haproxy_members(&cloud, "acme"), three);
    assert_eq!(
        answering(&cloud, "acme", "bastion", 6),
        names(&["app-1", "app-2", "app-3"]),
        "haproxy answers from all three"
    );

    // Destroying the scale-out deregisters its instance; lb runs again with two members.
    let destroyed = o
        .command(&["destroy", &second, "--json", "--token-file"])
        .arg(&token_file)
        .env("OS_AUTH_URL", &cloud.auth_url)
        .output()
        .expect("run overture destroy");
    assert!(destroyed.status.success(), "{}", text(&destroyed.stderr));
    let deregistered = of_type(&o, &second, "ServiceDeregistered");
    assert_eq!(deregistered.len(), 1, "{deregistered:?}");
    assert_eq!(of_type(&o, &first, "StepRerunRequested").len(), 2);
    let two = registered(&o, &cloud, "acme", "app");
    assert_eq!(two.len(), 2, "{two:?}");
    assert_eq!(haproxy_members(&cloud, "acme"), two);
    assert_eq!(
        answering(&cloud, "acme", "bastion", 4),
        names(&["app-1", "app-2"])
    );
    // The scale-out watched nothing: it purged when it ended; the first still watches.
    assert!(!of_type(&o, &second, "SecretsPurged").is_empty());
    assert!(of_type(&o, &first, "SecretsPurged").is_empty());
}

#[test]
fn a_service_that_never_appears_ends_in_service_timeout_with_the_bastion_closed_and_purged() {
    let cloud = LocalCloud::up();
    let (token_file, _) = cloud.token("acme");
    let o = Overture::new();
    // Three members of `app` are required, and only two are ever provided. `lb` also needs
    // `app`, whose success registers its two instances in the same commit: the wait, and its
    // timeout, start only once both are registered, however long a busy machine takes to
    // configure them, so the timeout counts nothing but the wait for the third.
    let lb = "    needs: [booted]\n    requires: [{ service: app, count: 2 }]";
    let file = cluster_blueprint(&o, "blueprint.yaml", |text| {
        assert!(
            text.contains(lb),
            "the example's lb step is as this test expects"
        );
        text.replace(
            lb,
            "    needs: [booted, app]\n    requires: [{ service: app, count: 3, timeout: 10s }]",
        )
    });
    let (code, status, output) = deploy(&o, &cloud, &file, &token_file);
    assert_eq!(code, 1, "{}", text(&output.stderr));
    let id = id_of(&status);
    assert_eq!(status["status"], "failed");
    let reason = status["reason"].as_str().expect("reason");
    assert!(
        reason.contains("service `app` (2 of 3 registered)") && reason.contains("service-timeout"),
        "{reason}"
    );
    assert_eq!(step(&status, "lb")["status"], "failed");
    assert!(of_type(&o, &id, "StepStarted")
        .iter()
        .all(|event| event["data"]["step"] != "lb"));
    assert_closed_and_purged(&o, &cloud, "acme", &id);
}

#[test]
fn a_service_whose_check_fails_is_not_registered() {
    let cloud = LocalCloud::up();
    let (token_file, _) = cloud.token("acme");
    let o = Overture::new();
    let file = cluster_blueprint(&o, "blueprint.yaml", |text| {
        text.replace("check: { http: / }", "check: { http: /health }")
    });
    let (code, status, output) = deploy(&o, &cloud, &file, &token_file);
    assert_eq!(code, 1, "{}", text(&output.stderr));
    let id = id_of(&status);
    let failure = of_type(&o, &id, "StepAttemptFailed")
        .into_iter()
        .find(|event| event["data"]["step"] == "app")
        .expect("app failed");
    let message = failure["data"]["message"].as_str().expect("message");
    assert!(
        message.contains("service `app` did not answer its check (http /health)"),
        "{message}"
    );
    assert!(message.contains("not 2xx"), "{message}");
    let registered: Vec<Value> = of_type(&o, &id, "ServiceRegistered");
    assert!(
        registered
            .iter()
            .all(|event| event["data"]["service"] == "db"),
        "only the database answered its check: {registered:?}"
    );
    assert!(!registered.is_empty());
    assert_closed_and_purged(&o, &cloud, "acme", &id);
}

#[test]
fn a_destroy_without_a_token_queues_the_watching_steps_rerun_for_resume_to_run() {
    let cloud = LocalCloud::up();
    let (token_file, _) = cloud.token("acme");
    let o = Overture::new();
    let cluster_file = cluster_blueprint(&o, "blueprint.yaml", |text| text);
    let (code, status, output) = deploy(&o, &cloud, &cluster_file, &token_file);
    assert_eq!(code, 0, "{}", text(&output.stderr));
    let first = id_of(&status);
    let scale_file = cluster_blueprint(&o, "scale-out.yaml", |text| text);
    let (code, status, output) = deploy(&o, &cloud, &scale_file, &token_file);
    assert_eq!(code, 0, "{}", text(&output.stderr));
    let second = id_of(&status);
    let started_before = of_type(&o, &first, "StepStarted").len();

    // Without a token, the destroy cannot open the first deployment's seal: it records lb's
    // re-run and leaves its attempt queued, started by no one.
    let destroyed = o
        .command(&["destroy", &second, "--json"])
        .env_remove("OS_TOKEN")
        .env("OS_AUTH_URL", &cloud.auth_url)
        .output()
        .expect("run overture destroy");
    let said = text(&destroyed.stderr);
    assert!(destroyed.status.success(), "{said}");
    assert_eq!(of_type(&o, &second, "ServiceDeregistered").len(), 1);
    assert_eq!(of_type(&o, &first, "StepRerunRequested").len(), 2);
    let waiting = o.json(&["status", &first, "--json"]);
    assert_eq!(step(&waiting, "lb")["status"], "scheduled", "{waiting}");
    assert_eq!(
        of_type(&o, &first, "StepStarted").len(),
        started_before,
        "no attempt of lb started"
    );
    assert!(
        said.contains(&format!("deployment {first} (project acme) watches"))
            && said.contains("`overture resume --token-file FILE`"),
        "{said}"
    );

    // Resume, given the token, runs that attempt: none was interrupted, no retry used up.
    let resumed = o
        .command(&["resume", "--token-file"])
        .arg(&token_file)
        .env_remove("OS_TOKEN")
        .env("OS_AUTH_URL", &cloud.auth_url)
        .output()
        .expect("run overture resume");
    assert!(resumed.status.success(), "{}", text(&resumed.stderr));
    assert!(of_type(&o, &first, "StepAttemptFailed").is_empty());
    let started = of_type(&o, &first, "StepStarted");
    let again: Vec<&Value> = started[started_before..].iter().collect();
    assert_eq!(again.len(), 1, "{again:?}");
    assert_eq!(again[0]["data"]["step"], "lb");
    assert_eq!(again[0]["data"]["attempt"], 3, "the re-run's own attempt");
    let two = registered(&o, &cloud, "acme", "app");
    assert_eq!(two.len(), 2, "{two:?}");
    assert_eq!(haproxy_members(&cloud, "acme"), two);
    let done = o.json(&["status", &first, "--json"]);
    assert_eq!(step(&done, "lb")["status"], "succeeded", "{done}");
}

#[tokio::test(flavor = "multi_thread")]
async fn in_serve_a_watching_steps_rerun_waits_for_a_caller_whose_token_opens_its_seal() {
    let cloud = LocalCloud::up();
    let (token_file, token) = cloud.token("acme");
    // The same user and project, but another token: it does not open the first one's seal.
    let (_, other_token) = cloud.token("acme");
    let o = Overture::new();
    let cluster_file = cluster_blueprint(&o, "blueprint.yaml", |text| text);
    let (code, status, output) = deploy(&o, &cloud, &cluster_file, &token_file);
    assert_eq!(code, 0, "{}", text(&output.stderr));
    let first = id_of(&status);
    let started_before = of_type(&o, &first, "StepStarted").len();

    let server = Server::start(&o, &cloud.auth_url);
    let other = Client::new(&other_token);
    let mut files = serde_json::Map::new();
    for entry in std::fs::read_dir(cluster().join("playbooks")).expect("playbooks") {
        let entry = entry.expect("entry");
        let name = format!("playbooks/{}", entry.file_name().to_string_lossy());
        let playbook = std::fs::read_to_string(entry.path()).expect("a playbook");
        files.insert(name, Value::String(playbook));
    }
    let scale = std::fs::read_to_string(cluster().join("scale-out.yaml")).expect("example");
    let (answer, body) = other
        .post(
            &server.at("/v1/deployments"),
            &json!({"blueprint": scale, "files": files}),
        )
        .await;
    assert_eq!(answer, StatusCode::CREATED, "{body}");
    let second = parsed(&body)["id"].as_str().expect("an id").to_owned();
    let ended = other
        .events(
            &server.at(&format!("/v1/deployments/{second}/events")),
            None,
            |event, _| {
                matches!(
                    event,
                    "DeploymentSucceeded" | "DeploymentFailed" | "DeploymentCancelled"
                )
            },
        )
        .await;
    assert_eq!(
        ended.last().map(|(_, event, _)| event.as_str()),
        Some("DeploymentSucceeded")
    );

    // lb's re-run is recorded and queued, but the server holds no token that opens its seal.
    assert_eq!(of_type(&o, &first, "StepRerunRequested").len(), 1);
    let first_path = format!("/v1/deployments/{first}");
    let (_, body) = other.get(&server.at(&first_path)).await;
    assert_eq!(
        parsed(&body)["steps"]["lb"]["status"],
        "scheduled",
        "{body}"
    );
    assert_eq!(of_type(&o, &first, "StepStarted").len(), started_before);

    // Its user's next request carries it on with that token: that attempt runs, none other.
    let rerun = Client::new(&token)
        .events(
            &server.at(&format!("{first_path}/events")),
            None,
            |event, data| {
                event == "StepSucceeded"
                    && data["data"]["step"] == "lb"
                    && data["data"]["attempt"] == 2
            },
        )
        .await;
    let asked = rerun
        .iter()
        .position(|(_, event, _)| event == "StepRerunRequested")
        .expect("the re-run is recorded");
    let since: Vec<&str> = rerun[asked..]
        .iter()
        .map(|(_, event, _)| event.as_str())
        .collect();
    assert!(!since.contains(&"StepAttemptFailed"), "{since:?}");
    let three = registered(&o, &cloud, "acme", "app");
    assert_eq!(three.len(), 3, "{three:?}");
    assert_eq!(haproxy_members(&cloud, "acme"), three);
}
