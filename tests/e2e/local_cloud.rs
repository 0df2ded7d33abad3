//! A local cloud of this test's own (`overture cloud up` on a temporary folder), brought down
//! when dropped, and what the tests read of it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::support::text;

/// A running local cloud; `overture cloud down` removes everything it made when dropped.
pub struct LocalCloud {
    dir: tempfile::TempDir,
    /// Its identity URL (`OS_AUTH_URL`).
    pub auth_url: String,
}

impl LocalCloud {
    /// Brings a new cloud up and waits until it answers.
    pub fn up() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut cloud = Self {
            dir,
            auth_url: String::new(),
        };
        let output = cloud.cli(&["up"]);
        assert!(
            output.status.success(),
            "cloud up: {}",
            text(&output.stderr)
        );
        let described: Value = serde_json::from_slice(
            &std::fs::read(cloud.dir.path().join("cloud.json")).expect("cloud.json"),
        )
        .expect("cloud.json is JSON");
        cloud.auth_url = described["auth_url"].as_str().expect("auth_url").to_owned();
        cloud
    }

    /// Runs `overture cloud ARGS --dir DIR`.
    pub fn cli(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_overture"))
            .arg("cloud")
            .args(args)
            .arg("--dir")
            .arg(self.dir.path())
            .output()
            .expect("run overture cloud")
    }

    /// A token for `project` (made if new), written to a file; returns the file and the token.
    pub fn token(&self, project: &str) -> (PathBuf, String) {
        self.token_with(project, &[])
    }

    /// A token for `project` of the Keystone domain `domain` (both made if new).
    pub fn token_in(&self, project: &str, domain: &str) -> (PathBuf, String) {
        self.token_with(project, &["--domain", domain])
    }

    /// Deletes `project` of `domain` (`overture cloud delete-project`): its tokens stop working
    /// and its name may be taken again by a new project.
    pub fn delete_project(&self, project: &str, domain: &str) {
        let output = self.cli(&["delete-project", "--project", project, "--domain", domain]);
        assert!(
            output.status.success(),
            "cloud delete-project: {}",
            text(&output.stderr)
        );
    }

    /// A token for `project` that has already expired.
    pub fn expired_token(&self, project: &str) -> PathBuf {
        self.token_with(project, &["--expires-in", "-60"]).0
    }

    fn token_with(&self, project: &str, extra: &[&str]) -> (PathBuf, String) {
        let file = self
            .dir
            .path()
            .join(format!("{project}-{}.token", uuid::Uuid::new_v4().simple()));
        let mut args = vec!["token", "--project", project, "--out"];
        let path = file.to_str().expect("utf-8 path").to_owned();
        args.push(&path);
        args.extend_from_slice(extra);
        let output = self.cli(&args);
        assert!(
            output.status.success(),
            "cloud token: {}",
            text(&output.stderr)
        );
        let token = std::fs::read_to_string(&file)
            .expect("token file")
            .trim()
            .to_owned();
        (file, token)
    }

    /// Injects a fault: `overture cloud fault --project P ARGS`.
    pub fn fault(&self, project: &str, args: &[&str]) {
        let mut all = vec!["fault", "--project", project];
        all.extend_from_slice(args);
        let output = self.cli(&all);
        assert!(
            output.status.success(),
            "cloud fault: {}",
            text(&output.stderr)
        );
    }

    /// `overture cloud status --json`.
    pub fn status(&self) -> Value {
        let output = self.cli(&["status", "--json"]);
        assert!(
            output.status.success(),
            "cloud status: {}",
            text(&output.stderr)
        );
        serde_json::from_slice(&output.stdout).expect("status JSON")
    }

    /// The project named `name` (of the `Default` domain), as the status shows it.
    pub fn project(&self, name: &str) -> Value {
        self.project_in(name, "Default")
    }

    /// The id of the project named `name` (of the `Default` domain): over the API, the tenant of
    /// a token scoped to it.
    pub fn project_id(&self, name: &str) -> String {
        self.project(name)["id"]
            .as_str()
            .unwrap_or_else(|| panic!("{name}'s id"))
            .to_owned()
    }

    /// The project named `name` of the Keystone domain `domain`, as the status shows it.
    pub fn project_in(&self, name: &str, domain: &str) -> Value {
        self.status()["projects"]
            .as_array()
            .expect("projects")
            .iter()
            .find(|p| p["name"] == name && p["domain"]["name"] == domain)
            .cloned()
            .unwrap_or_else(|| panic!("no project {name} in domain {domain}"))
    }

    /// The server of `project` whose name ends with `-{name}` (deployments prefix their servers).
    pub fn server(&self, project: &str, name: &str) -> Value {
        named(&self.project(project)["servers"], name)
    }

    /// The security group of `project` whose name ends with `-{name}`.
    pub fn security_group(&self, project: &str, name: &str) -> Value {
        named(&self.project(project)["security_groups"], name)
    }

    /// The fingerprint (`SHA256:...`) of the host key the server's sshd uses now, as
    /// `ssh-keygen -l` reads it from the server's own key file.
    pub fn host_key_fingerprint(&self, server_id: &str) -> String {
        let key = self
            .dir
            .path()
            .join("servers")
            .join(server_id)
            .join("run/overture/ssh_host_ed25519_key");
        let output = Command::new("ssh-keygen")
            .arg("-lf")
            .arg(&key)
            .output()
            .expect("ssh-keygen");
        assert!(output.status.success(), "{}", text(&output.stderr));
        text(&output.stdout)
            .split_whitespace()
            .nth(1)
            .expect("a fingerprint")
            .to_owned()
    }

    /// Authorizes `key` (an OpenSSH public key) for root on `project`'s server `name`, as
    /// its owner would add a colleague's key: a later deployment then logs in with its own.
    pub fn authorize(&self, project: &str, name: &str, key: &str) {
        use std::io::Write;
        let id = self.server(project, name)["id"]
            .as_str()
            .expect("id")
            .to_owned();
        let path = self
            .dir
            .path()
            .join("servers")
            .join(id)
            .join("root/.ssh/authorized_keys");
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .expect("the server's authorized keys");
        writeln!(file, "{}", key.trim()).expect("authorized");
    }

    /// The base URL of the cloud's APIs (`http://127.0.0.1:PORT`).
    pub fn base_url(&self) -> String {
        self.auth_url
            .trim_end_matches('/')
            .trim_end_matches("/identity/v3")
            .to_owned()
    }

    /// Calls the cloud's API with a token; returns the HTTP status and the body.
    pub fn call(&self, method: &str, path: &str, token: &str, body: Option<&str>) -> (u16, String) {
        let url = format!("{}{path}", self.base_url());
        let mut command = Command::new("curl");
        command
            .args(["-s", "-o", "-", "-w", "\n%{http_code}", "-X", method])
            .args(["-H", "Content-Type: application/json"])
            .arg("-H")
            .arg(format!("X-Auth-Token: {token}"));
        if let Some(body) = body {
            command.args(["--data", body]);
        }
        let output = command.arg(url).output().expect("curl");
        let all = text(&output.stdout);
        let (body, status) = all.rsplit_once('\n').expect("status line");
        (status.trim().parse().expect("status"), body.to_owned())
    }
}

impl Drop for LocalCloud {
    fn drop(&mut self) {
        let output = self.cli(&["down"]);
        if !output.status.success() {
            eprintln!("cloud down failed: {}", text(&output.stderr));
        }
    }
}

fn named(items: &Value, name: &str) -> Value {
    let suffix = format!("-{name}");
    items
        .as_array()
        .expect("a list")
        .iter()
        .find(|item| item["name"].as_str().is_some_and(|n| n.ends_with(&suffix)))
        .cloned()
        .unwrap_or_else(|| panic!("nothing named *{suffix} in {items}"))
}

impl LocalCloud {
    /// A file of a server, at `path` as the server sees it under its own `/srv`.
    pub fn server_srv_file(&self, project: &str, name: &str, path: &str) -> String {
        let id = self.server(project, name)["id"]
            .as_str()
            .expect("id")
            .to_owned();
        let file = self
            .dir
            .path()
            .join("servers")
            .join(id)
            .join("srv")
            .join(path.trim_start_matches("/srv/"));
        std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()))
    }
}

/// Runs a command inside a network namespace of the cloud.
pub fn in_namespace(namespace: &str, command: &[&str]) -> String {
    let output = Command::new("ip")
        .args(["netns", "exec", namespace])
        .args(command)
        .output()
        .expect("ip netns exec");
    assert!(
        output.status.success(),
        "{command:?} in {namespace}: {}",
        text(&output.stderr)
    );
    text(&output.stdout)
}

/// The processes listening for TCP in a namespace: their program names.
pub fn listening_programs(namespace: &str) -> Vec<String> {
    let lines = in_namespace(namespace, &["ss", "-ltnpH"]);
    let mut programs: Vec<String> = lines
        .lines()
        .filter_map(|line| {
            let users = line.split("users:((\"").nth(1)?;
            Some(users.split('"').next()?.to_owned())
        })
        .collect();
    programs.sort();
    programs.dedup();
    programs
}

/// The example blueprint's folder.
pub fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/hello-world-cloud")
}
