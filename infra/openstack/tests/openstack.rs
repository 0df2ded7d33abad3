//! The OpenStack client against the real local cloud (`overture_cloud`, `cloud/API.md`): tokens,
//! security groups and rules, servers and their console's host keys, the backend fault,
//! provisioning a `servers` plan twice,
//! and the engine opening and closing a bastion for itself.
//!
//! Each test starts its own cloud on a temporary folder and always brings it down: with
//! [`TestCloud::down`] at the end, and from `Drop` if the test panicked before. These need root,
//! as the cloud does (namespaces, bridges, nftables).

use std::collections::BTreeMap;
use std::net::TcpStream;
use std::time::Duration;

use overture_cloud::{CloudConfig, Running};
use overture_events::{CloudAccount, DeploymentId};
use overture_infra::session::SessionTokens;
use overture_openstack::{
    host_keys, provision, validate_token, Cloud, CloudAccess, CloudError, MadeServer, NewRule,
    NewServer, ReadConsole as _, RuleSource, SecurityGroup, CONSOLE_WAIT,
};
use overture_orchestrator::RevokeAccess;
use overture_runner::servers::{cloud_config, GroupPlan, Plan, RuleFrom, RulePlan, ServerPlan};
use overture_runner::step::SshAddress;
use overture_runner::GrantAccess;
use secrecy::{ExposeSecret, SecretString};
use serde_json::{json, Value};

/// A public key for the servers' cloud-config; nobody logs in with it here.
const PUBLIC_KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHrdGz0tk1rG1c2oF3kYQ0S9rJmWQ2YQ0oX7b0Wq1x2z test";

/// A local cloud of the test's own.
struct TestCloud {
    running: Option<Running>,
    dir: tempfile::TempDir,
    http: reqwest::Client,
}

impl TestCloud {
    async fn up() -> Self {
        let dir = tempfile::tempdir().expect("temporary directory");
        let running = overture_cloud::start(CloudConfig::new(dir.path()))
            .await
            .expect("the local cloud starts (run as root)");
        Self {
            running: Some(running),
            dir,
            http: reqwest::Client::new(),
        }
    }

    fn running(&self) -> &Running {
        self.running.as_ref().expect("the cloud is up")
    }

    fn auth_url(&self) -> String {
        self.running().auth_url().to_owned()
    }

    /// Calls the admin API.
    async fn admin(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.running().url()))
            .header("X-Admin-Token", self.running().admin_token());
        if let Some(body) = body {
            request = request.json(&body);
        }
        let answer = request.send().await.expect("the admin API answers");
        assert!(answer.status().is_success(), "{path}: {}", answer.status());
        let text = answer.text().await.expect("a body");
        serde_json::from_str(&text).unwrap_or(Value::Null)
    }

    /// A token of `project` (made if new) that expires in `seconds` (negative: already expired).
    async fn token(&self, project: &str, seconds: i64) -> SecretString {
        self.admin(
            reqwest::Method::POST,
            "/admin/projects",
            Some(json!({"name": project})),
        )
        .await;
        let made = self
            .admin(
                reqwest::Method::POST,
                &format!("/admin/projects/{project}/tokens"),
                Some(json!({"expires_in_seconds": seconds})),
            )
            .await;
        SecretString::from(made["token"].as_str().expect("a token").to_owned())
    }

    /// A client of `project` (made if new), connected with a token good for an hour, and the
    /// token.
    async fn client(&self, project: &str) -> (Cloud, SecretString) {
        let token = self.token(project, 3600).await;
        let client = Cloud::connect(&self.auth_url(), token.clone())
            .await
            .expect("connects");
        (client, token)
    }

    async fn fault(&self, fault: Value) {
        self.admin(reqwest::Method::POST, "/admin/faults", Some(fault))
            .await;
    }

    /// `GET /admin/status`'s entry for `project`.
    async fn project(&self, project: &str) -> Value {
        let status = self
            .admin(reqwest::Method::GET, "/admin/status", None)
            .await;
        status["projects"]
            .as_array()
            .and_then(|projects| projects.iter().find(|p| p["name"] == project))
            .cloned()
            .unwrap_or(Value::Null)
    }

    /// Stops the cloud and removes everything it made.
    async fn down(mut self) {
        if let Some(running) = self.running.take() {
            running.shutdown().await.expect("the cloud shuts down");
        }
    }
}

impl Drop for TestCloud {
    fn drop(&mut self) {
        // Only after a panic: dropping stops serving, then the journal undoes what it made.
        if let Some(running) = self.running.take() {
            drop(running);
            if let Err(error) = overture_cloud::clean_up(self.dir.path()) {
                eprintln!("cleaning up the test cloud failed: {error}");
            }
        }
    }
}

/// Asserts that nothing shown of `error` holds `token`.
fn assert_hidden(error: &impl std::fmt::Debug, shown: &str, token: &SecretString) {
    let debug = format!("{error:?}");
    for text in [shown, debug.as_str()] {
        assert!(
            !text.contains(token.expose_secret()),
            "the token leaked: {text}"
        );
    }
}

/// Whether an SSH server answers at `address` within two seconds.
fn ssh_answers(address: &str) -> bool {
    let Ok(socket) = address.parse() else {
        return false;
    };
    let Ok(mut stream) = TcpStream::connect_timeout(&socket, Duration::from_secs(2)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let mut banner = [0u8; 4];
    std::io::Read::read_exact(&mut stream, &mut banner).is_ok() && &banner == b"SSH-"
}

#[tokio::test(flavor = "multi_thread")]
async fn a_token_is_validated_and_a_refused_one_never_shown() {
    let cloud = TestCloud::up().await;
    let token = cloud.token("tenant-a", 3600).await;

    let info = validate_token(&cloud.auth_url(), &token)
        .await
        .expect("the token is valid");
    assert_eq!(info.project, "tenant-a");
    assert_eq!(info.user, "tenant-a");
    assert_eq!(info.account().project_id, info.project_id);
    assert!(info.expires_at > chrono::Utc::now());
    // The local cloud serves every service of its catalog at the identity URL's address.
    let identity = cloud
        .auth_url()
        .trim_start_matches("http://")
        .split('/')
        .next()
        .expect("host:port")
        .to_owned();
    assert_eq!(info.account().endpoints, [identity]);

    let expired = cloud.token("tenant-a", -60).await;
    let unknown = SecretString::from("0123456789abcdef".repeat(4));
    for refused in [&expired, &unknown] {
        let error = validate_token(&cloud.auth_url(), refused)
            .await
            .expect_err("refused");
        assert!(matches!(error, CloudError::Unauthorized(_)), "{error:?}");
        assert_hidden(&error, &error.to_string(), refused);
    }

    // A URL that does not lead to Keystone is not taken for a refused token.
    let error = validate_token(&format!("{}/nowhere", cloud.running().url()), &token)
        .await
        .expect_err("no Keystone there");
    assert!(matches!(error, CloudError::NotFound(_)), "{error:?}");
    assert!(error.to_string().contains("Keystone v3"), "{error}");

    // Nothing listens on a port just released: worth trying again later.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let error = validate_token(&format!("http://127.0.0.1:{closed}/identity/v3"), &token)
        .await
        .expect_err("nothing listens");
    assert!(error.is_backend(), "{error:?}");
    assert_hidden(&error, &error.to_string(), &token);
    cloud.down().await;
}

/// A security group made on `client`'s project.
async fn made_group(client: &Cloud, name: &str, description: &str) -> SecurityGroup {
    client
        .create_security_group(name, description)
        .await
        .expect("made")
}

/// The cloud answered that what was asked for is not there (or not the caller's to see).
#[track_caller]
fn assert_not_found<T: std::fmt::Debug>(answer: Result<T, CloudError>) {
    assert!(matches!(answer, Err(CloudError::NotFound(_))), "{answer:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn security_groups_and_rules_are_made_found_and_deleted() {
    let cloud = TestCloud::up().await;
    let (client, _) = cloud.client("tenant-a").await;

    let web = made_group(&client, "t1-web", "a test group").await;
    let bastion = made_group(&client, "t1-bastion", "").await;
    assert_eq!(
        client
            .security_groups_named("t1-web")
            .await
            .expect("listed"),
        vec![web.clone()]
    );
    assert!(client
        .security_groups_named("t1-we")
        .await
        .expect("listed")
        .is_empty());

    let from_bastion = NewRule {
        security_group_id: web.id.clone(),
        port: 22,
        from: RuleSource::Group(bastion.id.clone()),
        description: Some("test".into()),
    };
    let rule = client.create_rule(&from_bastion).await.expect("added");
    // The same rule again: Neutron's 409 names the one already there.
    assert_eq!(
        client.create_rule(&from_bastion).await.expect("found"),
        rule
    );
    let cidr = client
        .create_rule(&NewRule {
            security_group_id: web.id.clone(),
            port: 8000,
            from: RuleSource::Cidr("10.0.0.0/8".into()),
            description: None,
        })
        .await
        .expect("added");
    let rules = client.rules(&web.id).await.expect("listed");
    let ours: Vec<_> = rules.iter().filter(|r| r.direction == "ingress").collect();
    assert_eq!(ours.len(), 2, "{rules:?}");
    let added = ours.iter().find(|r| r.id == rule).expect("the first rule");
    assert_eq!(added.remote_group_id.as_deref(), Some(bastion.id.as_str()));
    assert_eq!(
        (added.port_range_min, added.port_range_max),
        (Some(22), Some(22))
    );
    assert_eq!(added.protocol.as_deref(), Some("tcp"));

    client.delete_rule(&cidr).await.expect("deleted");
    assert_not_found(client.delete_rule(&cidr).await);
    assert_eq!(
        client
            .security_group(&web.id)
            .await
            .expect("shown")
            .security_group_rules
            .len(),
        rules.len() - 1
    );

    // Another project sees none of it.
    let (other, _) = cloud.client("tenant-b").await;
    assert_not_found(other.security_group(&web.id).await);
    assert_not_found(other.delete_rule(&rule).await);

    client
        .delete_security_group(&web.id)
        .await
        .expect("deleted");
    assert_not_found(client.security_group(&web.id).await);
    cloud.down().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_is_made_found_by_its_exact_name_and_deleted() {
    let cloud = TestCloud::up().await;
    let (client, _) = cloud.client("tenant-a").await;
    let group = made_group(&client, "t2-web", "").await;
    let id = client
        .create_server(&NewServer {
            name: "t2-web-1".into(),
            user_data: cloud_config("web-1", PUBLIC_KEY),
            metadata: [("k".to_owned(), "v".to_owned())].into(),
            security_groups: vec![group.id.clone()],
            ..NewServer::default()
        })
        .await
        .expect("made");

    let mut server = client.server(&id).await.expect("shown");
    for _ in 0..100 {
        if server.is_active() || server.is_error() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        server = client.server(&id).await.expect("shown");
    }
    assert!(server.is_active(), "{server:?}");
    assert!(
        server.address().is_some_and(|a| a.starts_with("10.")),
        "{server:?}"
    );
    assert_eq!(server.metadata.get("k").map(String::as_str), Some("v"));

    // Its console shows the host key its sshd has, which the engine pins.
    let address = server.address().expect("an address").to_owned();
    let made = [MadeServer {
        name: "web-1".into(),
        id: id.clone(),
        address: address.clone(),
        port: 22,
    }];
    let mut lines = Vec::new();
    let keys = host_keys(&client, &made, CONSOLE_WAIT, &mut |line| {
        lines.push(line.to_owned())
    })
    .await
    .expect("read");
    let key_file = cloud
        .dir
        .path()
        .join("servers")
        .join(&id)
        .join("run/overture/ssh_host_ed25519_key");
    let listed = std::process::Command::new("ssh-keygen")
        .arg("-lf")
        .arg(&key_file)
        .output()
        .expect("ssh-keygen");
    let actual = String::from_utf8_lossy(&listed.stdout)
        .split_whitespace()
        .nth(1)
        .expect("a fingerprint")
        .to_owned();
    assert_eq!(keys.len(), 1, "{lines:?}");
    assert_eq!(keys[0].host, address);
    assert_eq!(keys[0].keys[0].fingerprint, actual);
    assert!(
        client
            .console_output("00000000-0000-0000-0000-000000000000")
            .await
            .expect("answered")
            .is_none(),
        "a server the cloud does not know has no console"
    );

    let found = client.servers_named("t2-web-1").await.expect("listed");
    assert_eq!(
        found.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(),
        [id.as_str()]
    );
    // `t2-web` is a prefix of the name, not the name.
    assert!(client
        .servers_named("t2-web")
        .await
        .expect("listed")
        .is_empty());

    // A group in use cannot go.
    assert!(matches!(
        client.delete_security_group(&group.id).await,
        Err(CloudError::Conflict(_))
    ));
    client.delete_server(&id).await.expect("deleted");
    assert_not_found(client.server(&id).await);
    assert_not_found(client.delete_server(&id).await);
    cloud.down().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_backend_is_a_backend_error() {
    let cloud = TestCloud::up().await;
    let (client, token) = cloud.client("tenant-a").await;
    cloud
        .fault(json!({"project": "tenant-a", "kind": "backend-unreachable", "times": 2}))
        .await;
    let error = client
        .security_groups_named("x")
        .await
        .expect_err("the backend is down");
    assert!(error.is_backend(), "{error:?}");
    assert!(
        error
            .to_string()
            .contains("The backend server is unreachable"),
        "{error}"
    );
    assert_hidden(&error, &error.to_string(), &token);
    let error = client.servers_named("x").await.expect_err("still down");
    assert!(error.is_backend(), "{error:?}");
    assert!(client.servers_named("x").await.expect("back").is_empty());
    cloud.down().await;
}

/// The plan of a bastion and a web server behind it, for deployment `deployment`.
fn plan(deployment: DeploymentId, prefix: &str) -> Plan {
    let server = |name: &str, group: &str, bastion: bool| ServerPlan {
        name: name.into(),
        cloud_name: format!("{prefix}-{name}"),
        security_groups: vec![group.into()],
        metadata: if bastion {
            [("role".to_owned(), "bastion".to_owned())].into()
        } else {
            BTreeMap::new()
        },
        user_data: cloud_config(name, PUBLIC_KEY),
        image: None,
        flavor: None,
    };
    let group = |name: &str, rules: Vec<RulePlan>| GroupPlan {
        name: name.into(),
        cloud_name: format!("{prefix}-{name}"),
        description: "test".into(),
        rules,
    };
    Plan {
        deployment: deployment.to_string(),
        security_groups: vec![
            group("bastion", vec![]),
            group(
                "web",
                vec![RulePlan {
                    port: 22,
                    from: RuleFrom::Group("bastion".into()),
                }],
            ),
        ],
        servers: vec![
            server("bastion", "bastion", true),
            server("web-1", "web", false),
        ],
        boot_wait_ms: 60_000,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_plan_made_twice_makes_everything_once_and_the_bastion_opens_for_the_engine_only() {
    let cloud = TestCloud::up().await;
    let (client, token) = cloud.client("tenant-a").await;
    let deployment = DeploymentId::from_uuid(uuid::Uuid::now_v7());
    let plan = plan(deployment, "t3");
    let mut lines = Vec::new();

    // The first attempt meets the backend down; the retry carries on.
    cloud
        .fault(json!({"project": "tenant-a", "kind": "backend-unreachable", "times": 1}))
        .await;
    let error = provision(&client, &plan, &mut |line: &str| {
        lines.push(line.to_owned())
    })
    .await
    .expect_err("the backend is down");
    assert!(error.is_backend(), "{error:?}");

    let first = provision(&client, &plan, &mut |line: &str| {
        lines.push(line.to_owned())
    })
    .await
    .expect("provisioned");
    let again = provision(&client, &plan, &mut |line: &str| {
        lines.push(line.to_owned())
    })
    .await
    .expect("provisioned again");
    assert_eq!(first, again, "the same servers and groups, found by name");
    let keys: Vec<&str> = first.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "bastion",
            "security-group-bastion",
            "security-group-web",
            "web-1"
        ]
    );
    let project = cloud.project("tenant-a").await;
    let servers = project["servers"].as_array().expect("servers");
    assert_eq!(servers.len(), 2, "{project}");
    assert!(servers.iter().all(|s| s["status"] == "ACTIVE"), "{project}");
    assert!(
        lines.iter().any(|line| line.contains("using t3-web-1")),
        "{lines:?}"
    );

    // The engine opens the bastion for its own address, and only it.
    let bastion = SshAddress::parse(&format!("{}:22", first["bastion"])).expect("an address");
    let group = first["security-group-bastion"].clone();
    assert!(
        !ssh_answers(&bastion.address),
        "the bastion admits no one yet"
    );
    let tokens = SessionTokens::new();
    tokens.remember(deployment, token.clone());
    // A second deployment of the tenant goes through the same bastion at the same time.
    let sharing = DeploymentId::from_uuid(uuid::Uuid::now_v7());
    tokens.remember(sharing, token.clone());
    let leases = std::sync::Arc::new(overture_kit::leases::MemoryLeases::new());
    let access = CloudAccess::new(std::sync::Arc::new(tokens), leases.clone());
    let info = client.info();
    let account = CloudAccount {
        auth_url: cloud.auth_url(),
        project_id: info.project_id.clone(),
        project: info.project.clone(),
        domain: "Default".into(),
        user: info.user.clone(),
        endpoints: vec![],
    };
    let granted = access
        .grant(deployment, &account, &bastion, &group)
        .await
        .expect("opened");
    let gateway = project["network"]["gateway"].as_str().expect("a gateway");
    assert_eq!(granted.source, format!("{gateway}/32"));
    assert_eq!(
        (granted.port, granted.security_group.as_str()),
        (22, group.as_str())
    );
    let rules = client.rules(&group).await.expect("listed");
    let rule = rules
        .iter()
        .find(|r| r.id == granted.rule)
        .expect("the rule");
    assert_eq!(
        rule.remote_ip_prefix.as_deref(),
        Some(granted.source.as_str())
    );
    assert!(
        rule.description
            .as_deref()
            .is_some_and(|d| d.contains("overture")),
        "{rule:?}"
    );
    let twice = access
        .grant(deployment, &account, &bastion, &group)
        .await
        .expect("opened again");
    assert_eq!(
        twice.rule, granted.rule,
        "the identical rule is found, not added"
    );
    assert!(
        ssh_answers(&bastion.address),
        "the bastion admits the engine"
    );

    // The sharing deployment leases the identical rule; the first to end keeps it for the other.
    let shared = access
        .grant(sharing, &account, &bastion, &group)
        .await
        .expect("opened for the second deployment");
    assert_eq!(shared.rule, granted.rule, "one rule, two leases");
    assert_eq!(
        access
            .revoke(sharing, &account, &shared)
            .await
            .expect("closed its lease"),
        overture_kit::leases::Revocation::KeptFor(vec![deployment])
    );
    assert!(
        ssh_answers(&bastion.address),
        "the rule stays for the deployment still holding it"
    );
    assert!(access
        .still_granted(deployment, &account, &granted)
        .await
        .expect("checked"));

    access
        .revoke(deployment, &account, &granted)
        .await
        .expect("closed");
    assert!(!access
        .still_granted(deployment, &account, &granted)
        .await
        .expect("checked"));
    access
        .revoke(deployment, &account, &granted)
        .await
        .expect("closing a closed bastion succeeds");
    assert!(client
        .rules(&group)
        .await
        .expect("listed")
        .iter()
        .all(|r| r.id != granted.rule));
    assert!(
        !ssh_answers(&bastion.address),
        "the bastion admits no one again"
    );

    // A grant arriving while the rule's last holder deletes it waits for the delete to end,
    // then makes the rule afresh: it is never handed a rule about to go.
    use overture_kit::leases::LeaseBastionRules;
    let key = overture_kit::leases::RuleKey {
        cloud: account.auth_url.clone(),
        security_group: group.clone(),
        source: granted.source.clone(),
        port: granted.port,
    };
    let last = DeploymentId::from_uuid(uuid::Uuid::now_v7());
    leases.acquire(&key, last).await.expect("leased");
    assert_eq!(
        leases.release(&key, last).await.expect("released"),
        overture_kit::leases::Release::Last
    );
    let (regranted, ()) = tokio::join!(
        access.grant(deployment, &account, &bastion, &group),
        async {
            leases.closed(&key, last).await.expect("the delete ended");
        }
    );
    let regranted = regranted.expect("granted once the delete ended");
    assert!(client
        .rules(&group)
        .await
        .expect("listed")
        .iter()
        .any(|r| r.id == regranted.rule));
    assert_eq!(
        access
            .revoke(deployment, &account, &regranted)
            .await
            .expect("closed"),
        overture_kit::leases::Revocation::Deleted
    );

    // A token of another project opens nothing of this one.
    let other = SessionTokens::new();
    other.remember(deployment, cloud.token("tenant-b", 3600).await);
    let refused = CloudAccess::new(
        std::sync::Arc::new(other),
        std::sync::Arc::new(overture_kit::leases::MemoryLeases::new()),
    )
    .grant(deployment, &account, &bastion, &group)
    .await
    .expect_err("another project's token");
    assert!(
        matches!(&refused, overture_runner::GrantError::Refused(m) if m.contains("tenant-b")),
        "{refused:?}"
    );
    cloud.down().await;
}
