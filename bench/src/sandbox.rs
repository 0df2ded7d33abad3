//! What a sandbox costs a step: starting `true` in a fresh bubblewrap sandbox (workspace made
//! and removed, every namespace, its cgroup, the pidfd kill) against starting the same
//! `/bin/sh -c true` without one, in the same run; and what a networked step's own network
//! adds (its firewall loaded, `pasta` started and stopped).

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context;
use overture_sandbox::{Bubblewrap, NetworkPolicy, SandboxRequest};

/// Start-up times of one command, with and without a sandbox.
#[derive(Clone, Copy, Debug)]
pub struct StartUp {
    /// How many of each were started.
    pub runs: usize,
    /// All the sandboxed runs, end to end.
    pub sandboxed: Duration,
    /// All the plain runs, end to end.
    pub plain: Duration,
    /// All the sandboxed runs with a network of their own, end to end.
    pub networked: Duration,
}

impl StartUp {
    /// Milliseconds per sandboxed run.
    pub fn sandboxed_ms(&self) -> f64 {
        self.sandboxed.as_secs_f64() * 1_000.0 / self.runs as f64
    }

    /// Milliseconds per sandboxed run with a network of its own.
    pub fn networked_ms(&self) -> f64 {
        self.networked.as_secs_f64() * 1_000.0 / self.runs as f64
    }

    /// Milliseconds per plain run.
    pub fn plain_ms(&self) -> f64 {
        self.plain.as_secs_f64() * 1_000.0 / self.runs as f64
    }
}

/// Runs `true` `runs` times each way, one at a time, alternating so all see the same machine.
pub async fn start_up(runs: usize) -> anyhow::Result<StartUp> {
    let dir = tempfile::tempdir().context("creating a temporary directory")?;
    let sandbox = Bubblewrap::new(dir.path().join("sandboxes"));
    let mut sandboxed = Duration::ZERO;
    let mut plain = Duration::ZERO;
    let mut networked = Duration::ZERO;
    for run in 0..runs {
        sandboxed += timed(&sandbox, request(run, None)).await?;
        networked += timed(&sandbox, request(run, Some(policy()))).await?;

        let start = Instant::now();
        run_plain(dir.path()).await?;
        plain += start.elapsed();
    }
    Ok(StartUp {
        runs,
        sandboxed,
        plain,
        networked,
    })
}

/// How long `true` takes in a sandbox made for `request`, end to end.
async fn timed(sandbox: &Bubblewrap, request: SandboxRequest) -> anyhow::Result<Duration> {
    let start = Instant::now();
    let outcome = sandbox
        .run(request, std::future::pending())
        .await
        .context("running `true` in a sandbox")?;
    let took = start.elapsed();
    anyhow::ensure!(
        outcome.exit.success(),
        "`true` in a sandbox ended with {:?}",
        outcome.exit
    );
    Ok(took)
}

/// A policy as a step through a bastion gets one: a server's SSH port and a network.
fn policy() -> NetworkPolicy {
    NetworkPolicy {
        allow: vec![
            "192.0.2.10:22".parse().expect("a destination"),
            "198.51.100.0/24".parse().expect("a destination"),
        ],
    }
}

fn request(run: usize, network_policy: Option<NetworkPolicy>) -> SandboxRequest {
    SandboxRequest {
        id: format!("bench-{run}"),
        command: "true".into(),
        env: vec![],
        secret_env: vec![],
        files: vec![],
        network: network_policy.is_some(),
        engine_program: false,
        timeout: Duration::from_secs(60),
        output_limit: 64 * 1024,
        collect: vec![],
        log: None,
        limits: Default::default(),
        network_policy,
    }
}

/// The same command as the runner gives a sandbox, with output captured the same way.
async fn run_plain(dir: &Path) -> anyhow::Result<()> {
    let output = tokio::process::Command::new("/bin/sh")
        .args(["-c", "true"])
        .current_dir(dir)
        .env_clear()
        .stdin(Stdio::null())
        .output()
        .await
        .context("running /bin/sh -c true")?;
    anyhow::ensure!(
        output.status.success(),
        "/bin/sh -c true ended with {}",
        output.status
    );
    Ok(())
}
