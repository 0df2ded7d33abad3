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
use std::path::Path;
use std::process::ExitCode;

use overture_openstack::{self as openstack, Cloud, ProvisionError};
use overture_runner::host_keys::HOST_KEYS_FILE;
use overture_runner::servers::{Plan, AUTH_URL_ENV, BACKEND_UNREACHABLE, ERROR_FILE, TOKEN_ENV};
use secrecy::SecretString;

/// How provisioning failed, by exit code.
#[derive(Debug, thiserror::Error)]
enum Failed {
    /// The plan or the environment is wrong: the runner's doing, not the cloud's.
    #[error("{0}")]
    Input(String),
    /// The cloud API could not be reached.
    #[error("{0}")]
    Backend(String),
    /// Anything else: a refused token, a server in ERROR, a wait that ran out.
    #[error("{0}")]
    Step(String),
}

impl Failed {
    fn code(&self) -> u8 {
        match self {
            Failed::Input(_) => 2,
            // 75 fits in a u8; the constant is an i32 because exit codes are.
            Failed::Backend(_) => u8::try_from(BACKEND_UNREACHABLE).unwrap_or(1),
            Failed::Step(_) => 1,
        }
    }
}

impl From<ProvisionError> for Failed {
    fn from(error: ProvisionError) -> Self {
        if error.is_backend() {
            Failed::Backend(error.to_string())
        } else {
            Failed::Step(error.to_string())
        }
    }
}

/// Runs the plan in `spec` and exits as the `servers` kind expects.
pub fn main(spec: &Path) -> ExitCode {
    let outcome = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime.block_on(provision(spec)),
        Err(error) => Err(Failed::Step(format!("cannot start the runtime: {error}"))),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(failed) => {
            eprintln!("error: {failed}");
            // The kind reads the reason from here; the log has it from stderr anyway.
            if let Err(error) = std::fs::write(ERROR_FILE, failed.to_string()) {
                eprintln!("error: cannot write {ERROR_FILE}: {error}");
            }
            ExitCode::from(failed.code())
        }
    }
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
            return Err(Failed::Step(format!(
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
    write().map_err(|e| Failed::Step(format!("cannot write the step's outputs: {e}")))?;
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
        .map_err(|e| Failed::Step(format!("cannot write the host keys: {e}")))?;
    std::fs::write(&file, json)
        .map_err(|e| Failed::Step(format!("cannot write {}: {e}", file.display())))?;
    Ok(())
}
