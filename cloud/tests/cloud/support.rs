//! What every test of the real cloud needs: a cloud on a temporary directory that is always
//! cleaned up (also when the test fails), calls to its API, SSH keys, and reachability probes.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use base64::Engine as _;
use overture_cloud::{CloudConfig, Running};
use reqwest::Method;
use serde_json::{json, Value};
use tempfile::TempDir;
use tokio::time::Instant;

/// How long a server gets to turn ACTIVE: it takes well under a second.
const BOOT_LIMIT: Duration = Duration::from_secs(15);

/// How long a TCP connection gets before the port counts as silent (dropped). On the local
/// bridge an answer takes microseconds.
pub const SILENCE: Duration = Duration::from_millis(1000);

/// A cloud serving in this test; dropping it stops it and cleans up everything it created.
pub struct TestCloud {
    running: Option<Running>,
    dir: TempDir,
    http: reqwest::Client,
    url: String,
    admin_token: String,
    instance: String,
}

/// A project with a token.
#[derive(Debug, Clone)]
pub struct Tenant {
    pub id: String,
    pub name: String,
    pub password: String,
    pub token: String,
}

/// An answer: status, `X-Subject-Token` if any, and the JSON body (`null` when empty).
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub subject_token: Option<String>,
    pub body: Value,
}

/// A server that turned ACTIVE.
#[derive(Debug, Clone)]
pub struct Booted {
    pub id: String,
    pub address: Ipv4Addr,
    pub namespace: String,
}

/// An SSH key pair in a temporary directory.
pub struct Key {
    _dir: TempDir,
    pub private: PathBuf,
    pub public: String,
}

/// What a TCP connection attempt met.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// Connected.
    Open,
    /// Refused (a reset, or an ICMP error).
    Refused,
    /// No answer: the packets were dropped.
    Silent,
}

impl TestCloud {
    /// Starts a cloud on a fresh temporary directory.
    pub async fn start() -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let running = overture_cloud::start(CloudConfig::new(dir.path().join("cloud")))
            .await
            .expect("the cloud starts");
        Self {
            url: running.url().to_owned(),
            admin_token: running.admin_token().to_owned(),
            instance: running.info().instance.clone(),
            running: Some(running),
            dir,
            http: reqwest::Client::new(),
        }
    }

    /// The state directory.
    pub fn state_dir(&self) -> PathBuf {
        self.dir.path().join("cloud")
    }

    /// The instance id.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Shuts the cloud down through the admin API and waits until it has cleaned up.
    pub async fn shut_down(mut self) {
        let reply = self.admin(Method::POST, "/admin/shutdown", None).await;
        assert_eq!(reply.status, 200, "{reply:?}");
        let running = self.running.take().expect("running");
        tokio::time::timeout(Duration::from_secs(30), running.wait())
            .await
            .expect("the cloud stops within 30 s")
            .expect("the cloud stops cleanly");
    }

    /// Calls the API with an `X-Auth-Token` (or none).
    pub async fn call(
        &self,
        token: Option<&str>,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Reply {
        let mut request = self.http.request(method, format!("{}{path}", self.url));
        if let Some(token) = token {
            request = request.header("X-Auth-Token", token);
        }
        send(request, body).await
    }

    /// Calls the API as a project.
    pub async fn as_tenant(
        &self,
        tenant: &Tenant,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Reply {
        self.call(Some(&tenant.token), method, path, body).await
    }

    /// POSTs `body` to the API as a project.
    pub async fn post_as(&self, tenant: &Tenant, path: &str, body: Value) -> Reply {
        self.as_tenant(tenant, Method::POST, path, Some(body)).await
    }

    /// Calls the admin API.
    pub async fn admin(&self, method: Method, path: &str, body: Option<Value>) -> Reply {
        let request = self
            .http
            .request(method, format!("{}{path}", self.url))
            .header("X-Admin-Token", &self.admin_token);
        send(request, body).await
    }

    /// Keystone password authentication.
    pub async fn password_auth(&self, user: &str, password: &str, project: &str) -> Reply {
        let body = json!({"auth": {
            "identity": {"methods": ["password"], "password": {"user": {
                "name": user, "domain": {"name": "Default"}, "password": password}}},
            "scope": {"project": {"name": project, "domain": {"name": "Default"}}},
        }});
        self.call(None, Method::POST, "/identity/v3/auth/tokens", Some(body))
            .await
    }

    /// Creates a project through the admin API and gets a token by password authentication.
    pub async fn tenant(&self, name: &str) -> Tenant {
        let created = self
            .admin(Method::POST, "/admin/projects", Some(json!({"name": name})))
            .await;
        assert_eq!(created.status, 200, "{created:?}");
        let password = text(&created.body["user"]["password"]);
        let issued = self.password_auth(name, &password, name).await;
        assert_eq!(issued.status, 201, "{issued:?}");
        Tenant {
            id: text(&created.body["project"]["id"]),
            name: name.to_owned(),
            password,
            token: issued.subject_token.expect("X-Subject-Token"),
        }
    }

    /// Creates a security group; returns its id.
    pub async fn group(&self, tenant: &Tenant, name: &str) -> String {
        let reply = self
            .as_tenant(
                tenant,
                Method::POST,
                "/network/v2.0/security-groups",
                Some(json!({"security_group": {"name": name, "description": "test"}})),
            )
            .await;
        assert_eq!(reply.status, 201, "{reply:?}");
        text(&reply.body["security_group"]["id"])
    }

    /// The id of the project's `default` group.
    pub async fn default_group(&self, tenant: &Tenant) -> String {
        let reply = self
            .as_tenant(
                tenant,
                Method::GET,
                "/network/v2.0/security-groups?name=default",
                None,
            )
            .await;
        assert_eq!(reply.status, 200, "{reply:?}");
        text(&reply.body["security_groups"][0]["id"])
    }

    /// Adds an ingress TCP rule for port 22 from a prefix or from a group.
    pub async fn ssh_rule(&self, tenant: &Tenant, group: &str, from: From<'_>) -> Reply {
        let mut rule = json!({"security_group_id": group, "direction": "ingress",
            "ethertype": "IPv4", "protocol": "tcp", "port_range_min": 22, "port_range_max": 22});
        match from {
            From::Prefix(prefix) => rule["remote_ip_prefix"] = json!(prefix),
            From::Group(id) => rule["remote_group_id"] = json!(id),
        }
        self.as_tenant(
            tenant,
            Method::POST,
            "/network/v2.0/security-group-rules",
            Some(json!({"security_group_rule": rule})),
        )
        .await
    }

    /// Lets the host reach port 22 of the project's servers through its `default` group.
    pub async fn admit_ssh_from_host(&self, tenant: &Tenant) {
        let group = self.default_group(tenant).await;
        let host = format!("{}/32", self.gateway(tenant).await);
        let rule = self.ssh_rule(tenant, &group, From::Prefix(&host)).await;
        assert_eq!(rule.status, 201, "{rule:?}");
    }

    /// Injects the fault `POST /admin/faults` is given.
    pub async fn fault(&self, fault: Value) -> Reply {
        self.admin(Method::POST, "/admin/faults", Some(fault)).await
    }

    /// Clears the project's faults, which the admin API answers with 204.
    pub async fn clear_faults(&self, project: &str) {
        let cleared = self
            .admin(
                Method::DELETE,
                &format!("/admin/faults?project={project}"),
                None,
            )
            .await;
        assert_eq!(cleared.status, 204, "{cleared:?}");
    }

    /// Asks for a server; returns its id.
    pub async fn create_server(&self, tenant: &Tenant, server: Value) -> String {
        let reply = self
            .as_tenant(
                tenant,
                Method::POST,
                "/compute/v2.1/servers",
                Some(json!({ "server": server })),
            )
            .await;
        assert_eq!(reply.status, 202, "{reply:?}");
        text(&reply.body["server"]["id"])
    }

    /// Polls a server until it leaves BUILD; returns it as Nova shows it.
    pub async fn wait_built(&self, tenant: &Tenant, id: &str) -> Value {
        let deadline = Instant::now() + BOOT_LIMIT;
        loop {
            let reply = self
                .as_tenant(
                    tenant,
                    Method::GET,
                    &format!("/compute/v2.1/servers/{id}"),
                    None,
                )
                .await;
            assert_eq!(reply.status, 200, "{reply:?}");
            if reply.body["server"]["status"] != "BUILD" {
                return reply.body["server"].clone();
            }
            assert!(
                Instant::now() < deadline,
                "still BUILD after {BOOT_LIMIT:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Creates a server with `key` as root's key and waits until it is ACTIVE.
    pub async fn boot(&self, tenant: &Tenant, mut server: Value, key: &Key) -> Booted {
        server["user_data"] = json!(user_data(&[&key.public], None));
        let id = self.create_server(tenant, server).await;
        let shown = self.wait_built(tenant, &id).await;
        assert_eq!(shown["status"], "ACTIVE", "{shown}");
        let address = text(&shown["addresses"]["private"][0]["addr"])
            .parse()
            .expect("an IPv4 address");
        let namespace = self.namespace_of(&id).await;
        Booted {
            id,
            address,
            namespace,
        }
    }

    /// A server's namespace, from the admin status.
    pub async fn namespace_of(&self, server_id: &str) -> String {
        let status = self.admin(Method::GET, "/admin/status", None).await;
        for project in status.body["projects"].as_array().into_iter().flatten() {
            for server in project["servers"].as_array().into_iter().flatten() {
                if server["id"] == server_id {
                    return text(&server["namespace"]);
                }
            }
        }
        panic!("no server {server_id} in {status:?}")
    }

    /// The host's address on a project's network (`.1`).
    pub async fn gateway(&self, tenant: &Tenant) -> String {
        let status = self.admin(Method::GET, "/admin/status", None).await;
        status.body["projects"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["id"] == tenant.id.as_str())
            .map(|p| text(&p["network"]["gateway"]))
            .expect("the project in the status")
    }
}

impl Drop for TestCloud {
    fn drop(&mut self) {
        // Dropping the cloud asks it to stop and clean up; its directory stays locked until it
        // is done. Then the clean-up from the journal finds nothing left, unless the test's
        // runtime died first.
        drop(self.running.take());
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            match overture_cloud::clean_up(&self.state_dir()) {
                Err(overture_cloud::CloudError::AlreadyRunning(_))
                    if std::time::Instant::now() < deadline =>
                {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(error) => {
                    eprintln!("clean-up of the test cloud failed: {error}");
                    break;
                }
                Ok(()) => break,
            }
        }
        let left = leftovers(&self.instance);
        if !left.is_empty() {
            eprintln!("the test cloud left {left:?}");
        }
    }
}

/// Where a rule admits connections from.
pub enum From<'a> {
    /// A prefix.
    Prefix(&'a str),
    /// A group's servers.
    Group(&'a str),
}

async fn send(mut request: reqwest::RequestBuilder, body: Option<Value>) -> Reply {
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.expect("the cloud answers");
    let status = response.status().as_u16();
    let subject_token = response
        .headers()
        .get("x-subject-token")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let bytes = response.bytes().await.expect("a body");
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).expect("a JSON body")
    };
    Reply {
        status,
        subject_token,
        body,
    }
}

/// A JSON string's text.
pub fn text(value: &Value) -> String {
    value
        .as_str()
        .unwrap_or_else(|| panic!("not a string: {value}"))
        .to_owned()
}

/// A base64 cloud-config giving root these keys (and maybe a hostname).
pub fn user_data(keys: &[&str], hostname: Option<&str>) -> String {
    let mut text = String::from("#cloud-config\nssh_authorized_keys:\n");
    for key in keys {
        text.push_str(&format!("  - {key}\n"));
    }
    if let Some(hostname) = hostname {
        text.push_str(&format!("hostname: {hostname}\n"));
    }
    base64::engine::general_purpose::STANDARD.encode(text)
}

impl Key {
    /// A new Ed25519 key pair.
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let private = dir.path().join("id_ed25519");
        let made = std::process::Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-f"])
            .arg(&private)
            .status()
            .expect("ssh-keygen runs");
        assert!(made.success());
        let public = std::fs::read_to_string(private.with_extension("pub"))
            .expect("the public key")
            .trim()
            .to_owned();
        Self {
            _dir: dir,
            private,
            public,
        }
    }
}

fn ssh_options(key: &Path) -> Vec<String> {
    let mut options = vec!["-i".to_owned(), key.display().to_string()];
    for option in [
        "BatchMode=yes",
        "StrictHostKeyChecking=no",
        "UserKnownHostsFile=/dev/null",
        "ConnectTimeout=5",
        "LogLevel=ERROR",
        "IdentitiesOnly=yes",
    ] {
        options.extend(["-o".to_owned(), option.to_owned()]);
    }
    options
}

/// Runs `command` on a server as root over SSH from the host.
pub async fn ssh(key: &Key, address: Ipv4Addr, command: &str) -> Output {
    tokio::process::Command::new("ssh")
        .args(ssh_options(&key.private))
        .arg(format!("root@{address}"))
        .arg(command)
        .output()
        .await
        .expect("ssh runs")
}

/// Runs `command` on `target` over SSH through `bastion` (its sshd forwards the connection).
pub async fn ssh_through(key: &Key, bastion: Ipv4Addr, target: Ipv4Addr, command: &str) -> Output {
    let jump = format!(
        "ssh {} -W %h:%p root@{bastion}",
        ssh_options(&key.private).join(" ")
    );
    tokio::process::Command::new("ssh")
        .args(ssh_options(&key.private))
        .args(["-o", &format!("ProxyCommand={jump}")])
        .arg(format!("root@{target}"))
        .arg(command)
        .output()
        .await
        .expect("ssh runs")
}

/// A TCP connection from the host to `address:port`.
pub async fn reach_from_host(address: Ipv4Addr, port: u16) -> Reach {
    match tokio::time::timeout(SILENCE, tokio::net::TcpStream::connect((address, port))).await {
        Ok(Ok(_)) => Reach::Open,
        Ok(Err(_)) => Reach::Refused,
        Err(_) => Reach::Silent,
    }
}

/// A TCP connection from inside a namespace (another server) to `address:port`.
pub async fn reach_from_namespace(namespace: &str, address: Ipv4Addr, port: u16) -> Reach {
    const PROBE: &str = "import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3]))
    print('open')
except (socket.timeout, TimeoutError):
    print('silent')
except OSError:
    print('refused')
";
    let output = tokio::process::Command::new("ip")
        .args(["netns", "exec", namespace, "/usr/bin/python3", "-c", PROBE])
        .arg(address.to_string())
        .arg(port.to_string())
        .arg(SILENCE.as_secs_f64().to_string())
        .output()
        .await
        .expect("ip netns exec runs");
    match String::from_utf8_lossy(&output.stdout).trim() {
        "open" => Reach::Open,
        "silent" => Reach::Silent,
        "refused" => Reach::Refused,
        other => panic!(
            "the probe printed {other:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        ),
    }
}

/// The pids of every process in a namespace (none once it is gone).
pub fn pids_in(namespace: &str) -> Vec<u32> {
    let output = std::process::Command::new("ip")
        .args(["netns", "pids", namespace])
        .output()
        .expect("ip runs");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| line.trim().parse().ok())
        .collect()
}

/// Namespaces and links named by the instance that still exist.
pub fn leftovers(instance: &str) -> Vec<String> {
    let prefix = format!("ovc{instance}");
    let namespaces = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip runs");
    let links = std::process::Command::new("ip")
        .args(["-o", "link", "show"])
        .output()
        .expect("ip runs");
    let namespaces = String::from_utf8_lossy(&namespaces.stdout).into_owned();
    let links = String::from_utf8_lossy(&links.stdout).into_owned();
    namespaces
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .chain(
            links
                .lines()
                .filter_map(|line| line.split(':').nth(1))
                .map(|name| name.trim().split('@').next().unwrap_or_default()),
        )
        .filter(|name| name.starts_with(&prefix))
        .map(str::to_owned)
        .collect()
}

/// Whether a process runs (and is not a zombie).
pub fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let state = stat[stat.rfind(')')? + 1..]
                .split_whitespace()
                .next()?
                .to_owned();
            Some(state != "Z")
        })
        .unwrap_or(false)
}
