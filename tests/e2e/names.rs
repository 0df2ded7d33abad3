//! Deployment names: `deploy --name` records one, unique among the tenant's deployments that
//! are not destroyed; every command that takes an id takes `NAME` (the tenant `OVERTURE_TENANT`
//! or `default`) or `TENANT/NAME`; a second live deployment of the name is refused, naming the
//! one that has it, with nothing recorded; a destroyed deployment's name is free again.

use std::time::Duration;

use crate::support::{id_of, text, Deploying, Overture};

const HELLO: &str = r#"
name: hello
steps:
  greet:
    run: script
    with: { command: 'echo hello' }
"#;

/// How long a cancelled deployment may take to end on a loaded machine; only a broken cancel
/// waits this long.
const WITHIN: Duration = Duration::from_secs(120);

/// Runs `overture ARGS`; returns the exit code and what it printed on stderr.
fn refused(o: &Overture, args: &[&str]) -> (i32, String) {
    let output = o.run(args);
    (output.status.code().unwrap_or(-1), text(&output.stderr))
}

#[test]
fn names_resolve_in_every_command_and_a_live_name_is_held_by_one_deployment() {
    let (o, file) = Overture::with_blueprint("hello.yaml", HELLO);
    let status = o.deploy_ok(&file, &["--name", "prod-web"]);
    assert_eq!(status["name"], "prod-web", "{status}");
    let first = id_of(&status);

    for given in ["prod-web", "default/prod-web"] {
        assert_eq!(id_of(&o.json(&["status", given, "--json"])), first);
        assert!(!o.events(given).is_empty());
        for args in [
            vec!["graph", given],
            vec!["logs", given, "greet"],
            vec!["verify", given],
        ] {
            let output = o.run(&args);
            assert!(
                output.status.success(),
                "{args:?}: {}",
                text(&output.stderr)
            );
        }
    }
    let listed = o.json(&["list", "--json"]);
    assert_eq!(listed[0]["name"], "prod-web", "{listed}");
    for args in [
        vec!["status", "prod-web"],
        vec!["list", "--tenant", "default"],
    ] {
        let shown = text(&o.run(&args).stdout);
        assert!(shown.contains("prod-web"), "{args:?}: {shown}");
    }

    // A second live deployment of the name: refused, naming the holder; nothing recorded.
    let (code, _, output) = o.deploy(&file, &["--name", "prod-web"]);
    let said = text(&output.stderr);
    assert_eq!(code, 2, "{said}");
    assert!(said.contains("--name") && said.contains(&first), "{said}");
    assert_eq!(o.deployment_ids(), vec![first.clone()]);

    // A name against the rule: refused before anything is recorded.
    let (code, said) = refused(
        &o,
        &["deploy", file.to_str().unwrap(), "--name", "Prod Web"],
    );
    assert_eq!(code, 2, "{said}");
    assert!(said.contains("--name"), "{said}");
    assert_eq!(o.deployment_ids(), vec![first.clone()]);

    // Another tenant has no deployment of that name.
    let (code, said) = refused(&o, &["status", "acme/prod-web"]);
    assert_eq!(code, 2, "{said}");
    assert!(
        said.contains("no live deployment named `prod-web` in tenant `acme`"),
        "{said}"
    );
    let output = o
        .command(&["status", "prod-web"])
        .env("OVERTURE_TENANT", "acme")
        .output()
        .expect("run overture");
    assert_eq!(output.status.code(), Some(2), "{}", text(&output.stderr));

    // A redeploy is a new deployment: it takes a name of its own, never the old one's.
    let redeployed = o.json(&["redeploy", "prod-web", "--name", "prod-web-2", "--json"]);
    assert_eq!(redeployed["name"], "prod-web-2");
    assert_ne!(id_of(&redeployed), first);

    // Destroyed, the deployment frees its name for the next.
    let output = o.run(&["destroy", "prod-web", "--json"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let again = id_of(&o.deploy_ok(&file, &["--name", "prod-web"]));
    assert_ne!(again, first);
    assert_eq!(id_of(&o.json(&["status", "prod-web", "--json"])), again);
    // The destroyed one is still found by its id.
    assert_eq!(id_of(&o.json(&["status", &first, "--json"])), first);
}

#[test]
fn of_two_deploys_racing_for_one_name_exactly_one_is_recorded() {
    let (o, file) = Overture::with_blueprint("hello.yaml", HELLO);
    let path = file.to_str().expect("utf-8 path");
    let racers: Vec<_> = (0..2)
        .map(|_| {
            o.command(&["deploy", path, "--name", "raced"])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("start overture deploy")
        })
        .collect();
    let mut codes: Vec<i32> = racers
        .into_iter()
        .map(|racer| {
            let output = racer.wait_with_output().expect("wait for overture deploy");
            output.status.code().unwrap_or(-1)
        })
        .collect();
    codes.sort_unstable();
    assert_eq!(codes, vec![0, 2]);
    assert_eq!(o.deployment_ids().len(), 1);
}

#[test]
fn a_running_deployment_is_cancelled_by_its_tenant_and_name() {
    let o = Overture::new();
    let file = o.blueprint(
        "slow.yaml",
        r#"
name: slow
steps:
  wait:
    run: script
    with: { command: 'sleep 600' }
"#,
    );
    let mut command = o.command(&["deploy", file.to_str().expect("utf-8 path")]);
    command.args(["--name", "slow-one"]);
    let mut deploying = Deploying::spawn(command, &["wait"]);
    let output = o.run(&["cancel", "default/slow-one"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    deploying.wait_within(WITHIN);
    let status = o.json(&["status", "slow-one", "--json"]);
    assert_eq!(status["status"], "cancelled", "{status}");
    assert_eq!(id_of(&status), deploying.id);
}

#[tokio::test(flavor = "multi_thread")]
async fn over_the_api_a_name_is_its_tenants_own_and_held_by_one_live_deployment() {
    use reqwest::StatusCode;
    use serde_json::json;

    use crate::api::{parsed, Client, Server};
    use crate::local_cloud::LocalCloud;

    let cloud = LocalCloud::up();
    let (_, token_a) = cloud.token("acme");
    let (_, token_b) = cloud.token("globex");
    let o = Overture::new();
    let server = Server::start(&o, &cloud.auth_url);
    let (a, b) = (Client::new(&token_a), Client::new(&token_b));
    let named = json!({ "blueprint": HELLO, "name": "prod-web" });

    let (status, body) = a.post(&server.at("/v1/deployments"), &named).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let id = parsed(&body)["id"].as_str().expect("an id").to_owned();
    assert_eq!(parsed(&body)["name"], "prod-web");

    // The same name again in the same tenant: refused, naming the holder; nothing recorded.
    let (status, body) = a.post(&server.at("/v1/deployments"), &named).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(body.contains(&id), "{body}");
    let (_, listed) = a.get(&server.at("/v1/deployments")).await;
    assert_eq!(
        parsed(&listed).as_array().map(Vec::len),
        Some(1),
        "{listed}"
    );

    let (status, body) = a.get(&server.at("/v1/deployments/prod-web")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(parsed(&body)["id"], id);
    // Another tenant's name is as unknown as another tenant's id; it may have its own.
    let (status, body) = b.get(&server.at("/v1/deployments/prod-web")).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let (status, body) = b.post(&server.at("/v1/deployments"), &named).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_ne!(parsed(&body)["id"], id);

    // The command line through the server takes the caller's own names.
    let mut all = vec!["--server", server.url.as_str()];
    all.extend(["status", "prod-web", "--json"]);
    let output = o
        .command(&all)
        .env("OS_TOKEN", &token_a)
        .env_remove("OVERTURE_SERVER")
        .output()
        .expect("run overture");
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(
        id_of(&serde_json::from_slice(&output.stdout).expect("JSON")),
        id
    );
}

#[test]
fn a_deploy_handed_to_the_engine_keeps_its_name_and_a_held_name_is_refused_there_too() {
    let (o, file) = Overture::with_blueprint("hello.yaml", HELLO);
    let serving = crate::support::Serving::start(&o);
    let status = o.deploy_ok(&file, &["--name", "handed"]);
    assert_eq!(status["name"], "handed", "{status}");
    let (code, _, output) = o.deploy(&file, &["--name", "handed"]);
    let said = text(&output.stderr);
    assert_eq!(code, 2, "{said}");
    assert!(said.contains(&id_of(&status)), "{said}");
    assert_eq!(o.deployment_ids().len(), 1);
    let (code, shown) = serving.stop();
    assert_eq!(code, 0, "{shown}");
}
