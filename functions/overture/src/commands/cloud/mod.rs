//! `overture cloud`: the local cloud (crate `overture-cloud`, contract in `cloud/API.md`) for
//! development, tests and the demo.
//!
//! `up` starts `overture cloud serve --dir DIR` detached (its own session, output to
//! `DIR/cloud.log`) and returns once it answers; `down` asks it to stop through the admin API
//! and falls back to a clean-up from its journal; `status`, `token`, `delete-project` and `fault`
//! are thin clients of the admin and Keystone APIs. Everything talks to 127.0.0.1 only.
//!
//! - this file: the commands and their arguments, `up` and `down`.
//! - [`client`]: calls to a running cloud's admin API and Keystone.
//! - [`status`]: `status`, the admin status for people.
//! - [`project`]: `token` and `delete-project`, a project named within its domain.
//! - [`fault`]: `fault`, the faults injected into a project.

mod client;
mod fault;
mod project;
mod status;

use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context as _;
use overture_cloud::process::Signal;
use overture_cloud::{CloudConfig, CloudError, CloudInfo, StateDir};
use tokio::time::Instant;

use self::client::{live, Client};
pub use self::fault::FaultCommand;
use self::project::{Named, DEFAULT_DOMAIN};
use crate::Failure;

/// How long `up` waits for the cloud to answer.
const START_LIMIT: Duration = Duration::from_secs(20);
/// How long `down` waits for the cloud to stop and remove everything.
const STOP_LIMIT: Duration = Duration::from_secs(60);

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

/// Runs an `overture cloud` command.
pub async fn run(command: CloudCommand) -> Result<(), Failure> {
    match command {
        CloudCommand::Up { dir } => up(&absolute(&dir.path)?).await,
        CloudCommand::Down { dir } => down(&dir.path).await,
        CloudCommand::Status { dir, json } => status::status(&dir.path, json).await,
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
            project::token(&dir.path, &project, expires_in, out.as_deref()).await
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
            project::delete_project(&dir.path, &project).await
        }
        CloudCommand::Fault {
            project,
            dir,
            fault,
        } => fault::inject(&dir.path, &project, fault).await,
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
