//! `overture host-keys` (hidden): before a `wait-ssh` step first contacts servers whose SSH host
//! keys are not pinned yet, asks the tenant's cloud for them, inside the step's sandbox.
//!
//! The step gives it the hosts (`host<TAB>port` a line), the identity URL in `OS_AUTH_URL` and
//! the token in `OS_TOKEN`. For each host that is the address of a server of the token's
//! project, it reads the server's console output and writes the keys it shows to
//! `host-keys.json` (which the step collects, for the engine to pin them) and to
//! `ssh/known_hosts`, so that the step's own connections already hold them to those keys.
//! Hosts no server has are left to trust on first use. Exit codes: 0 done, 75 the cloud API
//! could not be reached (worth retrying), 2 the input is wrong, 1 anything else; on failure the
//! reason goes to `host-keys.error`.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use overture_domain::host_keys::known_hosts_lines;
use overture_openstack::{self as openstack, Cloud};
use overture_runner::host_keys::{HOST_KEYS_FILE, KNOWN_HOSTS_FILE};
use overture_runner::servers::{AUTH_URL_ENV, TOKEN_ENV};
use overture_runner::wait_ssh::HOST_KEYS_ERROR_FILE;
use secrecy::SecretString;

use super::{self as sandboxed, Failed};

/// What `overture host-keys` takes.
#[derive(clap::Args)]
pub struct HostKeysArgs {
    /// The hosts (`host<TAB>port` a line).
    #[arg(long)]
    hosts: PathBuf,
    /// How long, in all, consoles still booting are waited for, in milliseconds.
    #[arg(long)]
    wait_ms: u64,
}

/// Reads the keys of the hosts given and exits as the `wait-ssh` kind expects.
pub fn main(args: &HostKeysArgs) -> ExitCode {
    let wait = Duration::from_millis(args.wait_ms);
    sandboxed::run(HOST_KEYS_ERROR_FILE, run(&args.hosts, wait))
}

async fn run(hosts_file: &Path, wait: Duration) -> Result<(), Failed> {
    let text = std::fs::read_to_string(hosts_file).map_err(|e| {
        Failed::Input(format!(
            "cannot read the hosts {}: {e}",
            hosts_file.display()
        ))
    })?;
    let mut hosts = Vec::new();
    for line in text.lines().filter(|line| !line.is_empty()) {
        let parsed = line
            .split_once('\t')
            .and_then(|(host, port)| Some((host.to_owned(), port.parse::<u16>().ok()?)));
        match parsed {
            Some(host) => hosts.push(host),
            None => return Err(Failed::Input(format!("not `host<TAB>port`: `{line}`"))),
        }
    }
    let auth_url = std::env::var(AUTH_URL_ENV)
        .map_err(|_| Failed::Input(format!("{AUTH_URL_ENV} is not set")))?;
    let token = std::env::var(TOKEN_ENV)
        .map(SecretString::from)
        .map_err(|_| Failed::Input(format!("{TOKEN_ENV} is not set")))?;
    let cloud = Cloud::connect(&auth_url, token).await?;
    let mut progress = |line: &str| println!("{line}");
    let found = openstack::host_keys_at(&cloud, &hosts, wait, &mut progress).await?;

    let dir = hosts_file.parent().unwrap_or(Path::new("."));
    let json = serde_json::to_vec(&found)
        .map_err(|e| Failed::Other(format!("cannot write the host keys: {e}")))?;
    std::fs::write(dir.join(HOST_KEYS_FILE), json)
        .map_err(|e| Failed::Other(format!("cannot write {HOST_KEYS_FILE}: {e}")))?;
    let lines: String = found
        .iter()
        .map(|server| known_hosts_lines(&server.host, &server.keys))
        .collect();
    let known_hosts = dir.join(KNOWN_HOSTS_FILE);
    let append = || -> std::io::Result<()> {
        if let Some(parent) = known_hosts.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&known_hosts)?
            .write_all(lines.as_bytes())
    };
    append().map_err(|e| Failed::Other(format!("cannot write {KNOWN_HOSTS_FILE}: {e}")))
}
