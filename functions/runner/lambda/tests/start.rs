//! The runner function's start, run as the real binary: its pre-flight check, and what a killed
//! runner left in its work directory (a workspace, an attempt's cgroup with a process in it).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use overture_sandbox::Bubblewrap;

/// Settings the runner reads before it starts serving; the values only need to be there (no
/// AWS call is made before the runtime API, which is missing, ends the run).
const SETTINGS: [(&str, &str); 11] = [
    ("OVERTURE_KMS_KEY", "alias/start-test"),
    ("OVERTURE_PAYLOADS_BUCKET", "start-test"),
    ("OVERTURE_CUSTODY_TABLE", "start-test-custody"),
    ("OVERTURE_EVENTS_TABLE", "start-test-events"),
    ("OVERTURE_SEALS_TABLE", "start-test-seals"),
    ("OVERTURE_LEASES_TABLE", "start-test-leases"),
    ("OVERTURE_JOBS_QUEUE_URL", "http://127.0.0.1:9/queue"),
    ("AWS_REGION", "us-east-1"),
    ("AWS_ACCESS_KEY_ID", "start-test"),
    ("AWS_SECRET_ACCESS_KEY", "start-test"),
    ("AWS_EC2_METADATA_DISABLED", "true"),
];

/// Runs the runner binary on `work` with `path` as its `PATH`, until it exits by itself (it
/// has no runtime API to serve), within a generous deadline.
fn start(work: &Path, path: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_runner"))
        .env_clear()
        .envs(SETTINGS)
        .env("PATH", path)
        .env("OVERTURE_WORK_DIR", work)
        .env("OVERTURE_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the runner starts");
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().expect("the runner's state").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the runner did not exit within 60s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("the runner's output")
}

/// The directory of `program` on this machine's `PATH`.
fn found(program: &str) -> PathBuf {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(program))
        .find(|path| path.is_file())
        .unwrap_or_else(|| panic!("{program} is installed (scripts/setup.sh)"))
}

#[test]
fn a_runner_on_a_machine_without_pasta_or_nft_exits_3_naming_them_and_their_packages() {
    let work = tempfile::tempdir().expect("a work directory");
    let bin = tempfile::tempdir().expect("a PATH directory");
    // Everything the sandbox runs but pasta and nft (the sandbox looks tools up on PATH).
    for program in ["bwrap", "nsenter"] {
        std::os::unix::fs::symlink(found(program), bin.path().join(program)).expect("linked");
    }
    let output = start(work.path(), bin.path().to_str().expect("a UTF-8 path"));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("`pasta`") && stderr.contains("`apt-get install passt`"),
        "{stderr}"
    );
    assert!(
        stderr.contains("`nft`") && stderr.contains("`apt-get install nftables`"),
        "{stderr}"
    );
    assert!(stderr.contains("scripts/setup.sh"), "{stderr}");
    assert!(!stderr.contains("`bwrap`"), "bubblewrap is there: {stderr}");
}

#[test]
fn a_runner_clears_what_a_killed_runner_left_in_its_work_directory_and_says_so() {
    let work = tempfile::tempdir().expect("a work directory");
    let root = work.path().join("sandboxes");
    // A workspace, its /work a tmpfs as a live sandbox's is.
    let leftover = root.join("01-killed-step-1");
    std::fs::create_dir_all(leftover.join("work")).expect("a leftover workspace");
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
        .arg(leftover.join("work"))
        .status()
        .expect("mount runs");
    assert!(mounted.success(), "a tmpfs is mounted as root");
    std::fs::write(leftover.join("work/partial"), "left").expect("a leftover file");
    // The attempt's cgroup under the runner's own parent group, with a process still in it.
    let parents = Bubblewrap::new(root.clone()).cgroup_parents();
    assert!(!parents.is_empty(), "this machine has cgroups");
    let mut survivor = Command::new("sleep").arg("600").spawn().expect("a process");
    for parent in &parents {
        let group = parent.join("01-killed-step-1");
        std::fs::create_dir_all(&group).expect("a leftover cgroup");
        std::fs::write(group.join("cgroup.procs"), survivor.id().to_string())
            .expect("the process joins it");
    }

    let output = start(work.path(), &std::env::var("PATH").unwrap_or_default());
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let line = said
        .lines()
        .find(|line| line.contains("cleared the sandboxes a killed runner left"))
        .unwrap_or_else(|| panic!("a line says what was cleared: {said}"));
    assert!(
        line.contains("1 cgroup(s) and 1 workspace(s) removed"),
        "{line}"
    );
    assert!(!leftover.exists(), "the workspace is gone: {said}");
    for parent in &parents {
        assert!(!parent.join("01-killed-step-1").exists(), "{said}");
    }
    // Killed before the runner went on, so it has exited (or is about to be seen to).
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut ended = None;
    while ended.is_none() && Instant::now() < deadline {
        ended = survivor.try_wait().expect("its state");
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = survivor.kill();
    assert!(ended.is_some(), "the process left in the cgroup was killed");
}
