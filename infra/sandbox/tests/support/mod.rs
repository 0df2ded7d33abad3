//! What the sandbox's tests share: a sandbox on a fresh temporary directory, a request with
//! nothing in it but its command, and a run that is never cancelled.

#![allow(dead_code)]

use std::time::Duration;

use overture_sandbox::{Bubblewrap, SandboxOutcome, SandboxRequest};
use tempfile::TempDir;

/// A sandbox whose workspaces go to a fresh temporary directory.
pub fn sandbox() -> (Bubblewrap, TempDir) {
    let root = tempfile::tempdir().expect("temporary directory");
    (Bubblewrap::new(root.path().join("workspaces")), root)
}

/// A request of `id` running `command` offline: no environment, files or collected paths,
/// a minute to run, 1 MiB of output, the default limits.
pub fn request(id: &str, command: &str) -> SandboxRequest {
    SandboxRequest {
        id: id.to_owned(),
        command: command.to_owned(),
        env: vec![],
        secret_env: vec![],
        files: vec![],
        network: false,
        engine_program: false,
        timeout: Duration::from_secs(60),
        output_limit: 1024 * 1024,
        collect: vec![],
        log: None,
        limits: Default::default(),
        network_policy: None,
    }
}

/// Runs to the end, never cancelled.
pub async fn run(sandbox: &Bubblewrap, request: SandboxRequest) -> SandboxOutcome {
    sandbox
        .run(request, std::future::pending())
        .await
        .expect("the sandbox runs")
}
