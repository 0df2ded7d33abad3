//! The real `overture deploy` process on generated blueprints: what the engine costs per step.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::fixtures::{wide_blueprint, StepKind};

/// The `overture` binary built beside this one (`cargo build --release -p overture`).
pub fn overture_binary() -> anyhow::Result<PathBuf> {
    let me = std::env::current_exe().context("finding this program's own path")?;
    let dir = me
        .parent()
        .with_context(|| format!("{} has no parent directory", me.display()))?;
    let overture = dir.join(format!("overture{}", std::env::consts::EXE_SUFFIX));
    anyhow::ensure!(
        overture.is_file(),
        "the overture program is not at {}; build both with `cargo build --release -p overture -p overture-bench` (or run `make bench`)",
        overture.display()
    );
    Ok(overture)
}

/// One timed deployment.
#[derive(Clone, Copy, Debug)]
pub struct Deployed {
    /// Steps in the blueprint.
    pub steps: usize,
    /// Wall time of the whole `overture deploy` process.
    pub elapsed: Duration,
}

impl Deployed {
    /// Wall time per step, in milliseconds.
    pub fn ms_per_step(&self) -> f64 {
        self.elapsed.as_secs_f64() * 1_000.0 / self.steps as f64
    }
}

/// Deploys a wide blueprint of `steps` steps of `kind` with a fresh data directory, and times
/// the process from start to exit. It must succeed (exit code 0).
pub async fn deploy(overture: &Path, steps: usize, kind: StepKind) -> anyhow::Result<Deployed> {
    let dir = tempfile::tempdir().context("creating a temporary directory")?;
    let blueprint = dir.path().join("blueprint.yaml");
    std::fs::write(&blueprint, wide_blueprint("bench-wide", steps, kind))
        .with_context(|| format!("writing {}", blueprint.display()))?;

    let start = Instant::now();
    let output = tokio::process::Command::new(overture)
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .arg("deploy")
        .arg(&blueprint)
        .env_remove("OVERTURE_LOG")
        .stdin(Stdio::null())
        .output()
        .await
        .with_context(|| format!("running {}", overture.display()))?;
    let elapsed = start.elapsed();

    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(20).collect();
        anyhow::bail!(
            "`overture deploy` of {steps} {kind:?} steps ended with {}; last lines of its output:\n{}",
            output.status,
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
    Ok(Deployed { steps, elapsed })
}
