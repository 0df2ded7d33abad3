//! `overture --server URL`: the read commands through the HTTP API of a real `overture serve`,
//! as the tenant of a local cloud's token. Tenant A's commands print exactly what the same
//! commands print on the server's data directory, and end with the same codes; tenant B finds
//! none of A's deployments. A failed deployment is redriven over HTTP by its tenant only.

use std::process::Output;

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::api::{code, parsed, streamed_all, Client, Server};
use crate::local_cloud::LocalCloud;
use crate::support::{files_containing, text, Overture};

const SECRET: &str = "client-s3cr3t-never-shown";

/// Retries `flaky` once, so the timeline holds a retry, a give-up wording and two attempts.
const BLUEPRINT: &str = r#"
name: read-remotely
secrets: [password]
steps:
  first:
    run: script
    with: { command: 'echo "password={{ secrets.password }}"; echo first done' }
  flaky:
    run: script
    needs: [first]
    retry: { step-failed: { times: 1 } }
    with: { command: 'echo "attempt output"; exit 1' }
"#;

/// Fails unless its key opens (starts with `open-`): failed with one key, redriven with another.
const GATED: &str = r#"
name: gated-remotely
secrets: [key]
steps:
  stamp:
    run: script
    with: { command: 'echo stamped' }
  check:
    run: script
    needs: [stamp]
    with:
      command: |
        case "{{ secrets.key }}" in
          open-*) echo "key accepted" ;;
          *) echo "key refused" >&2; exit 1 ;;
        esac
"#;

const WRONG_KEY: &str = "shut-71c0-first-key";
const RIGHT_KEY: &str = "open-5d3e-second-key-never-shown";

/// `overture --server URL ARGS` with `token` in OS_TOKEN.
fn remotely(o: &Overture, server: &Server, token: &str, args: &[&str]) -> Output {
    let mut all = vec!["--server", server.url.as_str()];
    all.extend(args);
    o.command(&all)
        .env("OS_TOKEN", token)
        .env_remove("OVERTURE_SERVER")
        .output()
        .expect("run overture")
}

/// What a run shows: its exit code, stdout and stderr.
fn shown(output: &Output) -> (i32, String, String) {
    (
        output.status.code().unwrap_or(-1),
        text(&output.stdout),
        text(&output.stderr),
    )
}

/// Deploys `blueprint` over HTTP as `client` and follows it to its end; returns its id.
async fn deployed(client: &Client, server: &Server, blueprint: &str, secrets: Value) -> String {
    let (status, body) = client
        .post(
            &server.at("/v1/deployments"),
            &json!({"blueprint": blueprint, "secrets": secrets}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let id = parsed(&body)["id"].as_str().expect("an id").to_owned();
    streamed_all(client, server, &id).await;
    id
}

#[tokio::test(flavor = "multi_thread")]
async fn reads_through_the_server_print_what_they_print_on_its_data_directory_per_tenant() {
    let cloud = LocalCloud::up();
    let (token_file_a, token_a) = cloud.token("acme");
    let (_, token_b) = cloud.token("globex");
    // Tenants are project ids (docs/security/tenant-ids.md).
    let id_of = |name: &str| {
        cloud.project(name)["id"]
            .as_str()
            .expect("an id")
            .to_owned()
    };
    let (acme, globex) = (id_of("acme"), id_of("globex"));
    let o = Overture::new();
    let server = Server::start(&o, &cloud.auth_url);
    let a = Client::new(&token_a);
    let id = deployed(&a, &server, BLUEPRINT, json!({"password": SECRET})).await;

    let id = id.as_str();
    let reads: Vec<Vec<&str>> = vec![
        vec!["status", id],
        vec!["status", id, "--json"],
        vec!["status", id, "--at", "0"],
        vec!["status", id, "--at", "0", "--json"],
        vec!["list"],
        vec!["list", "--json"],
        vec!["list", "--status", "failed", "--json"],
        vec!["list", "--status", "running"],
        vec!["list", "--tenant", acme.as_str(), "--json"],
        vec!["events", id],
        vec!["events", id, "--json"],
        vec!["events", id, "--step", "flaky"],
        vec![
            "events",
            id,
            "--type",
            "StepAttemptFailed,StepFailed",
            "--json",
        ],
        vec!["events", id, "--since", "3"],
        vec!["events", id, "--step", "nowhere"],
        vec!["logs", id, "first"],
        vec!["logs", id, "flaky", "--attempt", "1"],
        vec!["logs", id, "flaky"],
        vec!["logs", id, "flaky", "--attempt", "9"],
        vec!["logs", id, "nowhere"],
        vec!["grants"],
        vec!["grants", "--json"],
        vec!["tenants"],
        vec!["tenants", "--json"],
        vec!["graph", id],
    ];
    for args in &reads {
        let here = shown(&o.run(args));
        let there = shown(&remotely(&o, &server, &token_a, args));
        assert_eq!(
            (there.0, &there.1),
            (here.0, &here.1),
            "overture {args:?}: through the server, then on the data directory; stderr:\n{}\n{}",
            there.2,
            here.2
        );
        let refused = args.contains(&"nowhere") || args.contains(&"9");
        assert_eq!(
            here.0,
            if refused { 2 } else { 0 },
            "overture {args:?}: {}",
            here.2
        );
        if !refused {
            assert!(!here.1.is_empty(), "overture {args:?} prints something");
            assert_eq!(there.2, here.2, "overture {args:?}: what it says on stderr");
        }
    }
    // Read with the token in a file, too.
    let with_file = o
        .command(&["--server", &server.url, "status", id, "--json"])
        .arg("--token-file")
        .arg(&token_file_a)
        .env_remove("OS_TOKEN")
        .output()
        .expect("run overture");
    assert_eq!(shown(&with_file), shown(&o.run(&["status", id, "--json"])));

    // Tenant B: A's deployment does not exist, as an unknown one does not on the data directory.
    let unknown = shown(&o.run(&["status", "0192d6c4-0000-7000-8000-000000000000"]));
    assert_eq!(unknown.0, 2, "{}", unknown.2);
    for args in [
        vec!["status", id],
        vec!["status", id, "--at", "0"],
        vec!["events", id],
        vec!["events", id, "--json"],
        vec!["logs", id, "first"],
        vec!["graph", id],
        vec!["cancel", id],
        vec!["redrive", id],
    ] {
        let (code, stdout, stderr) = shown(&remotely(&o, &server, &token_b, &args));
        assert_eq!(code, unknown.0, "{args:?}: {stderr}");
        assert!(stdout.is_empty(), "{args:?}: {stdout}");
        assert!(
            stderr.contains(&format!("no deployment {id}")),
            "{args:?}: {stderr}"
        );
    }
    for (args, expected) in [
        (vec!["list", "--json"], "[]\n"),
        (vec!["grants", "--json"], "[]\n"),
    ] {
        let (code, stdout, stderr) = shown(&remotely(&o, &server, &token_b, &args));
        assert_eq!((code, stdout.as_str()), (0, expected), "{args:?}: {stderr}");
    }
    let (code, stdout, _) = shown(&remotely(&o, &server, &token_b, &["list"]));
    assert_eq!(
        (code, stdout.lines().count()),
        (0, 1),
        "a header only: {stdout}"
    );
    let (code, stdout, _) = shown(&remotely(&o, &server, &token_b, &["tenants", "--json"]));
    let tenants: Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(code, 0);
    assert_eq!(
        tenants
            .as_array()
            .expect("a list")
            .iter()
            .map(|t| (t["tenant"].clone(), t["total"].clone()))
            .collect::<Vec<_>>(),
        [(json!(globex), json!(0))],
        "only the caller's tenant"
    );

    // A's cancel of its ended deployment is refused as on the data directory.
    let (code, _, stderr) = shown(&remotely(&o, &server, &token_a, &["cancel", id]));
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains(&format!(
            "deployment {id} has already ended (failed); there is nothing to cancel"
        )),
        "{stderr}"
    );

    // Refused, with nothing done: a bad token, no token, commands the API does not carry out.
    let (code, _, stderr) = shown(&remotely(&o, &server, "gAAAAA-not-a-token", &["list"]));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--server"), "{stderr}");
    let no_token = o
        .command(&["--server", &server.url, "list"])
        .env_remove("OS_TOKEN")
        .output()
        .expect("run overture");
    assert_eq!(shown(&no_token).0, 2, "{}", shown(&no_token).2);
    // Refused before anything is sent: the token would cross the network in clear text.
    let far = o
        .command(&["--server", "http://192.0.2.1:8080", "list"])
        .env("OS_TOKEN", &token_a)
        .output()
        .expect("run overture");
    let (code, _, stderr) = shown(&far);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("https://"), "{stderr}");
    let blueprint = o.blueprint("read-remotely.yaml", BLUEPRINT);
    let blueprint = blueprint.to_str().expect("utf-8 path");
    for args in [
        vec!["deploy", blueprint],
        vec!["export"],
        vec!["replay"],
        vec!["logs", id, "first", "--follow"],
        vec!["--backend", "aws", "list"],
    ] {
        let (code, _, stderr) = shown(&remotely(&o, &server, &token_a, &args));
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(stderr.contains("--server"), "{args:?}: {stderr}");
    }
    assert_eq!(o.deployment_ids(), [id.to_owned()], "nothing else recorded");

    // The secret: in no output of any of these reads.
    for args in &reads {
        let (_, stdout, stderr) = shown(&remotely(&o, &server, &token_a, args));
        assert!(
            !stdout.contains(SECRET) && !stderr.contains(SECRET),
            "{args:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_deployment_is_redriven_over_http_by_its_tenant_only() {
    let cloud = LocalCloud::up();
    let (_, token_a) = cloud.token("acme");
    let (_, token_b) = cloud.token("globex");
    let o = Overture::new();
    let server = Server::start(&o, &cloud.auth_url);
    let (a, b) = (Client::new(&token_a), Client::new(&token_b));
    let id = deployed(&a, &server, GATED, json!({"key": WRONG_KEY})).await;
    let redrive = server.at(&format!("/v1/deployments/{id}/redrive"));
    let (_, body) = a.get(&server.at(&format!("/v1/deployments/{id}"))).await;
    assert_eq!(parsed(&body)["status"], "failed", "{body}");

    // Another tenant's: not found, and nothing recorded.
    let before = o.events(&id).len();
    let (status, body) = b
        .post(&redrive, &json!({"secrets": {"key": RIGHT_KEY}}))
        .await;
    assert_eq!(
        (status, code(&body).as_str()),
        (StatusCode::NOT_FOUND, "not_found"),
        "{body}"
    );
    // Without the secret it needs: refused, nothing recorded.
    let (status, body) = a.post(&redrive, &json!({})).await;
    assert_eq!(
        (status, code(&body).as_str()),
        (StatusCode::BAD_REQUEST, "invalid"),
        "{body}"
    );
    assert_eq!(o.events(&id).len(), before, "nothing recorded");

    // Its tenant's, with the right key: carried on to success, `stamp` not run again.
    let (status, body) = a
        .post(&redrive, &json!({"secrets": {"key": RIGHT_KEY}}))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(parsed(&body)["id"], id.as_str(), "{body}");
    let streamed = streamed_all(&a, &server, &id).await;
    assert_eq!(
        streamed.last().map(|(_, event, _)| event.as_str()),
        Some("DeploymentSucceeded")
    );
    let (_, body) = a.get(&server.at(&format!("/v1/deployments/{id}"))).await;
    let view = parsed(&body);
    assert_eq!(view["status"], "succeeded", "{body}");
    assert_eq!(view["steps"]["stamp"]["attempts"], 1, "{body}");
    assert_eq!(view["steps"]["check"]["attempts"], 2, "{body}");

    // Succeeded: nothing left to redrive, over HTTP or through the command.
    let (status, body) = a.post(&redrive, &json!({})).await;
    assert_eq!(
        (status, code(&body).as_str()),
        (StatusCode::CONFLICT, "conflict"),
        "{body}"
    );
    let (code, _, stderr) = shown(&remotely(&o, &server, &token_a, &["redrive", &id]));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("nothing is left to redrive"), "{stderr}");

    // The timeline of the redriven deployment reads the same through the server.
    let here = shown(&o.run(&["events", &id]));
    let there = shown(&remotely(&o, &server, &token_a, &["events", &id]));
    assert_eq!((there.0, there.1), (here.0, here.1));

    assert_eq!(
        files_containing(&o.data_dir(), RIGHT_KEY.as_bytes()),
        Vec::<String>::new()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_redrive_command_goes_through_the_server_with_the_secrets_given_again() {
    let cloud = LocalCloud::up();
    let (_, token) = cloud.token("acme");
    let o = Overture::new();
    let server = Server::start(&o, &cloud.auth_url);
    let a = Client::new(&token);
    let id = deployed(&a, &server, GATED, json!({"key": WRONG_KEY})).await;

    let output = o
        .command(&["--server", &server.url, "redrive", &id, "--json"])
        .args(["--secret", "key=OVERTURE_E2E_KEY"])
        .env("OVERTURE_E2E_KEY", RIGHT_KEY)
        .env("OS_TOKEN", &token)
        .output()
        .expect("run overture");
    let (code, stdout, stderr) = shown(&output);
    assert_eq!(code, 0, "{stderr}");
    let answered: Value = serde_json::from_str(&stdout).expect("the status object");
    assert_eq!(answered["id"], id.as_str());
    assert!(!stdout.contains(RIGHT_KEY) && !stderr.contains(RIGHT_KEY));
    streamed_all(&a, &server, &id).await;
    let status = o.json(&["status", &id, "--json"]);
    assert_eq!(status["status"], "succeeded", "{status}");
}
