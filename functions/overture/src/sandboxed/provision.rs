//! `overture provision` (hidden): carries out a `servers` step's plan, inside the step's sandbox.
//!
//! The runner's `servers` kind starts it there with the plan in a file (`--spec`), the cloud's
//! identity URL in `OS_AUTH_URL` and the user's token in `OS_TOKEN`, so making servers runs like
//! every other step: in a fresh sandbox, with its output in the attempt's log. It writes each
//! server's address and each group's id to `$OVERTURE_OUTPUTS` as `name=value` lines, and on
//! failure its reason to the file the kind collects. It then reads each server's SSH host keys
//! from its console output and writes them beside the plan (`host-keys.json`) for the engine to
//! pin. Exit codes: 0 done, 75 the cloud API could
//! not be reached (worth retrying), 2 the plan or the environment is wrong, 1 anything else.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use overture_openstack::{self as openstack, Cloud, ProvisionError};
use overture_runner::host_keys::HOST_KEYS_FILE;
use overture_runner::servers::{Plan, AUTH_URL_ENV, ERROR_FILE, TOKEN_ENV};
use secrecy::SecretString;

use super::{self as sandboxed, Failed};

/// What `overture provision` takes.
#[derive(clap::Args)]
pub struct ProvisionArgs {
    /// The plan (JSON).
    #[arg(long)]
    spec: PathBuf,
}

/// Runs the plan given and exits as the `servers` kind expects.
pub fn main(args: &ProvisionArgs) -> ExitCode {
    sandboxed::run(ERROR_FILE, provision(&args.spec))
}

async fn provision(spec: &Path) -> Result<(), Failed> {
    let text = std::fs::read_to_string(spec)
        .map_err(|e| Failed::Input(format!("cannot read the plan {}: {e}", spec.display())))?;
    let plan: Plan = serde_json::from_str(&text)
        .map_err(|e| Failed::Input(format!("the plan {} is not readable: {e}", spec.display())))?;
    let auth_url = std::env::var(AUTH_URL_ENV)
        .map_err(|_| Failed::Input(format!("{AUTH_URL_ENV} is not set")))?;
    let token = std::env::var(TOKEN_ENV)
        .map(SecretString::from)
        .map_err(|_| Failed::Input(format!("{TOKEN_ENV} is not set")))?;
    let outputs_path = std::env::var_os("OVERTURE_OUTPUTS")
        .ok_or_else(|| Failed::Input("OVERTURE_OUTPUTS is not set".into()))?;

    let cloud = Cloud::connect(&auth_url, token)
        .await
        .map_err(|e| Failed::from(ProvisionError::from(e)))?;
    let info = cloud.info();
    println!(
        "acting in project `{}` as `{}` at {auth_url}",
        info.project, info.user
    );
    let mut progress = |line: &str| println!("{line}");
    let outputs = openstack::provision(&cloud, &plan, &mut progress).await?;

    let mut lines = String::new();
    for (key, value) in &outputs {
        if value.contains(['\n', '\r']) {
            return Err(Failed::Other(format!(
                "the cloud gave `{key}` a value holding a line break"
            )));
        }
        lines.push_str(&format!("{key}={value}\n"));
    }
    let write = || -> std::io::Result<()> {
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&outputs_path)?;
        file.write_all(lines.as_bytes())
    };
    write().map_err(|e| Failed::Other(format!("cannot write the step's outputs: {e}")))?;
    println!("made {} server(s)", plan.servers.len());

    // The keys the cloud says each server has, for the engine to pin: beside the plan, where
    // the kind collects them.
    let mut made = Vec::new();
    for server in &plan.servers {
        let Some(address) = outputs.get(&server.name) else {
            continue;
        };
        let found = cloud
            .servers_named(&server.cloud_name)
            .await
            .map_err(|e| Failed::from(ProvisionError::from(e)))?;
        if let Some(found) = found
            .into_iter()
            .find(|s| s.address() == Some(address.as_str()))
        {
            made.push(openstack::MadeServer {
                name: server.name.clone(),
                id: found.id,
                address: address.clone(),
                port: 22,
            });
        }
    }
    let keys = openstack::host_keys(&cloud, &made, openstack::CONSOLE_WAIT, &mut progress)
        .await
        .map_err(|e| Failed::from(ProvisionError::from(e)))?;
    let file = spec.with_file_name(HOST_KEYS_FILE);
    let json = serde_json::to_vec(&keys)
        .map_err(|e| Failed::Other(format!("cannot write the host keys: {e}")))?;
    std::fs::write(&file, json)
        .map_err(|e| Failed::Other(format!("cannot write {}: {e}", file.display())))?;
    Ok(())
}
