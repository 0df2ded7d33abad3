//! `overture cloud fault`: faults injected into a project, through the admin API.

use std::path::Path;

use serde_json::json;

use super::client::{connect, message_of};
use crate::Failure;

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

/// Injects `fault` into `project` of the cloud serving `dir`, or clears its faults.
pub(super) async fn inject(dir: &Path, project: &str, fault: FaultCommand) -> Result<(), Failure> {
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
