//! Keystone: issuing, validating, revoking and expiring tokens; 401 without a valid one; projects
//! of one name in two domains, and a project deleted and made again.

use reqwest::Method;
use serde_json::json;

use crate::support::{text, TestCloud};

fn unauthorized() -> serde_json::Value {
    json!({"error": {"code": 401, "title": "Unauthorized", "message": "The request you have made requires authentication."}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_is_issued_validated_and_revoked() {
    let cloud = TestCloud::start().await;
    let tenant = cloud.tenant("tenant-a").await;
    assert_eq!(tenant.token.len(), 64);
    assert!(tenant.token.chars().all(|c| c.is_ascii_hexdigit()));

    let issued = cloud
        .password_auth(&tenant.name, &tenant.password, &tenant.name)
        .await;
    assert_eq!(issued.status, 201);
    let token = &issued.body["token"];
    assert_eq!(token["project"]["id"], tenant.id.as_str());
    assert_eq!(token["project"]["name"], "tenant-a");
    assert_eq!(token["user"]["name"], "tenant-a");
    assert_eq!(token["methods"], json!(["password"]));
    assert!(text(&token["expires_at"]).ends_with('Z'));
    let catalog = token["catalog"].as_array().expect("a catalog");
    let url_of = |kind: &str| {
        catalog
            .iter()
            .find(|s| s["type"] == kind)
            .map(|s| text(&s["endpoints"][0]["url"]))
            .expect("the service in the catalog")
    };
    assert_eq!(url_of("identity"), format!("{}/identity/v3", cloud.url()));
    assert_eq!(url_of("compute"), format!("{}/compute/v2.1", cloud.url()));
    assert_eq!(url_of("network"), format!("{}/network", cloud.url()));
    let second = issued.subject_token.expect("a second token");

    // A token validates itself, and another token of its project.
    let validate = |auth: String, subject: String| {
        let cloud = &cloud;
        async move {
            let request = reqwest::Client::new()
                .request(
                    Method::GET,
                    format!("{}/identity/v3/auth/tokens", cloud.url()),
                )
                .header("X-Auth-Token", auth)
                .header("X-Subject-Token", subject.clone());
            let response = request.send().await.expect("an answer");
            let status = response.status().as_u16();
            let echoed = response
                .headers()
                .get("x-subject-token")
                .map(|v| v.to_str().unwrap_or_default().to_owned());
            let body = response.text().await.unwrap_or_default();
            (status, echoed, body)
        }
    };
    let (status, echoed, _) = validate(tenant.token.clone(), tenant.token.clone()).await;
    assert_eq!(
        (status, echoed.as_deref()),
        (200, Some(tenant.token.as_str()))
    );
    assert_eq!(validate(tenant.token.clone(), second.clone()).await.0, 200);

    // Revoked: it is refused as a caller, and not found as a subject.
    let revoked = reqwest::Client::new()
        .delete(format!("{}/identity/v3/auth/tokens", cloud.url()))
        .header("X-Auth-Token", &second)
        .header("X-Subject-Token", &second)
        .send()
        .await
        .expect("an answer");
    assert_eq!(revoked.status().as_u16(), 204);
    let (status, _, body) = validate(second.clone(), tenant.token.clone()).await;
    assert_eq!(status, 401);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&body).ok(),
        Some(unauthorized())
    );
    let (status, _, body) = validate(tenant.token.clone(), second.clone()).await;
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("Could not find token"), "{body}");
    assert!(
        !body.contains(&second),
        "the answer echoes the token: {body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_credentials_missing_expired_or_unknown_tokens_answer_401() {
    let cloud = TestCloud::start().await;
    let tenant = cloud.tenant("tenant-a").await;
    let other = cloud.tenant("tenant-b").await;

    for (user, password, project) in [
        ("tenant-a", "wrong", "tenant-a"),
        ("nobody", tenant.password.as_str(), "tenant-a"),
        ("tenant-a", tenant.password.as_str(), "tenant-b"),
    ] {
        let refused = cloud.password_auth(user, password, project).await;
        assert_eq!(refused.status, 401, "{user}/{project}: {refused:?}");
        assert!(!refused.body.to_string().contains(&tenant.password));
    }

    let expired = cloud
        .admin(
            Method::POST,
            "/admin/projects/tenant-a/tokens",
            Some(json!({"expires_in_seconds": -1})),
        )
        .await;
    assert_eq!(expired.status, 201, "{expired:?}");
    let expired = text(&expired.body["token"]);
    let fresh = cloud
        .admin(
            Method::POST,
            "/admin/projects/tenant-a/tokens",
            Some(json!({"expires_in_seconds": 60})),
        )
        .await;
    let fresh = text(&fresh.body["token"]);

    for token in [None, Some("not-a-token"), Some(expired.as_str())] {
        for path in [
            "/compute/v2.1/servers",
            "/network/v2.0/security-groups",
            "/identity/v3/auth/tokens",
        ] {
            let reply = cloud.call(token, Method::GET, path, None).await;
            assert_eq!(reply.status, 401, "{path} with {token:?}: {reply:?}");
            assert_eq!(reply.body, unauthorized());
        }
    }
    let listed = cloud
        .call(Some(&fresh), Method::GET, "/compute/v2.1/servers", None)
        .await;
    assert_eq!(listed.status, 200, "{listed:?}");
    let elsewhere = cloud
        .call(
            Some(&other.token),
            Method::GET,
            "/compute/v2.1/servers",
            None,
        )
        .await;
    assert_eq!(elsewhere.body, json!({"servers": []}));

    // The admin API takes only its own token.
    let refused = cloud
        .call(Some(&tenant.token), Method::GET, "/admin/status", None)
        .await;
    assert_eq!(refused.status, 401);
}

/// Password authentication of user and project `name`, both in the domain `domain`.
fn sign_in(name: &str, domain: &str, password: &str) -> serde_json::Value {
    json!({"auth": {
        "identity": {"methods": ["password"], "password": {"user": {
            "name": name, "domain": {"name": domain}, "password": password}}},
        "scope": {"project": {"name": name, "domain": {"name": domain}}},
    }})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_domains_each_have_a_project_of_one_name_and_a_deleted_project_is_made_anew() {
    let cloud = TestCloud::start().await;
    let create = |domain: &'static str| {
        let cloud = &cloud;
        async move {
            let created = cloud
                .admin(
                    Method::POST,
                    "/admin/projects",
                    Some(json!({"name": "acme", "domain": domain})),
                )
                .await;
            assert_eq!(created.status, 200, "{created:?}");
            created.body
        }
    };
    let ours = create("Default").await;
    let theirs = create("Other").await;
    assert_ne!(ours["project"]["id"], theirs["project"]["id"]);
    assert_eq!(
        ours["project"]["domain"],
        json!({"id": "default", "name": "Default"})
    );
    assert_eq!(theirs["project"]["domain"]["name"], "Other");
    let issue = |domain: &'static str, password: String| {
        let cloud = &cloud;
        async move {
            cloud
                .call(
                    None,
                    Method::POST,
                    "/identity/v3/auth/tokens",
                    Some(sign_in("acme", domain, &password)),
                )
                .await
        }
    };

    // Each user signs in to its own project only; the token says the project's domain.
    let issued = issue("Other", text(&theirs["user"]["password"])).await;
    assert_eq!(issued.status, 201, "{issued:?}");
    assert_eq!(
        issued.body["token"]["project"]["id"],
        theirs["project"]["id"]
    );
    assert_eq!(
        issued.body["token"]["project"]["domain"],
        theirs["project"]["domain"]
    );
    assert_eq!(
        issued.body["token"]["user"]["domain"],
        theirs["project"]["domain"]
    );
    let refused = issue("Other", text(&ours["user"]["password"])).await;
    assert_eq!(refused.status, 401, "{refused:?}");
    let token = cloud
        .admin(
            Method::POST,
            "/admin/projects/acme/tokens",
            Some(json!({"domain": "Other"})),
        )
        .await;
    assert_eq!(token.status, 201, "{token:?}");
    let token = text(&token.body["token"]);
    let status = cloud.admin(Method::GET, "/admin/status", None).await;
    let domains: Vec<String> = status.body["projects"]
        .as_array()
        .expect("projects")
        .iter()
        .map(|p| text(&p["domain"]["name"]))
        .collect();
    assert_eq!(domains, ["Default", "Other"]);

    // Deleted: its tokens and password stop working; made again, it is another project.
    let deleted = cloud
        .admin(Method::DELETE, "/admin/projects/acme?domain=Other", None)
        .await;
    assert_eq!(deleted.status, 204, "{deleted:?}");
    let gone = cloud
        .call(Some(&token), Method::GET, "/compute/v2.1/servers", None)
        .await;
    assert_eq!(gone.status, 401, "{gone:?}");
    let again = cloud
        .admin(Method::DELETE, "/admin/projects/acme?domain=Other", None)
        .await;
    assert_eq!(again.status, 404, "{again:?}");
    let anew = create("Other").await;
    assert_ne!(anew["project"]["id"], theirs["project"]["id"]);
    assert_eq!(
        issue("Other", text(&theirs["user"]["password"]))
            .await
            .status,
        401,
        "the old password"
    );
    assert_eq!(
        issue("Other", text(&anew["user"]["password"])).await.status,
        201
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_project_with_servers_is_not_deleted() {
    let cloud = TestCloud::start().await;
    let tenant = cloud.tenant("tenant-a").await;
    let server = cloud.create_server(&tenant, json!({"name": "web-1"})).await;
    let refused = cloud
        .admin(Method::DELETE, "/admin/projects/tenant-a", None)
        .await;
    assert_eq!(refused.status, 409, "{refused:?}");
    assert!(text(&refused.body["error"]["message"]).contains("delete them first"));
    let listed = cloud
        .as_tenant(&tenant, Method::GET, "/compute/v2.1/servers", None)
        .await;
    assert_eq!(listed.body["servers"][0]["id"], server.as_str());
}
