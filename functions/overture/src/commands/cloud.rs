//! `overture cloud`: the local cloud (crate `overture-cloud`, contract in `cloud/API.md`) for
//! development, tests and the demo.
//!
//! `up` starts `overture cloud serve --dir DIR` detached (its own session, output to
//! `DIR/cloud.log`) and returns once it answers; `down` asks it to stop through the admin API
//! and falls back to a clean-up from its journal; `status`, `token`, `delete-project` and `fault`
//! are thin clients of the admin and Keystone APIs. Everything talks to 127.0.0.1 only.

use std::fs::OpenOptions;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context as _;
use overture_cloud::process::Signal;
use overture_cloud::{CloudConfig, CloudError, CloudInfo, StateDir};
use serde_json::{json, Value};
use tokio::time::Instant;

use crate::Failure;

/// How long `up` waits for the cloud to answer.
const START_LIMIT: Duration = Duration::from_secs(20);
/// How long `down` waits for the cloud to stop and remove everything.
const STOP_LIMIT: Duration = Duration::from_secs(60);
/// How long one call to the cloud may take.
const CALL_LIMIT: Duration = Duration::from_secs(30);

/// Runs the local cloud (development and tests).
#[derive(clap::Subcommand)]
pub enum CloudCommand {
    /// Start a cloud in the background and print how to reach it.
    Up {
        #[command(flatten)]
        dir: DirArg,
    },
    /// Stop the cloud and remove everything it created (namespaces, links, processes).
    Down {
        #[command(flatten)]
        dir: DirArg,
    },
    /// Show the cloud's projects, servers, security groups and rules.
    Status {
        #[command(flatten)]
        dir: DirArg,
        /// Print the admin API's status as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print a token for a project (created, with its user and domain, if missing).
    Token {
        /// The project (and user) name.
        #[arg(long)]
        project: String,
        /// The project's Keystone domain: names are unique only within one.
        #[arg(long, value_name = "NAME", default_value = DEFAULT_DOMAIN)]
        domain: String,
        #[command(flatten)]
        dir: DirArg,
        /// Issue it through the admin API with this lifetime instead (negative: already expired).
        #[arg(long, value_name = "SECONDS", allow_negative_numbers = true)]
        expires_in: Option<i64>,
        /// Write it to this file (mode 0600) instead of printing it.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// Delete a project without servers, with its user and tokens; its name may be taken again.
    DeleteProject {
        /// The project's name.
        #[arg(long)]
        project: String,
        /// The project's Keystone domain.
        #[arg(long, value_name = "NAME", default_value = DEFAULT_DOMAIN)]
        domain: String,
        #[command(flatten)]
        dir: DirArg,
    },
    /// Inject a fault into a project, or clear its faults.
    Fault {
        /// The project.
        #[arg(long)]
        project: String,
        #[command(flatten)]
        dir: DirArg,
        #[command(subcommand)]
        fault: FaultCommand,
    },
    /// Serve a cloud in the foreground (what `up` runs).
    #[command(hide = true)]
    Serve {
        #[command(flatten)]
        dir: DirArg,
    },
}

/// Where a cloud keeps its state.
#[derive(clap::Args)]
pub struct DirArg {
    /// The cloud's state directory.
    #[arg(
        long = "dir",
        value_name = "DIR",
        env = "OVERTURE_CLOUD_DIR",
        default_value = ".overture-cloud",
        global = true
    )]
    path: PathBuf,
}

/// A fault to inject.
#[derive(clap::Subcommand)]
pub enum FaultCommand {
    /// The next N Nova or Neutron calls of the project answer 503.
    BackendUnreachable {
        /// How many calls fail.
        #[arg(long, value_name = "N")]
        times: u32,
    },
    /// Servers of this name created from now on turn ACTIVE but never start sshd.
    NeverBoot {
        /// The server name.
        #[arg(long)]
        server: String,
    },
    /// The server (name or id) refuses every packet from now on, open connections included.
    Unreachable {
        /// The server's name or id.
        #[arg(long)]
        server: String,
    },
    /// The server (name or id) gets new SSH host keys and its sshd restarts with them.
    Rekey {
        /// The server's name or id.
        #[arg(long)]
        server: String,
    },
    /// Clear every fault of the project.
    Clear,
}

/// Runs an `overture cloud` command.
pub async fn run(command: CloudCommand) -> Result<(), Failure> {
    match command {
        CloudCommand::Up { dir } => up(&absolute(&dir.path)?).await,
        CloudCommand::Down { dir } => down(&dir.path).await,
        CloudCommand::Status { dir, json } => status(&dir.path, json).await,
        CloudCommand::Token {
            project,
            domain,
            dir,
            expires_in,
            out,
        } => {
            let project = Named {
                name: &project,
                domain: &domain,
            };
            token(&dir.path, &project, expires_in, out.as_deref()).await
        }
        CloudCommand::DeleteProject {
            project,
            domain,
            dir,
        } => {
            let project = Named {
                name: &project,
                domain: &domain,
            };
            delete_project(&dir.path, &project).await
        }
        CloudCommand::Fault {
            project,
            dir,
            fault,
        } => inject(&dir.path, &project, fault).await,
        CloudCommand::Serve { dir } => {
            overture_cloud::serve(CloudConfig::new(absolute(&dir.path)?))
                .await
                .map_err(|error| match error {
                    CloudError::AlreadyRunning(_) => Failure::BadInput(error.to_string()),
                    other => Failure::Engine(other.into()),
                })
        }
    }
}

fn absolute(path: &Path) -> Result<PathBuf, Failure> {
    std::path::absolute(path)
        .map_err(|e| Failure::BadInput(format!("--dir {}: {e}", path.display())))
}

/// The cloud serving `dir`, if one runs and answers.
async fn live(dir: &Path) -> Result<Option<Client>, Failure> {
    let state = StateDir::new(dir);
    let info = state.read_info().map_err(|e| Failure::Engine(e.into()))?;
    let Some(info) = info.filter(|info| info.process().is_running()) else {
        return Ok(None);
    };
    let admin_token = state
        .read_admin_token()
        .map_err(|e| Failure::Engine(e.into()))?;
    let client = Client::new(info, admin_token)?;
    match client
        .admin(reqwest::Method::GET, "/admin/status", None)
        .await
    {
        Ok((200, _)) => Ok(Some(client)),
        _ => Ok(None),
    }
}

/// The cloud serving `dir`, or a message saying how to start one.
async fn connect(dir: &Path) -> Result<Client, Failure> {
    live(dir).await?.ok_or_else(|| {
        Failure::BadInput(format!(
            "no cloud is running in {} (--dir); start one with `overture cloud up --dir {}`",
            dir.display(),
            dir.display()
        ))
    })
}

async fn up(dir: &Path) -> Result<(), Failure> {
    if let Some(client) = live(dir).await? {
        outln!("# a cloud is already running in {}", dir.display());
        print_access(dir, &client.info);
        return Ok(());
    }
    let state = StateDir::new(dir);
    state
        .create()
        .map_err(|e| Failure::BadInput(format!("--dir: {e}")))?;
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(state.log())
        .with_context(|| format!("opening {}", state.log().display()))?;
    let log_too = log.try_clone().context("opening the cloud's log")?;
    let program = std::env::current_exe().context("finding the overture program")?;
    let mut command = std::process::Command::new(program);
    command
        .args(["cloud", "serve", "--dir"])
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_too)
        .env(
            "OVERTURE_LOG",
            std::env::var("OVERTURE_LOG").unwrap_or_else(|_| "info".into()),
        )
        // A log file, not a terminal: no colour codes.
        .env("NO_COLOR", "1");
    // SAFETY: between fork and exec the child only calls setsid(2), which is async-signal-safe.
    // Its own session keeps the cloud alive when this terminal or shell goes away.
    unsafe {
        command.pre_exec(|| {
            if libc::setsid() == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = command.spawn().context("starting `overture cloud serve`")?;
    let deadline = Instant::now() + START_LIMIT;
    loop {
        if let Some(client) = live(dir).await? {
            if client.info.pid == child.id() {
                outln!(
                    "# the cloud is up in {} (pid {})",
                    dir.display(),
                    client.info.pid
                );
                print_access(dir, &client.info);
                return Ok(());
            }
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(Failure::Engine(anyhow::anyhow!(
                "the cloud stopped at once ({status}); its log ({}) ends with:\n{}",
                state.log().display(),
                log_tail(&state.log())
            )));
        }
        if Instant::now() >= deadline {
            return Err(Failure::Engine(anyhow::anyhow!(
                "the cloud did not answer within {START_LIMIT:?}; see {}",
                state.log().display()
            )));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn print_access(dir: &Path, info: &CloudInfo) {
    let dir_flag = format!(" --dir {}", dir.display());
    outln!("export OS_AUTH_URL={}", info.auth_url);
    outln!("# instance {}, servers on {}", info.instance, info.network);
    outln!("# a token for a project (created if missing): overture cloud token --project NAME{dir_flag}");
    outln!("# stop it and remove everything it made:       overture cloud down{dir_flag}");
}

fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(10)..].join("\n")
}

async fn down(dir: &Path) -> Result<(), Failure> {
    if !dir.is_dir() {
        outln!("no cloud in {}: nothing to do", dir.display());
        return Ok(());
    }
    let state = StateDir::new(dir);
    let info = state.read_info().ok().flatten();
    let mut was_running = false;
    if let Some(info) = info.filter(|info| info.process().is_running()) {
        was_running = true;
        let process = info.process();
        let asked = match state.read_admin_token() {
            Ok(token) => Client::new(info.clone(), token)?
                .admin(reqwest::Method::POST, "/admin/shutdown", None)
                .await
                .is_ok_and(|(status, _)| status == 200),
            Err(_) => false,
        };
        if !asked {
            process.signal(Signal::Terminate);
        }
        let stopped = tokio::task::spawn_blocking(move || {
            process.wait_gone(STOP_LIMIT) || process.kill(Duration::from_secs(5))
        })
        .await
        .context("waiting for the cloud to stop")?;
        if !stopped {
            return Err(Failure::Engine(anyhow::anyhow!(
                "the cloud (pid {}) does not stop; see {}",
                info.pid,
                state.log().display()
            )));
        }
    }
    // Whatever a killed cloud left behind (the journal says what), and nothing if it cleaned up.
    let left_behind = !was_running && state.journal().exists();
    let path = dir.to_owned();
    tokio::task::spawn_blocking(move || overture_cloud::clean_up(&path))
        .await
        .context("cleaning up")?
        .map_err(|e| Failure::Engine(e.into()))?;
    if was_running {
        outln!(
            "the cloud in {} is down; nothing it created remains",
            dir.display()
        );
    } else if left_behind {
        outln!(
            "the cloud in {} had stopped without cleaning up; what it left behind is removed",
            dir.display()
        );
    } else {
        outln!(
            "no cloud was running in {}; nothing it created remains",
            dir.display()
        );
    }
    Ok(())
}

async fn status(dir: &Path, json: bool) -> Result<(), Failure> {
    let client = connect(dir).await?;
    let (_, status) = client
        .admin(reqwest::Method::GET, "/admin/status", None)
        .await?;
    if json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&status).unwrap_or_default()
        );
    } else {
        out!("{}", render_status(&client.info, &status));
    }
    Ok(())
}

/// The admin status for people.
fn render_status(info: &CloudInfo, status: &Value) -> String {
    let mut out = format!(
        "cloud {} at {} (OS_AUTH_URL={}), servers on {}\n",
        info.instance, info.url, info.auth_url, info.network
    );
    let projects = status["projects"].as_array().cloned().unwrap_or_default();
    if projects.is_empty() {
        out.push_str("no projects yet: `overture cloud token --project NAME` creates one\n");
    }
    let text = |v: &Value| v.as_str().unwrap_or("-").to_owned();
    for project in &projects {
        let network = &project["network"];
        let domain = project["domain"]["name"].as_str().unwrap_or(DEFAULT_DOMAIN);
        let named = Named {
            name: &text(&project["name"]),
            domain,
        }
        .to_string();
        out.push_str(&format!(
            "\nproject {named} ({}): network {} on {}, host {}\n",
            text(&project["id"]),
            text(&network["cidr"]),
            text(&network["bridge"]),
            text(&network["gateway"]),
        ));
        let faults = &project["faults"];
        let failing = faults["backend_unreachable"].as_u64().unwrap_or(0);
        let never_boot: Vec<String> = faults["never_boot"]
            .as_array()
            .into_iter()
            .flatten()
            .map(text)
            .collect();
        let mut faults = Vec::new();
        if failing > 0 {
            faults.push(format!("backend-unreachable for {failing} more call(s)"));
        }
        if !never_boot.is_empty() {
            faults.push(format!("never-boot {}", never_boot.join(", ")));
        }
        if !faults.is_empty() {
            out.push_str(&format!("  faults: {}\n", faults.join("; ")));
        }
        let servers = project["servers"].as_array().cloned().unwrap_or_default();
        out.push_str(&format!("  servers: {}\n", servers.len()));
        for server in &servers {
            let groups: Vec<String> = server["security_groups"]
                .as_array()
                .into_iter()
                .flatten()
                .map(text)
                .collect();
            out.push_str(&format!(
                "    {:<20} {:<7} {:<15} [{}] {}{}\n",
                text(&server["name"]),
                text(&server["status"]),
                text(&server["address"]),
                groups.join(", "),
                text(&server["id"]),
                if server["unreachable"] == true {
                    " (unreachable)"
                } else {
                    ""
                },
            ));
        }
        let groups = project["security_groups"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        out.push_str("  security groups:\n");
        for group in &groups {
            out.push_str(&format!(
                "    {} ({})\n",
                text(&group["name"]),
                text(&group["id"])
            ));
            let named = |id: &Value| {
                groups
                    .iter()
                    .find(|g| g["id"] == *id)
                    .map(|g| text(&g["name"]))
                    .unwrap_or_else(|| text(id))
            };
            for rule in group["rules"].as_array().into_iter().flatten() {
                let ports = match (
                    rule["port_range_min"].as_u64(),
                    rule["port_range_max"].as_u64(),
                ) {
                    (Some(min), Some(max)) if min == max => format!(" {min}"),
                    (Some(min), Some(max)) => format!(" {min}-{max}"),
                    _ => String::new(),
                };
                let from = if rule["remote_group_id"].is_string() {
                    format!("group {}", named(&rule["remote_group_id"]))
                } else if rule["remote_ip_prefix"].is_string() {
                    text(&rule["remote_ip_prefix"])
                } else {
                    "anywhere".into()
                };
                out.push_str(&format!(
                    "      {} {}{} from {}\n",
                    text(&rule["direction"]),
                    rule["protocol"].as_str().unwrap_or("any"),
                    ports,
                    from,
                ));
            }
        }
    }
    out
}

/// The domain projects are in unless `--domain` says otherwise, as in Keystone.
const DEFAULT_DOMAIN: &str = "Default";

/// A project as people name it: by name, within a domain.
struct Named<'a> {
    name: &'a str,
    domain: &'a str,
}

impl std::fmt::Display for Named<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.domain {
            DEFAULT_DOMAIN => f.write_str(self.name),
            domain => write!(f, "{} in domain {domain}", self.name),
        }
    }
}

async fn token(
    dir: &Path,
    project: &Named<'_>,
    expires_in: Option<i64>,
    out: Option<&Path>,
) -> Result<(), Failure> {
    let client = connect(dir).await?;
    let (code, created) = client
        .admin(
            reqwest::Method::POST,
            "/admin/projects",
            Some(json!({ "name": project.name, "domain": project.domain })),
        )
        .await?;
    if code != 200 {
        return Err(Failure::BadInput(format!(
            "--project {} --domain {}: {}",
            project.name,
            project.domain,
            message_of(&created)
        )));
    }
    let token = match expires_in {
        Some(seconds) => {
            let (code, issued) = client
                .admin(
                    reqwest::Method::POST,
                    &format!("/admin/projects/{}/tokens", project.name),
                    Some(json!({ "expires_in_seconds": seconds, "domain": project.domain })),
                )
                .await?;
            if code != 201 {
                return Err(Failure::BadInput(format!(
                    "--expires-in {seconds}: {}",
                    message_of(&issued)
                )));
            }
            issued["token"].as_str().unwrap_or_default().to_owned()
        }
        None => {
            let password = created["user"]["password"].as_str().unwrap_or_default();
            client.password_auth(project, password).await?
        }
    };
    match out {
        Some(path) => {
            let mut file = OpenOptions::new()
                .create(true)
                .write(true)
                .truncate(true)
                .mode(0o600)
                .open(path)
                .map_err(|e| Failure::BadInput(format!("--out {}: {e}", path.display())))?;
            writeln!(file, "{token}")
                .map_err(|e| Failure::BadInput(format!("--out {}: {e}", path.display())))?;
            let lifetime = match expires_in {
                Some(seconds) if seconds <= 0 => format!("expired {} s ago", -seconds),
                Some(seconds) => format!("valid {seconds} s"),
                None => "valid 1 hour".into(),
            };
            eprintln!(
                "the token for {project} is in {} ({lifetime})",
                path.display()
            );
        }
        None => outln!("{token}"),
    }
    Ok(())
}

async fn delete_project(dir: &Path, project: &Named<'_>) -> Result<(), Failure> {
    let client = connect(dir).await?;
    let mut url =
        reqwest::Url::parse("http://127.0.0.1/admin/projects/").context("the admin API's path")?;
    url.path_segments_mut()
        .map_err(|()| Failure::Engine(anyhow::anyhow!("the admin API's path")))?
        .pop_if_empty()
        .push(project.name);
    url.query_pairs_mut().append_pair("domain", project.domain);
    // Percent-encoded by `Url`: a name the cloud refuses must not reach another path.
    let path = format!("{}?{}", url.path(), url.query().unwrap_or_default());
    let (code, answer) = client.admin(reqwest::Method::DELETE, &path, None).await?;
    match code {
        204 => {
            outln!("project {project} is deleted, with its user and tokens");
            Ok(())
        }
        _ => Err(Failure::BadInput(format!(
            "--project {} --domain {}: {}",
            project.name,
            project.domain,
            message_of(&answer)
        ))),
    }
}

async fn inject(dir: &Path, project: &str, fault: FaultCommand) -> Result<(), Failure> {
    let client = connect(dir).await?;
    let (_, status) = client
        .admin(reqwest::Method::GET, "/admin/status", None)
        .await?;
    let known = status["projects"]
        .as_array()
        .is_some_and(|projects| projects.iter().any(|p| p["name"] == project));
    if !known {
        return Err(Failure::BadInput(format!(
            "--project {project}: no such project in this cloud; `overture cloud token --project {project}` creates it"
        )));
    }
    let (method, path, body, done) = match &fault {
        FaultCommand::BackendUnreachable { times } => (
            reqwest::Method::POST,
            "/admin/faults".to_owned(),
            Some(json!({"project": project, "kind": "backend-unreachable", "times": times})),
            format!("the next {times} Nova or Neutron call(s) of {project} answer 503"),
        ),
        FaultCommand::NeverBoot { server } => (
            reqwest::Method::POST,
            "/admin/faults".to_owned(),
            Some(json!({"project": project, "kind": "never-boot", "server": server})),
            format!("servers named {server} created in {project} from now on never start sshd"),
        ),
        FaultCommand::Unreachable { server } => (
            reqwest::Method::POST,
            "/admin/faults".to_owned(),
            Some(json!({"project": project, "kind": "unreachable", "server": server})),
            format!("{server} in {project} now refuses everything"),
        ),
        FaultCommand::Rekey { server } => (
            reqwest::Method::POST,
            "/admin/faults".to_owned(),
            Some(json!({"project": project, "kind": "rekey", "server": server})),
            format!("{server} in {project} now has new SSH host keys"),
        ),
        FaultCommand::Clear => (
            reqwest::Method::DELETE,
            format!("/admin/faults?project={project}"),
            None,
            format!("the faults of {project} are cleared"),
        ),
    };
    let (code, answer) = client.admin(method, &path, body).await?;
    match code {
        200 | 204 => {
            outln!("{done}");
            Ok(())
        }
        404 => {
            let server = match &fault {
                FaultCommand::NeverBoot { server }
                | FaultCommand::Unreachable { server }
                | FaultCommand::Rekey { server } => server,
                FaultCommand::BackendUnreachable { .. } | FaultCommand::Clear => "",
            };
            Err(Failure::BadInput(format!(
                "--server {server}: {project} has no server of that name or id (`overture cloud status` lists them)"
            )))
        }
        _ => Err(Failure::BadInput(message_of(&answer))),
    }
}

/// The message of an error answer of the admin API or Keystone.
fn message_of(body: &Value) -> String {
    body["error"]["message"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| body.to_string())
}

/// Calls to one running cloud.
struct Client {
    info: CloudInfo,
    admin_token: String,
    http: reqwest::Client,
}

impl Client {
    fn new(info: CloudInfo, admin_token: String) -> Result<Self, Failure> {
        let http = reqwest::Client::builder()
            .timeout(CALL_LIMIT)
            .no_proxy()
            .build()
            .context("making an HTTP client")?;
        Ok(Self {
            info,
            admin_token,
            http,
        })
    }

    /// Calls the admin API; returns the status and the JSON body (`null` when empty).
    async fn admin(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<(u16, Value), Failure> {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.info.url))
            .header("X-Admin-Token", &self.admin_token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request
            .send()
            .await
            .with_context(|| format!("calling the cloud at {}", self.info.url))?;
        let status = response.status().as_u16();
        let bytes = response
            .bytes()
            .await
            .context("reading the cloud's answer")?;
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Ok((status, body))
    }

    /// Keystone password authentication; returns the token.
    async fn password_auth(&self, project: &Named<'_>, password: &str) -> Result<String, Failure> {
        let domain = json!({ "name": project.domain });
        let body = json!({"auth": {
            "identity": {"methods": ["password"], "password": {"user": {
                "name": project.name, "domain": domain, "password": password}}},
            "scope": {"project": {"name": project.name, "domain": domain}},
        }});
        let response = self
            .http
            .post(format!("{}/auth/tokens", self.info.auth_url))
            .json(&body)
            .send()
            .await
            .with_context(|| format!("calling Keystone at {}", self.info.auth_url))?;
        if response.status().as_u16() != 201 {
            return Err(Failure::Engine(anyhow::anyhow!(
                "Keystone refused the project's password ({})",
                response.status()
            )));
        }
        response
            .headers()
            .get("x-subject-token")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
            .ok_or_else(|| Failure::Engine(anyhow::anyhow!("Keystone answered no X-Subject-Token")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_reads_for_people() {
        let info = CloudInfo {
            pid: 1,
            pid_start_time: 1,
            url: "http://127.0.0.1:4000".into(),
            auth_url: "http://127.0.0.1:4000/identity/v3".into(),
            instance: "ab12".into(),
            network: "10.7.0.0/16".into(),
        };
        let status = json!({"projects": [{
            "id": "p1", "name": "tenant-a",
            "network": {"bridge": "ovcab12b1", "cidr": "10.7.1.0/24", "gateway": "10.7.1.1"},
            "faults": {"backend_unreachable": 2, "never_boot": []},
            "servers": [{"id": "s1", "name": "web-1", "status": "ACTIVE", "address": "10.7.1.2",
                         "security_groups": ["web"], "unreachable": false}],
            "security_groups": [
                {"id": "g1", "name": "bastion", "rules": []},
                {"id": "g2", "name": "web", "rules": [
                    {"direction": "ingress", "protocol": "tcp", "port_range_min": 22, "port_range_max": 22,
                     "remote_group_id": "g1", "remote_ip_prefix": null}]}],
        }, {
            "id": "p2", "name": "tenant-a", "domain": {"id": "d2", "name": "Other"},
            "network": {"bridge": "ovcab12b2", "cidr": "10.7.2.0/24", "gateway": "10.7.2.1"},
            "faults": {"backend_unreachable": 0, "never_boot": []},
            "servers": [], "security_groups": [],
        }]});
        let text = render_status(&info, &status);
        assert!(
            text.contains("project tenant-a (p1): network 10.7.1.0/24 on ovcab12b1, host 10.7.1.1"),
            "{text}"
        );
        assert!(
            text.contains("project tenant-a in domain Other (p2): network 10.7.2.0/24"),
            "{text}"
        );
        assert!(
            text.contains("backend-unreachable for 2 more call(s)"),
            "{text}"
        );
        assert!(text.contains("web-1"), "{text}");
        assert!(
            text.contains("      ingress tcp 22 from group bastion\n"),
            "{text}"
        );
    }
}
