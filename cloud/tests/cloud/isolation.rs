//! Projects are isolated: another project's servers, groups and rules answer 404 as if they did
//! not exist, and naming another project explicitly answers 403.

use reqwest::Method;
use serde_json::json;

use crate::support::{text, From, TestCloud};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_project_cannot_see_or_touch_another_projects_resources() {
    let cloud = TestCloud::start().await;
    let a = cloud.tenant("tenant-a").await;
    let b = cloud.tenant("tenant-b").await;
    let web = cloud.group(&a, "web").await;
    let rule = cloud.ssh_rule(&a, &web, From::Prefix("10.1.2.1/32")).await;
    assert_eq!(rule.status, 201, "{rule:?}");
    let rule = text(&rule.body["security_group_rule"]["id"]);
    let server = cloud
        .create_server(
            &a,
            json!({"name": "web-1", "security_groups": [{"name": "web"}]}),
        )
        .await;

    // Another project's resources do not exist for B.
    let not_found = [
        (Method::GET, format!("/compute/v2.1/servers/{server}")),
        (Method::DELETE, format!("/compute/v2.1/servers/{server}")),
        (Method::GET, format!("/network/v2.0/security-groups/{web}")),
        (
            Method::DELETE,
            format!("/network/v2.0/security-groups/{web}"),
        ),
        (
            Method::GET,
            format!("/network/v2.0/security-group-rules/{rule}"),
        ),
        (
            Method::DELETE,
            format!("/network/v2.0/security-group-rules/{rule}"),
        ),
    ];
    for (method, path) in not_found {
        let reply = cloud.as_tenant(&b, method.clone(), &path, None).await;
        assert_eq!(reply.status, 404, "{method} {path}: {reply:?}");
    }
    let shown = cloud
        .as_tenant(
            &b,
            Method::GET,
            &format!("/compute/v2.1/servers/{server}"),
            None,
        )
        .await;
    assert_eq!(
        shown.body,
        json!({"itemNotFound": {"code": 404, "message": format!("Instance {server} could not be found.")}})
    );
    let added = cloud.ssh_rule(&b, &web, From::Prefix("10.9.9.9/32")).await;
    assert_eq!(added.status, 404, "{added:?}");
    assert_eq!(added.body["NeutronError"]["type"], "SecurityGroupNotFound");
    let b_default = cloud.default_group(&b).await;
    let remote = cloud.ssh_rule(&b, &b_default, From::Group(&web)).await;
    assert_eq!(remote.status, 404, "{remote:?}");
    let borrowed = cloud
        .post_as(
            &b,
            "/compute/v2.1/servers",
            json!({"server": {"name": "x", "security_groups": [{"name": web}]}}),
        )
        .await;
    assert_eq!(borrowed.status, 400, "{borrowed:?}");
    for (path, key) in [
        ("/compute/v2.1/servers/detail", "servers"),
        ("/compute/v2.1/servers", "servers"),
        ("/network/v2.0/security-group-rules", "security_group_rules"),
    ] {
        let listed = cloud.as_tenant(&b, Method::GET, path, None).await;
        assert_eq!(listed.body[key], json!([]), "{path}: {listed:?}");
    }
    let groups = cloud
        .as_tenant(&b, Method::GET, "/network/v2.0/security-groups", None)
        .await;
    assert_eq!(
        groups.body["security_groups"].as_array().map(Vec::len),
        Some(1)
    );

    // Naming another project is forbidden.
    let foreign_group = cloud
        .post_as(
            &b,
            "/network/v2.0/security-groups",
            json!({"security_group": {"name": "x", "project_id": a.id}}),
        )
        .await;
    assert_eq!(foreign_group.status, 403, "{foreign_group:?}");
    let foreign_rule = cloud
        .post_as(
            &b,
            "/network/v2.0/security-group-rules",
            json!({"security_group_rule": {"security_group_id": b_default,
                "direction": "ingress", "tenant_id": a.id}}),
        )
        .await;
    assert_eq!(foreign_rule.status, 403, "{foreign_rule:?}");
    for path in [
        format!("/compute/v2.1/servers?project_id={}", a.id),
        format!("/network/v2.0/security-groups?tenant_id={}", a.id),
    ] {
        let listed = cloud.as_tenant(&b, Method::GET, &path, None).await;
        assert_eq!(listed.status, 403, "{path}: {listed:?}");
    }

    // A's resources are untouched.
    for path in [
        format!("/compute/v2.1/servers/{server}"),
        format!("/network/v2.0/security-groups/{web}"),
        format!("/network/v2.0/security-group-rules/{rule}"),
    ] {
        assert_eq!(
            cloud.as_tenant(&a, Method::GET, &path, None).await.status,
            200,
            "{path}"
        );
    }
}
