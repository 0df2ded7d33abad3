//! `examples/haproxy-cluster` on the local cloud: its wall time with steps waiting for services
//! at run time, beside the same workflow forced into a strict sequence (every step after the one
//! before it), from the same run: what blocking at planning time would lose.
//!
//! One local cloud (`overture cloud up`) in a temporary directory serves every deployment; it is
//! brought down (`overture cloud down`) and its directory removed whatever happens. The two
//! variants are deployed alternately ([`RUNS`] times each), every run with a fresh data directory
//! and a fresh project (tenant) of the cloud, so that no registry, server or deployment is shared.
//! From the run-time-waits deployments' events comes how long `db` and `app-install` ran side by
//! side, which is where the gain comes from.
//!
//! It needs root (the cloud's servers are network namespaces), `ip netns` and
//! `/usr/sbin/haproxy` (`scripts/setup.sh` installs it).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::{DateTime, Utc};

use crate::aws_costs::workspace_root;

/// Deployments of each variant, alternating.
pub const RUNS: usize = 2;

/// The example, relative to the workspace.
const EXAMPLE: &str = "examples/haproxy-cluster";

/// The two steps that run side by side with run-time waiting.
const SIDE_BY_SIDE: [&str; 2] = ["db", "app-install"];

/// What the cluster section measured.
#[derive(Clone, Debug)]
pub struct Cluster {
    /// Wall time of each run-time-waits deployment, in the order run.
    pub waits: Vec<Duration>,
    /// Wall time of each strict-sequence deployment, in the order run.
    pub sequence: Vec<Duration>,
    /// How long `db` and `app-install` overlapped in each run-time-waits deployment.
    pub overlap: Vec<Duration>,
}

impl Cluster {
    /// The median wall time of the run-time-waits deployments, in seconds.
    pub fn waits_secs(&self) -> f64 {
        median(&self.waits)
    }

    /// The median wall time of the strict-sequence deployments, in seconds.
    pub fn sequence_secs(&self) -> f64 {
        median(&self.sequence)
    }

    /// What the strict sequence costs more, in seconds.
    pub fn gain_secs(&self) -> f64 {
        self.sequence_secs() - self.waits_secs()
    }

    /// The gain as a percentage of the strict sequence's time.
    pub fn gain_percent(&self) -> f64 {
        100.0 * self.gain_secs() / self.sequence_secs()
    }

    /// The median overlap of `db` and `app-install`, in seconds.
    pub fn overlap_secs(&self) -> f64 {
        median(&self.overlap)
    }
}

/// The median of some durations, in seconds (the mean of the middle two for an even count).
fn median(values: &[Duration]) -> f64 {
    let mut secs: Vec<f64> = values.iter().map(Duration::as_secs_f64).collect();
    secs.sort_by(f64::total_cmp);
    match secs.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => secs[n / 2],
        n => (secs[n / 2 - 1] + secs[n / 2]) / 2.0,
    }
}

/// Fails at once, with what is missing, where the cluster cannot be deployed.
pub fn check_prerequisites() -> anyhow::Result<()> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    anyhow::ensure!(
        euid == 0,
        "the cluster section needs root: the local cloud's servers are network namespaces (run it with sudo)"
    );
    let netns = std::process::Command::new("ip")
        .args(["netns", "list"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    anyhow::ensure!(
        matches!(netns, Ok(status) if status.success()),
        "the cluster section needs `ip netns` (iproute2) for the local cloud's servers; `ip netns list` did not run"
    );
    anyhow::ensure!(
        Path::new("/usr/sbin/haproxy").is_file(),
        "the cluster section needs haproxy at /usr/sbin/haproxy (scripts/setup.sh installs it)"
    );
    Ok(())
}

/// The local cloud, brought down (`overture cloud down --dir`) and its directory removed when
/// dropped, on every path.
struct LocalCloud {
    overture: PathBuf,
    /// Removed after `drop` has brought the cloud down (fields drop after `Drop::drop`).
    dir: tempfile::TempDir,
    auth_url: String,
}

impl LocalCloud {
    fn up(overture: &Path) -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("overture-bench-cloud.")
            .tempdir()
            .context("creating the cloud's temporary directory")?;
        let mut cloud = Self {
            overture: overture.to_owned(),
            dir,
            auth_url: String::new(),
        };
        // From here, whatever `up` started is stopped when `cloud` is dropped.
        let output = std::process::Command::new(overture)
            .args(["cloud", "up", "--dir"])
            .arg(cloud.state())
            .stdin(Stdio::null())
            // The server runs on in the background: nothing of it may hold our pipes open.
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .context("running overture cloud up")?;
        anyhow::ensure!(output.success(), "`overture cloud up` ended with {output}");
        let json = std::fs::read(cloud.state().join("cloud.json"))
            .context("reading the cloud's cloud.json")?;
        let json: serde_json::Value =
            serde_json::from_slice(&json).context("parsing the cloud's cloud.json")?;
        cloud.auth_url = json["auth_url"]
            .as_str()
            .context("cloud.json has no auth_url")?
            .to_owned();
        Ok(cloud)
    }

    fn state(&self) -> PathBuf {
        self.dir.path().join("cloud")
    }

    /// A token of `project` (made if new), in a file of the cloud's directory.
    fn token(&self, project: &str) -> anyhow::Result<PathBuf> {
        let file = self.dir.path().join(format!("{project}.token"));
        let output = std::process::Command::new(&self.overture)
            .args(["cloud", "token", "--dir"])
            .arg(self.state())
            .args(["--project", project, "--out"])
            .arg(&file)
            .env("OS_AUTH_URL", &self.auth_url)
            .stdin(Stdio::null())
            .output()
            .context("running overture cloud token")?;
        anyhow::ensure!(
            output.status.success(),
            "`overture cloud token --project {project}` ended with {}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
        Ok(file)
    }
}

impl Drop for LocalCloud {
    fn drop(&mut self) {
        let down = std::process::Command::new(&self.overture)
            .args(["cloud", "down", "--dir"])
            .arg(self.state())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .output();
        match down {
            Ok(output) if output.status.success() => {}
            Ok(output) => eprintln!(
                "warning: `overture cloud down --dir {}` ended with {}: {}",
                self.state().display(),
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            ),
            Err(error) => eprintln!("warning: running overture cloud down: {error}"),
        }
    }
}

/// The blueprint's text with every step needing the one before it, in blueprint order (the
/// first none), and everything else (`requires`, `provides`, `watch`) kept.
pub fn strict_sequence(blueprint: &str) -> anyhow::Result<String> {
    use serde_yaml_ng::Value;
    let mut document: Value =
        serde_yaml_ng::from_str(blueprint).context("parsing the cluster's blueprint")?;
    let steps = document
        .get_mut("steps")
        .and_then(Value::as_mapping_mut)
        .context("the cluster's blueprint has no steps")?;
    let mut previous: Option<Value> = None;
    for (name, step) in steps.iter_mut() {
        let step = step
            .as_mapping_mut()
            .with_context(|| format!("step {name:?} is not a mapping"))?;
        match previous {
            Some(before) => {
                step.insert("needs".into(), Value::Sequence(vec![before]));
            }
            None => {
                step.remove("needs");
            }
        }
        previous = Some(name.clone());
    }
    if let Some(name) = document.get_mut("name") {
        *name = Value::from("haproxy-cluster-sequence");
    }
    serde_yaml_ng::to_string(&document).context("writing the strict-sequence blueprint")
}

/// Copies a folder of files (and folders) into `to`.
fn copy_tree(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(to).with_context(|| format!("creating {}", to.display()))?;
    for entry in std::fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target).with_context(|| {
                format!("copying {} to {}", entry.path().display(), target.display())
            })?;
        }
    }
    Ok(())
}

/// Runs `overture ARGS`, which must exit 0; its standard output.
async fn overture_ok(
    overture: &Path,
    args: &[&std::ffi::OsStr],
    what: &str,
) -> anyhow::Result<String> {
    let output = tokio::process::Command::new(overture)
        .args(args)
        .env_remove("OVERTURE_LOG")
        .stdin(Stdio::null())
        .output()
        .await
        .with_context(|| format!("running {what}"))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(20).collect();
        anyhow::bail!(
            "{what} ended with {}; last lines of its output:\n{}",
            output.status,
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
    String::from_utf8(output.stdout).with_context(|| format!("{what} printed no UTF-8"))
}

/// One deployment of `blueprint` with a fresh data directory (under `scratch`) and a token of
/// a fresh `project`: its wall time and the data directory, to read its events from.
async fn deploy(
    overture: &Path,
    cloud: &LocalCloud,
    blueprint: &Path,
    project: &str,
    scratch: &Path,
) -> anyhow::Result<(Duration, PathBuf)> {
    let token = cloud.token(project)?;
    let data = scratch.join(format!("data-{project}"));
    let start = Instant::now();
    let output = tokio::process::Command::new(overture)
        .arg("--data-dir")
        .arg(&data)
        .arg("deploy")
        .arg(blueprint)
        .arg("--token-file")
        .arg(&token)
        .env("OS_AUTH_URL", &cloud.auth_url)
        .env_remove("OVERTURE_LOG")
        .stdin(Stdio::null())
        .output()
        .await
        .context("running overture deploy")?;
    let elapsed = start.elapsed();
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(20).collect();
        anyhow::bail!(
            "`overture deploy {}` for project {project} ended with {}; last lines of its output:\n{}",
            blueprint.display(),
            output.status,
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
    Ok((elapsed, data))
}

/// How long `db` and `app-install` overlapped in the one deployment of `data`: from the later
/// of their first `StepStarted` to the earlier of their `StepSucceeded`, as the log recorded them.
async fn overlap(overture: &Path, data: &Path) -> anyhow::Result<Duration> {
    let data = data.as_os_str();
    let list = overture_ok(
        overture,
        &[
            "--data-dir".as_ref(),
            data,
            "list".as_ref(),
            "--json".as_ref(),
        ],
        "overture list --json",
    )
    .await?;
    let list: serde_json::Value =
        serde_json::from_str(&list).context("parsing overture list --json")?;
    let id = list
        .as_array()
        .and_then(|deployments| deployments.first())
        .and_then(|deployment| deployment["id"].as_str())
        .context("overture list --json shows no deployment")?
        .to_owned();
    let events = overture_ok(
        overture,
        &[
            "--data-dir".as_ref(),
            data,
            "events".as_ref(),
            id.as_ref(),
            "--json".as_ref(),
            "--type".as_ref(),
            "StepStarted,StepSucceeded".as_ref(),
        ],
        "overture events --json",
    )
    .await?;
    // Per step of SIDE_BY_SIDE: its first start and its success.
    let mut started: [Option<DateTime<Utc>>; 2] = [None; 2];
    let mut succeeded: [Option<DateTime<Utc>>; 2] = [None; 2];
    for line in events.lines().filter(|line| !line.trim().is_empty()) {
        let event: serde_json::Value =
            serde_json::from_str(line).context("parsing a line of overture events --json")?;
        let Some(index) = SIDE_BY_SIDE
            .iter()
            .position(|step| event["data"]["step"].as_str() == Some(step))
        else {
            continue;
        };
        let at = event["metadata"]["recorded_at"]
            .as_str()
            .context("an event without metadata.recorded_at")?;
        let at = DateTime::parse_from_rfc3339(at)
            .with_context(|| format!("recorded_at {at:?} is not RFC 3339"))?
            .with_timezone(&Utc);
        match event["type"].as_str() {
            Some("StepStarted") => {
                started[index].get_or_insert(at);
            }
            Some("StepSucceeded") => succeeded[index] = Some(at),
            _ => {}
        }
    }
    let times = |index: usize| -> anyhow::Result<(DateTime<Utc>, DateTime<Utc>)> {
        let step = SIDE_BY_SIDE[index];
        Ok((
            started[index].with_context(|| format!("no StepStarted of {step}"))?,
            succeeded[index].with_context(|| format!("no StepSucceeded of {step}"))?,
        ))
    };
    let (a, b) = (times(0)?, times(1)?);
    let from = a.0.max(b.0);
    let to = a.1.min(b.1);
    Ok((to - from).to_std().unwrap_or(Duration::ZERO))
}

/// Deploys the cluster [`RUNS`] times each way, alternately, on one local cloud.
pub async fn cluster(overture: &Path) -> anyhow::Result<Cluster> {
    check_prerequisites()?;
    let example = workspace_root().join(EXAMPLE);
    let waits_blueprint = example.join("blueprint.yaml");
    let scratch = tempfile::Builder::new()
        .prefix("overture-bench-cluster.")
        .tempdir()
        .context("creating a temporary directory")?;

    // The strict sequence, beside a copy of the playbooks.
    let text = std::fs::read_to_string(&waits_blueprint)
        .with_context(|| format!("reading {}", waits_blueprint.display()))?;
    let sequence_dir = scratch.path().join("sequence");
    copy_tree(&example.join("playbooks"), &sequence_dir.join("playbooks"))?;
    let sequence_blueprint = sequence_dir.join("blueprint.yaml");
    std::fs::write(&sequence_blueprint, strict_sequence(&text)?)
        .with_context(|| format!("writing {}", sequence_blueprint.display()))?;
    for blueprint in [&waits_blueprint, &sequence_blueprint] {
        overture_ok(
            overture,
            &["validate".as_ref(), blueprint.as_os_str()],
            &format!("overture validate {}", blueprint.display()),
        )
        .await?;
    }

    let cloud = LocalCloud::up(overture)?;
    let mut figures = Cluster {
        waits: Vec::new(),
        sequence: Vec::new(),
        overlap: Vec::new(),
    };
    for run in 1..=RUNS {
        let project = format!("bench-waits-{run}");
        let (elapsed, data) =
            deploy(overture, &cloud, &waits_blueprint, &project, scratch.path()).await?;
        let overlapped = overlap(overture, &data).await?;
        eprintln!(
            "  run-time waits #{run}: {:.2} s (db and app-install side by side for {:.2} s)",
            elapsed.as_secs_f64(),
            overlapped.as_secs_f64()
        );
        figures.waits.push(elapsed);
        figures.overlap.push(overlapped);

        let project = format!("bench-seq-{run}");
        let (elapsed, _) = deploy(
            overture,
            &cloud,
            &sequence_blueprint,
            &project,
            scratch.path(),
        )
        .await?;
        eprintln!("  strict sequence #{run}: {:.2} s", elapsed.as_secs_f64());
        figures.sequence.push(elapsed);
    }
    drop(cloud);
    Ok(figures)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_strict_sequence_chains_every_step_and_keeps_the_services() {
        let text = std::fs::read_to_string(workspace_root().join(EXAMPLE).join("blueprint.yaml"))
            .expect("the example's blueprint");
        let sequence = strict_sequence(&text).expect("a strict sequence");
        let sequence: serde_yaml_ng::Value =
            serde_yaml_ng::from_str(&sequence).expect("YAML again");
        let steps = sequence["steps"].as_mapping().expect("steps");
        let names: Vec<&str> = steps.keys().filter_map(|k| k.as_str()).collect();
        assert_eq!(
            names,
            [
                "servers",
                "booted",
                "db",
                "app-install",
                "app",
                "lb",
                "check-1",
                "check-2"
            ]
        );
        assert!(steps["servers"].get("needs").is_none());
        for pair in names.windows(2) {
            let needs: Vec<&str> = steps[pair[1]]["needs"]
                .as_sequence()
                .expect("needs")
                .iter()
                .filter_map(|n| n.as_str())
                .collect();
            assert_eq!(needs, [pair[0]]);
        }
        assert_eq!(steps["app"]["requires"][0]["service"].as_str(), Some("db"));
        assert_eq!(steps["db"]["provides"]["service"].as_str(), Some("db"));
        assert_eq!(steps["lb"]["watch"][0].as_str(), Some("app"));
    }
}
