//! `OVERTURE_LOG`: what each handler did, for the operator who asks.

use crate::api::{Client, Server};
use crate::local_cloud::LocalCloud;
use crate::support::{text, Overture};

const SECRET: &str = "tracing-s3cr3t-value";

#[test]
fn at_info_each_handler_names_the_deployment_it_worked_on_and_no_secret() {
    let (overture, file) = Overture::with_blueprint(
        "traced.yaml",
        r#"
name: traced
secrets: [api_token]
steps:
  greet:
    run: script
    with: { command: 'test -n "{{ secrets.api_token }}" && echo said=hello >> "$OVERTURE_OUTPUTS"' }
"#,
    );
    let output = overture
        .command(&["deploy", file.to_str().expect("utf-8 path"), "--json"])
        .args(["--secret", "api_token=OVERTURE_E2E_SECRET"])
        .env("OVERTURE_E2E_SECRET", SECRET)
        .env("OVERTURE_LOG", "info")
        .output()
        .expect("run overture");
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let status: serde_json::Value = serde_json::from_slice(&output.stdout).expect("status JSON");
    let id = status["id"].as_str().expect("id");

    for span in [
        "submit{tenant=default".to_owned(),
        format!("orchestrate{{deployment={id}"),
        format!("run_attempt{{deployment={id} step=greet attempt=1"),
        format!("project{{deployment={id}"),
    ] {
        assert!(
            stderr
                .lines()
                .any(|line| line.contains(&span) && line.contains("close")),
            "no line closes a span `{span}`:\n{stderr}"
        );
    }
    assert!(
        stderr.contains(&format!("submit{{tenant=default requested_by="))
            && stderr.contains(&format!("deployment={id}}}")),
        "submit names the deployment it recorded:\n{stderr}"
    );
    assert!(
        !stderr.contains(SECRET),
        "the secret leaked into the log:\n{stderr}"
    );

    let quiet = overture.run(&["status", id]);
    assert!(
        !text(&quiet.stderr).contains("close"),
        "without OVERTURE_LOG no span is logged: {}",
        text(&quiet.stderr)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn at_info_each_api_request_names_its_route_its_tenant_and_its_status_and_no_token() {
    let cloud = LocalCloud::up();
    let (_, token) = cloud.token("acme");
    let tenant = cloud.project_id("acme");
    let o = Overture::new();
    let log = o.blueprint("serve.log", "");
    let server = Server::logging_into(&o, &cloud.auth_url, &log);
    let client = Client::new(&token);

    let (listed, _) = client.get(&server.at("/v1/deployments")).await;
    assert_eq!(listed.as_u16(), 200);
    let (unknown, _) = client
        .get(&server.at("/v1/deployments/01a22189-069a-73a2-afd3-3cd40be9fa76"))
        .await;
    assert_eq!(unknown.as_u16(), 404);
    drop(server);

    let logged = std::fs::read_to_string(&log).expect("the server's log");
    for span in [
        format!("api{{method=GET path=/v1/deployments route=/v1/deployments tenant={tenant} status=200}}"),
        format!("api{{method=GET path=/v1/deployments/01a22189-069a-73a2-afd3-3cd40be9fa76 route=/v1/deployments/{{id}} tenant={tenant} status=404}}"),
    ] {
        assert!(
            logged.lines().any(|line| line.contains(&span) && line.contains("close")),
            "no line closes a span `{span}`:\n{logged}"
        );
    }
    assert!(
        !logged.contains(&token),
        "the token leaked into the log:\n{logged}"
    );
}
