//! A step's limits against the real `bwrap` and the machine's cgroups: a memory hog, a fork bomb
//! and a disk filler each fail naming their limit, CPU is capped as asked, and nothing of an
//! attempt's cgroup or workspace mount is left after it, however it ended.
//!
//! These need root and bubblewrap, as the engine does. The one wait polls for the step's cgroup
//! to appear; nothing sleeps to hide a race.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use overture_sandbox::{Exit, LimitReached, SandboxOutcome, SandboxRequest, StepLimits};
use tempfile::TempDir;

const MIB: u64 = 1024 * 1024;

mod support;

use support::{run, sandbox};

/// A request with small limits, which each test lowers further where it tests one.
fn request(id: &str, command: &str) -> SandboxRequest {
    SandboxRequest {
        output_limit: 64 * 1024,
        limits: StepLimits {
            memory_bytes: 64 * MIB,
            pids: 64,
            cpu_millis: 1000,
            workspace_bytes: 8 * MIB,
            log_bytes: MIB,
        },
        ..support::request(&format!("{id}-{}", uuid::Uuid::new_v4().simple()), command)
    }
}

/// Runs `request` in a sandbox of its own: it must end having reached `limit`, leaving nothing
/// of the attempt behind. Its outcome.
async fn reaches(request: SandboxRequest, limit: LimitReached) -> SandboxOutcome {
    let (sandbox, root) = sandbox();
    let id = request.id.clone();
    let outcome = run(&sandbox, request).await;
    assert_eq!(
        outcome.exit,
        Exit::LimitReached(limit),
        "{}",
        String::from_utf8_lossy(&outcome.output)
    );
    assert_gone(&id, &root);
    outcome
}

/// Directories named `name` in the cgroup hierarchies, at any depth.
fn cgroups_named(name: &str) -> Vec<PathBuf> {
    fn walk(dir: &Path, name: &str, depth: usize, found: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let path = entry.path();
            if entry.file_name() == name {
                found.push(path.clone());
            }
            if depth < 8 {
                walk(&path, name, depth + 1, found);
            }
        }
    }
    let mut found = Vec::new();
    walk(Path::new("/sys/fs/cgroup"), name, 0, &mut found);
    found
}

/// Nothing of the attempt is left: no cgroup, no mount, no workspace.
fn assert_gone(id: &str, root: &TempDir) {
    assert_eq!(cgroups_named(id), Vec::<PathBuf>::new(), "cgroups left");
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    assert!(
        !mounts.contains(&root.path().display().to_string()),
        "a workspace mount is left"
    );
    let workspaces = root.path().join("workspaces");
    let left: Vec<_> = std::fs::read_dir(&workspaces)
        .map(|entries| entries.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "workspaces left: {left:?}");
}

#[tokio::test]
async fn a_memory_hog_is_killed_as_out_of_memory() {
    // `tail` keeps the whole of a line that never ends.
    let request = request("hog", "head -c 512M /dev/zero | tail -n 1 > /dev/null");
    reaches(request, LimitReached::Memory { limit: 64 * MIB }).await;
    assert_eq!(
        LimitReached::Memory { limit: 64 * MIB }.to_string(),
        "out of memory (limit 64 MiB)"
    );
}

#[tokio::test]
async fn a_fork_bomb_reaches_the_process_limit() {
    let mut request = request(
        "bomb",
        "i=0; while [ $i -lt 1000 ]; do sleep 300 & i=$((i+1)); done; wait",
    );
    request.limits.pids = 16;
    // The sleeps it left go with the sandbox, and so does its group.
    reaches(request, LimitReached::Processes { limit: 16 }).await;
}

#[tokio::test]
async fn a_disk_filler_fills_only_its_workspace() {
    let mut request = request("filler", "dd if=/dev/zero of=big bs=64k count=1000");
    request.limits.workspace_bytes = 2 * MIB;
    let outcome = reaches(request, LimitReached::Workspace { limit: 2 * MIB }).await;
    assert!(
        String::from_utf8_lossy(&outcome.output).contains("No space left on device"),
        "{}",
        String::from_utf8_lossy(&outcome.output)
    );
}

#[tokio::test]
async fn the_outputs_file_is_inside_the_workspace_limit_too() {
    let mut request = request(
        "outputs",
        "dd if=/dev/zero of=\"$OVERTURE_OUTPUTS\" bs=64k count=1000",
    );
    request.limits.workspace_bytes = 2 * MIB;
    reaches(request, LimitReached::Workspace { limit: 2 * MIB }).await;
}

#[tokio::test]
async fn a_step_within_its_limits_and_one_failing_for_itself_say_nothing_of_limits() {
    let (sandbox, root) = sandbox();
    let within = request(
        "within",
        "dd if=/dev/zero of=f bs=64k count=16 2>/dev/null && ls -s f",
    );
    let within_id = within.id.clone();
    let outcome = run(&sandbox, within).await;
    assert_eq!(outcome.exit, Exit::Code(0));
    let failing = request("failing", "exit 3");
    let failing_id = failing.id.clone();
    let outcome = run(&sandbox, failing).await;
    assert_eq!(outcome.exit, Exit::Code(3));
    assert_gone(&within_id, &root);
    assert_gone(&failing_id, &root);
}

#[tokio::test]
async fn the_cpu_quota_is_set_and_the_group_goes_when_the_run_is_cancelled() {
    let (sandbox, root) = sandbox();
    let mut request = request("cpu", "sleep 300");
    request.limits.cpu_millis = 1500;
    let id = request.id.clone();
    let (quota_tx, quota_rx) = tokio::sync::oneshot::channel();
    let cancel = async {
        let deadline = Instant::now() + Duration::from_secs(20);
        let quota = loop {
            let found = cgroups_named(&id);
            let quota = found.iter().find_map(|dir| {
                // v1 first, then v2.
                std::fs::read_to_string(dir.join("cpu.cfs_quota_us"))
                    .or_else(|_| std::fs::read_to_string(dir.join("cpu.max")))
                    .ok()
            });
            if let Some(quota) = quota {
                break quota;
            }
            assert!(
                Instant::now() < deadline,
                "the step's cgroup never appeared"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let _ = quota_tx.send(quota);
    };
    let outcome = sandbox.run(request, cancel).await.expect("runs");
    assert_eq!(outcome.exit, Exit::Cancelled);
    let quota = quota_rx.await.expect("a quota was read");
    assert!(
        quota.trim() == "150000" || quota.trim() == "150000 100000",
        "{quota}"
    );
    assert_gone(&id, &root);
}

#[tokio::test]
async fn the_machine_s_cgroup_version_is_known() {
    let (sandbox, _root) = sandbox();
    let version = sandbox.cgroup_version().expect("cgroups are usable here");
    assert!(
        version == "cgroup v1" || version == "cgroup v2",
        "{version}"
    );
}
