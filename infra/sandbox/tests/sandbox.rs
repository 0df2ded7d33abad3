//! The bubblewrap sandbox against the real `bwrap`: what a step sees, what it cannot reach, and
//! that nothing of it (processes, workspace) survives a run, however the run ends.
//!
//! These need root and bubblewrap, as the engine does. Waits in here poll for a condition the
//! test must observe (a process appearing); none of them is a sleep that hides a race.

use std::collections::BTreeSet;
use std::future::Future;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use overture_sandbox::{
    Bubblewrap, Exit, OutputsFile, SandboxError, SandboxOutcome, SandboxRequest, MAX_COMMAND,
    MAX_ENVIRONMENT, MAX_OUTPUTS_FILE, MAX_VARIABLE,
};
use secrecy::SecretString;
use tempfile::TempDir;

mod support;

use support::{request, run, sandbox};

// ---------------------------------------------------------------------------------------------
// Helpers

fn workspaces(root: &TempDir) -> PathBuf {
    root.path().join("workspaces")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A string no other test (or earlier run) uses.
fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4().simple())
}

/// Pids of live processes whose command line or environment contains `marker`.
///
/// The environment is searched too because a step's children inherit it: `sleep 300` has no
/// marker on its command line, but it carries the step's variables.
fn marked_processes(marker: &str) -> Vec<u32> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse().ok())
        else {
            continue;
        };
        // A process may exit between listing and reading: then it is not alive to report.
        let marked = ["cmdline", "environ"].iter().any(|file| {
            std::fs::read(entry.path().join(file))
                .is_ok_and(|content| contains(&content, marker.as_bytes()))
        });
        if marked {
            found.push(pid);
        }
    }
    found
}

/// Every process command line on the host, for secrets that must not be there.
fn all_command_lines() -> Vec<Vec<u8>> {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|entry| std::fs::read(entry.path().join("cmdline")).ok())
        .collect()
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle)
}

/// Polls until `condition` holds, for at most 20 s.
async fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Runs `request` with a cancel future, and `watch` alongside it.
async fn run_watched<W: Future<Output = ()>>(
    sandbox: &Bubblewrap,
    request: SandboxRequest,
    cancel: impl Future<Output = ()>,
    watch: W,
) -> Result<SandboxOutcome, SandboxError> {
    let (outcome, ()) = tokio::join!(sandbox.run(request, cancel), watch);
    outcome
}

fn interface_names(proc_net_dev: &str) -> BTreeSet<String> {
    proc_net_dev
        .lines()
        .skip(2)
        .filter_map(|line| line.split_once(':'))
        .map(|(name, _)| name.trim().to_owned())
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Exit, output and outputs file

#[tokio::test]
async fn success_captures_stdout_stderr_and_the_outputs_file() {
    let (sandbox, _root) = sandbox();
    let outcome = run(
        &sandbox,
        request(
            "ok",
            r#"echo to-stdout; echo to-stderr >&2; echo a=1 >> "$OVERTURE_OUTPUTS""#,
        ),
    )
    .await;
    assert_eq!(outcome.exit, Exit::Code(0));
    assert_eq!(text(&outcome.output), "to-stdout\nto-stderr\n");
    assert_eq!(outcome.outputs_file, OutputsFile::Read(b"a=1\n".to_vec()));
    assert!(outcome.duration > Duration::ZERO);
}

#[tokio::test]
async fn exit_codes_and_signals_are_reported() {
    let (sandbox, _root) = sandbox();
    let failed = run(&sandbox, request("fail", "echo partial; exit 3")).await;
    assert_eq!(failed.exit, Exit::Code(3));
    assert_eq!(text(&failed.output), "partial\n");
    assert_eq!(failed.outputs_file, OutputsFile::Read(vec![]));

    let killed = run(&sandbox, request("signal", "kill -9 $$")).await;
    assert_eq!(killed.exit, Exit::Signal(9));
}

#[tokio::test]
async fn stdout_and_stderr_keep_the_order_they_were_written_in() {
    let (sandbox, _root) = sandbox();
    let script = "for i in $(seq 1 200); do echo out$i; echo err$i >&2; done";
    let outcome = run(&sandbox, request("order", script)).await;
    assert_eq!(outcome.exit, Exit::Code(0));
    let expected: String = (1..=200).map(|i| format!("out{i}\nerr{i}\n")).collect();
    assert_eq!(text(&outcome.output), expected);
}

#[tokio::test]
async fn output_keeps_only_the_tail() {
    let (sandbox, _root) = sandbox();
    let mut request = request("tail", "seq 1 100000; echo last >&2");
    request.output_limit = 64;
    let outcome = run(&sandbox, request).await;
    assert_eq!(outcome.exit, Exit::Code(0));
    assert_eq!(outcome.output.len(), 64);
    assert!(
        text(&outcome.output).ends_with("100000\nlast\n"),
        "{}",
        text(&outcome.output)
    );
}

#[tokio::test]
async fn files_the_step_leaves_are_collected_however_it_ends_but_never_through_a_link() {
    let (sandbox, _root) = sandbox();
    let mut ask = request(
        &unique("collect"),
        "mkdir -p state && echo kept > state/file && ln -s /etc/passwd link && \
         mkdir real && ln -s /etc linked-dir && exit 3",
    );
    ask.collect = ["state/file", "link", "linked-dir/passwd", "missing", "real"]
        .map(PathBuf::from)
        .to_vec();
    let outcome = run(&sandbox, ask).await;
    assert_eq!(outcome.exit, Exit::Code(3));
    assert_eq!(
        outcome.collected,
        vec![(PathBuf::from("state/file"), b"kept\n".to_vec())],
        "only the regular file reached through real directories comes back"
    );
}

/// A log that shares what it was given with the test.
#[derive(Clone, Default)]
struct SharedLog(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for SharedLog {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("lock").extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn the_whole_output_goes_to_the_log_while_only_the_tail_is_kept() {
    let (sandbox, _root) = sandbox();
    let log = SharedLog::default();
    let mut ask = request(&unique("log"), "seq 1 2000; echo done >&2");
    ask.output_limit = 16;
    ask.log = Some(Box::new(log.clone()));
    let outcome = run(&sandbox, ask).await;
    let logged = text(&log.0.lock().expect("lock"));
    assert!(logged.starts_with("1\n2\n3\n"), "{logged:.20}");
    assert!(logged.ends_with("1999\n2000\ndone\n"));
    assert_eq!(
        outcome.output,
        logged.as_bytes()[logged.len() - 16..],
        "the tail is the end of what was logged"
    );
}

#[tokio::test]
async fn input_files_are_placed_in_the_working_directory() {
    let (sandbox, _root) = sandbox();
    let mut request = request("files", r#"cat in/config.txt; pwd; echo "$HOME""#);
    request.files = vec![(PathBuf::from("in/config.txt"), b"hello\n".to_vec())];
    let outcome = run(&sandbox, request).await;
    assert_eq!(outcome.exit, Exit::Code(0));
    assert_eq!(text(&outcome.output), "hello\n/work\n/work\n");
}

// ---------------------------------------------------------------------------------------------
// Environment

#[tokio::test]
async fn the_step_sees_only_the_variables_it_was_given() {
    let (sandbox, _root) = sandbox();
    let mut request = request("env", "env -0");
    request.env = vec![("PLAIN_VAR".into(), "plain value".into())];
    request.secret_env = vec![("SECRET_VAR".into(), SecretString::from("s3cr3t"))];
    let outcome = run(&sandbox, request).await;
    assert_eq!(outcome.exit, Exit::Code(0));

    let vars: Vec<(String, String)> = text(&outcome.output)
        .split('\0')
        .filter(|entry| !entry.is_empty())
        .filter_map(|entry| entry.split_once('='))
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect();
    let value = |name: &str| {
        vars.iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    };
    let names: BTreeSet<&str> = vars.iter().map(|(name, _)| name.as_str()).collect();
    let shells_own = ["PWD", "SHLVL", "_"];
    let extra: Vec<_> = names
        .iter()
        .filter(|name| {
            ![
                "PLAIN_VAR",
                "SECRET_VAR",
                "PATH",
                "HOME",
                "OVERTURE_OUTPUTS",
            ]
            .contains(name)
                && !shells_own.contains(name)
        })
        .collect();
    assert!(extra.is_empty(), "unexpected variables {extra:?}");
    assert_eq!(value("PLAIN_VAR"), Some("plain value"));
    assert_eq!(value("SECRET_VAR"), Some("s3cr3t"));
    assert_eq!(value("PATH"), Some("/usr/local/bin:/usr/bin:/bin"));
    assert_eq!(value("HOME"), Some("/work"));
    assert_eq!(value("OVERTURE_OUTPUTS"), Some("/run/overture/outputs"));
}

#[tokio::test]
async fn secrets_are_on_no_command_line() {
    let (sandbox, _root) = sandbox();
    let marker = unique("secret-test");
    let secret = unique("the-secret");
    let mut request = request("secret", "sleep 300");
    request.env = vec![("MARKER".into(), marker.clone())];
    request.secret_env = vec![("TOKEN".into(), SecretString::from(secret.clone()))];

    let (cancel_tx, cancel_rx) = tokio::sync::oneshot::channel::<()>();
    let watch = async {
        wait_until("the step runs", || !marked_processes(&marker).is_empty()).await;
        // The secret did reach the step, in its environment, where it belongs.
        let pids = marked_processes(&marker);
        assert!(pids.iter().any(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|environ| contains(&environ, secret.as_bytes()))
        }));
        let leaks: Vec<_> = all_command_lines()
            .into_iter()
            .filter(|cmdline| contains(cmdline, secret.as_bytes()))
            .map(|cmdline| text(&cmdline))
            .collect();
        assert!(leaks.is_empty(), "secret on a command line: {leaks:?}");
        let _ = cancel_tx.send(());
    };
    let cancel = async {
        let _ = cancel_rx.await;
    };
    let outcome = run_watched(&sandbox, request, cancel, watch)
        .await
        .expect("runs");
    assert_eq!(outcome.exit, Exit::Cancelled);
}

// ---------------------------------------------------------------------------------------------
// Isolation

#[tokio::test]
async fn the_step_cannot_see_host_paths() {
    let (sandbox, _root) = sandbox();
    // Engine data directories, both under /tmp and under the repository (/work on the host,
    // which inside the sandbox is the step's own workspace).
    let data_in_tmp = tempfile::tempdir().expect("temporary directory");
    let data_in_work =
        tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("temporary directory");
    let mut hidden: Vec<PathBuf> = ["/root", "/home", "/var", "/etc/shadow", "/etc/ssl/private"]
        .iter()
        .map(PathBuf::from)
        .collect();
    for data in [&data_in_tmp, &data_in_work] {
        let file = data.path().join("overture.db");
        std::fs::write(&file, "engine data").expect("write the data file");
        hidden.push(data.path().to_owned());
        hidden.push(file);
    }

    for (n, path) in hidden.iter().enumerate() {
        // Each check would pass vacuously if the path were missing on the host as well.
        assert!(path.exists(), "{} should exist on the host", path.display());
        let command = format!("test -e '{}'", path.display());
        let outcome = run(&sandbox, request(&format!("hidden-{n}"), &command)).await;
        assert_eq!(outcome.exit, Exit::Code(1), "{} is visible", path.display());
    }
    // And the same check does see what is meant to be there.
    let outcome = run(&sandbox, request("visible", "test -e /etc/passwd")).await;
    assert_eq!(outcome.exit, Exit::Code(0));
}

#[tokio::test]
async fn the_step_cannot_read_another_running_sandbox() {
    let (sandbox, root) = sandbox();
    let marker = unique("tenant-a");
    let mut tenant_a = request("tenant-a", "sleep 300");
    tenant_a.env = vec![("MARKER".into(), marker.clone())];
    tenant_a.files = vec![(PathBuf::from("secret.txt"), b"tenant-a-secret".to_vec())];
    let secret_path = workspaces(&root).join("tenant-a/work/secret.txt");

    let (cancel_tx, cancel_rx) = tokio::sync::oneshot::channel::<()>();
    let watch = async {
        wait_until("tenant A runs", || !marked_processes(&marker).is_empty()).await;
        // The path is right: the host can read it while A runs.
        assert_eq!(
            std::fs::read(&secret_path).expect("A's file"),
            b"tenant-a-secret"
        );
        let command = format!(
            "cat '{}'; ls '{}'",
            secret_path.display(),
            workspaces(&root).display()
        );
        let tenant_b = run(&sandbox, request("tenant-b", &command)).await;
        assert_ne!(tenant_b.exit, Exit::Code(0));
        assert!(!contains(&tenant_b.output, b"tenant-a-secret"));
        let _ = cancel_tx.send(());
    };
    let cancel = async {
        let _ = cancel_rx.await;
    };
    let tenant_a = run_watched(&sandbox, tenant_a, cancel, watch)
        .await
        .expect("runs");
    assert_eq!(tenant_a.exit, Exit::Cancelled);
}

#[tokio::test]
async fn system_directories_are_read_only() {
    let (sandbox, _root) = sandbox();
    for (n, target) in [
        "/usr/x",
        "/usr/bin/x",
        "/etc/x",
        "/etc/passwd",
        "/x",
        "/run/x",
    ]
    .iter()
    .enumerate()
    {
        let command = format!("echo x >> {target}");
        let outcome = run(&sandbox, request(&format!("ro-{n}"), &command)).await;
        assert_ne!(outcome.exit, Exit::Code(0), "{target} is writable");
    }
    // Usr and etc are real host directories: make sure nothing was written there either.
    assert!(!Path::new("/usr/x").exists() && !Path::new("/etc/x").exists());

    let writable = run(
        &sandbox,
        request("rw", "echo x > /work/x && echo x > /tmp/x"),
    )
    .await;
    assert_eq!(writable.exit, Exit::Code(0));
}

#[tokio::test]
async fn without_network_only_loopback_is_left() {
    let (sandbox, _root) = sandbox();
    let host = interface_names(&std::fs::read_to_string("/proc/net/dev").expect("/proc/net/dev"));
    assert!(
        host.iter().any(|name| name != "lo"),
        "the host needs an interface besides lo for this test to mean anything: {host:?}"
    );

    let offline = run(&sandbox, request("offline", "cat /proc/net/dev")).await;
    assert_eq!(offline.exit, Exit::Code(0));
    assert_eq!(
        interface_names(&text(&offline.output)),
        BTreeSet::from(["lo".to_owned()])
    );

    let mut online = request("online", "cat /proc/net/dev");
    online.network = true;
    let online = run(&sandbox, online).await;
    assert_eq!(online.exit, Exit::Code(0));
    assert_eq!(interface_names(&text(&online.output)), host);
}

// ---------------------------------------------------------------------------------------------
// Nothing survives a run

#[tokio::test]
async fn a_timeout_kills_every_process_promptly() {
    let (sandbox, root) = sandbox();
    let marker = unique("timeout-test");
    // Redirected, so that the output pipe closing says nothing about the sleeps being gone.
    let mut request = request(
        "timeout",
        &format!("sleep 300 >/dev/null 2>&1 & sleep 300 >/dev/null 2>&1 # {marker}"),
    );
    request.env = vec![("MARKER".into(), marker.clone())];
    request.timeout = Duration::from_secs(1);

    let started = Instant::now();
    let mut most_seen = 0;
    let watch = async {
        // bubblewrap's two processes and the two sleeps.
        wait_until("both sleeps run", || {
            most_seen = most_seen.max(marked_processes(&marker).len());
            most_seen >= 4
        })
        .await;
    };
    let outcome = run_watched(&sandbox, request, std::future::pending(), watch)
        .await
        .expect("runs");
    let elapsed = started.elapsed();

    assert_eq!(outcome.exit, Exit::TimedOut);
    assert!(elapsed < Duration::from_secs(5), "took {elapsed:?}");
    assert!(outcome.duration >= Duration::from_secs(1));
    assert_eq!(marked_processes(&marker), Vec::<u32>::new());
    assert!(!workspaces(&root).join("timeout").exists());
}

#[tokio::test]
async fn cancelling_kills_every_process() {
    let (sandbox, root) = sandbox();
    let marker = unique("cancel-test");
    let mut request = request(
        "cancel",
        &format!("sleep 300 >/dev/null 2>&1 & sleep 300 >/dev/null 2>&1 # {marker}"),
    );
    request.env = vec![("MARKER".into(), marker.clone())];

    let (cancel_tx, cancel_rx) = tokio::sync::oneshot::channel::<()>();
    let watch = async {
        wait_until("both sleeps run", || marked_processes(&marker).len() >= 4).await;
        let _ = cancel_tx.send(());
    };
    let cancel = async {
        let _ = cancel_rx.await;
    };
    let started = Instant::now();
    let outcome = run_watched(&sandbox, request, cancel, watch)
        .await
        .expect("runs");

    assert_eq!(outcome.exit, Exit::Cancelled);
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(marked_processes(&marker), Vec::<u32>::new());
    assert!(!workspaces(&root).join("cancel").exists());
}

#[tokio::test]
async fn background_processes_do_not_outlive_a_step_that_exits() {
    let (sandbox, _root) = sandbox();
    let marker = unique("background-test");
    // Waits until the background child has become `sleep`, so it surely exists at exit; and
    // redirects it, so that the output pipe closing says nothing about it being gone.
    let mut request = request(
        "background",
        r#"sleep 300 >/dev/null 2>&1 &
           until [ "$(cat /proc/$!/comm)" = sleep ]; do :; done
           echo started"#,
    );
    request.env = vec![("MARKER".into(), marker.clone())];
    let outcome = run(&sandbox, request).await;
    assert_eq!(outcome.exit, Exit::Code(0));
    assert_eq!(text(&outcome.output), "started\n");
    assert_eq!(marked_processes(&marker), Vec::<u32>::new());
}

#[tokio::test]
async fn the_workspace_is_removed_however_the_run_ends() {
    let (sandbox, root) = sandbox();
    let mut timing_out = request("timed-out", "sleep 300");
    timing_out.timeout = Duration::from_millis(200);
    for request in [
        request("succeeded", "echo x > /work/left-behind"),
        request("failed", "echo x > /work/left-behind; exit 1"),
        timing_out,
    ] {
        let id = request.id.clone();
        run(&sandbox, request).await;
        assert!(!workspaces(&root).join(&id).exists(), "{id} is still there");
    }
    let cancelled = sandbox
        .run(request("cancelled", "sleep 300"), async {})
        .await;
    assert_eq!(cancelled.expect("runs").exit, Exit::Cancelled);

    // A sandbox that fails before the step runs.
    let fake = root.path().join("fake-bwrap");
    std::fs::write(&fake, "#!/bin/sh\necho 'bwrap: no luck' >&2\nexit 1\n").expect("write");
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let broken = Bubblewrap::with_program(fake, workspaces(&root));
    let error = broken
        .run(request("setup-failed", "true"), std::future::pending())
        .await
        .expect_err("bubblewrap fails");
    assert!(
        matches!(&error, SandboxError::Setup { message } if message.contains("no luck")),
        "{error:?}"
    );

    let left: Vec<_> = std::fs::read_dir(workspaces(&root))
        .expect("workspace root")
        .flatten()
        .map(|entry| entry.file_name())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

// ---------------------------------------------------------------------------------------------
// Refused requests

#[tokio::test]
async fn unsafe_ids_and_file_paths_are_refused() {
    let (sandbox, root) = sandbox();
    for id in ["../x", "/etc/x", "", "a/b", ".."] {
        let error = sandbox
            .run(request(id, "true"), std::future::pending())
            .await
            .expect_err("refused");
        assert!(
            matches!(error, SandboxError::InvalidId { .. }),
            "{id}: {error:?}"
        );
    }
    for path in ["../x", "/etc/x", "a/../../x"] {
        let mut request = request("files", "true");
        request.files = vec![(PathBuf::from(path), b"x".to_vec())];
        let error = sandbox
            .run(request, std::future::pending())
            .await
            .expect_err("refused");
        assert!(
            matches!(error, SandboxError::InvalidFilePath { .. }),
            "{path}: {error:?}"
        );
    }
    for (name, value) in [("PATH", "/x"), ("A=B", "x"), ("OK", "nul\0byte")] {
        let mut request = request("env", "true");
        request.env = vec![(name.into(), value.into())];
        let error = sandbox
            .run(request, std::future::pending())
            .await
            .expect_err("refused");
        assert!(
            matches!(error, SandboxError::InvalidEnv { .. }),
            "{name}: {error:?}"
        );
    }
    assert!(
        !workspaces(&root).exists(),
        "a refused request touched the disk"
    );
    assert!(!Path::new("/etc/x").exists() && !root.path().join("x").exists());
}

#[tokio::test]
async fn a_command_too_long_for_an_argument_runs_from_a_file() {
    let (sandbox, _root) = sandbox();
    // Far over the kernel's 128 KiB for one argument: bubblewrap could not even be started
    // with it on its command line.
    let payload = "x".repeat(900 * 1024);
    let command = format!("v='{payload}'; echo \"${{#v}} $0\"");
    let outcome = run(&sandbox, request("long-command", &command)).await;
    assert_eq!(outcome.exit, Exit::Code(0), "{}", text(&outcome.output));
    assert_eq!(
        text(&outcome.output),
        format!("{} /run/overture/command\n", payload.len())
    );
}

#[tokio::test]
async fn what_the_kernel_could_not_hand_to_the_shell_is_refused_up_front() {
    let (sandbox, root) = sandbox();
    let too_long = "x".repeat(MAX_COMMAND + 1);
    let error = sandbox
        .run(request("huge", &too_long), std::future::pending())
        .await
        .expect_err("refused");
    assert!(
        matches!(error, SandboxError::CommandTooLong { bytes, limit: MAX_COMMAND } if bytes == MAX_COMMAND + 1),
        "{error:?}"
    );

    let mut big_variable = request("big-variable", "true");
    big_variable.secret_env = vec![("BIG".into(), SecretString::from("y".repeat(MAX_VARIABLE)))];
    let error = sandbox
        .run(big_variable, std::future::pending())
        .await
        .expect_err("refused");
    assert!(
        matches!(&error, SandboxError::VariableTooLong { name, .. } if name == "BIG"),
        "{error:?}"
    );
    assert!(!error.to_string().contains("yyyy"), "no value in {error}");

    let mut many = request("many-variables", "true");
    many.env = (0..MAX_ENVIRONMENT / (64 * 1024) + 1)
        .map(|i| (format!("V{i}"), "z".repeat(64 * 1024)))
        .collect();
    let error = sandbox
        .run(many, std::future::pending())
        .await
        .expect_err("refused");
    assert!(
        matches!(
            error,
            SandboxError::EnvironmentTooLarge {
                limit: MAX_ENVIRONMENT,
                ..
            }
        ),
        "{error:?}"
    );
    assert!(
        !workspaces(&root).exists(),
        "a refused request touched the disk"
    );

    // The largest variable allowed does reach the shell.
    let mut largest = request("largest-variable", r#"echo "${#BIG}""#);
    largest.env = vec![("BIG".into(), "y".repeat(MAX_VARIABLE - "BIG=".len()))];
    let outcome = run(&sandbox, largest).await;
    assert_eq!(
        text(&outcome.output),
        format!("{}\n", MAX_VARIABLE - "BIG=".len())
    );
}

#[tokio::test]
async fn an_outputs_file_over_the_limit_is_measured_not_read() {
    let (sandbox, _root) = sandbox();
    let outcome = run(
        &sandbox,
        request(
            "big-outputs",
            r#"head -c 2000000 /dev/zero | tr '\0' a > "$OVERTURE_OUTPUTS"; echo done"#,
        ),
    )
    .await;
    assert_eq!(outcome.exit, Exit::Code(0));
    assert_eq!(text(&outcome.output), "done\n");
    assert_eq!(
        outcome.outputs_file,
        OutputsFile::TooLarge {
            bytes: 2_000_000,
            limit: MAX_OUTPUTS_FILE
        }
    );
}

#[tokio::test]
async fn an_existing_workspace_is_refused_and_left_alone() {
    let (sandbox, root) = sandbox();
    let existing = workspaces(&root).join("taken");
    std::fs::create_dir_all(&existing).expect("mkdir");
    std::fs::write(existing.join("keep"), "mine").expect("write");
    let error = sandbox
        .run(request("taken", "true"), std::future::pending())
        .await
        .expect_err("refused");
    assert!(
        matches!(error, SandboxError::WorkspaceExists { .. }),
        "{error:?}"
    );
    assert_eq!(
        std::fs::read(existing.join("keep")).expect("still there"),
        b"mine"
    );
}

#[tokio::test]
async fn a_missing_bubblewrap_says_how_to_install_it() {
    let root = tempfile::tempdir().expect("temporary directory");
    let sandbox = Bubblewrap::with_program("/nonexistent/bwrap".into(), root.path().join("ws"));
    let error = sandbox
        .run(request("missing", "true"), std::future::pending())
        .await
        .expect_err("no bubblewrap");
    assert!(
        matches!(error, SandboxError::NotInstalled { .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("apt-get install bubblewrap"));
    assert!(!root.path().join("ws/missing").exists());
}

#[tokio::test]
async fn bubblewrap_is_available_here() {
    Bubblewrap::available().await.expect("bubblewrap works");
}

#[tokio::test]
async fn the_engine_program_is_shown_read_only_only_to_steps_that_ask_for_it() {
    let root = tempfile::tempdir().expect("temporary directory");
    // Any program stands in for the engine's own: it is run, not inspected.
    let sandbox = Bubblewrap::new(root.path().join("workspaces"))
        .with_engine_program(PathBuf::from("/usr/bin/echo"));
    let program = overture_sandbox::ENGINE_PROGRAM;

    let mut asking = request(
        &unique("engine"),
        &format!("{program} made it; echo x > {program} || echo read-only"),
    );
    asking.engine_program = true;
    let outcome = run(&sandbox, asking).await;
    assert_eq!(outcome.exit, Exit::Code(0), "{}", text(&outcome.output));
    assert_eq!(text(&outcome.output).lines().next(), Some("made it"));
    assert!(
        text(&outcome.output).contains("read-only"),
        "{}",
        text(&outcome.output)
    );

    let other = run(
        &sandbox,
        request(
            &unique("engine"),
            &format!("test -e {program} || echo absent"),
        ),
    )
    .await;
    assert_eq!(text(&other.output), "absent\n");

    let (without, _root) = self::sandbox();
    let mut asking = request(&unique("engine"), "true");
    asking.engine_program = true;
    let refused = without.run(asking, std::future::pending()).await;
    assert!(
        matches!(refused, Err(SandboxError::NoEngineProgram)),
        "{refused:?}"
    );
}

/// What a hostile step tries first: the kernel's global knobs, capabilities, the init's secrets.
const ROOT_PROBES: &str = r#"
echo "uid=$(id -u) gid=$(id -g) groups=$(id -G)"
grep -E '^Cap(Prm|Eff|Bnd|Amb):' /proc/self/status
for knob in /proc/sys/vm/swappiness /proc/sys/kernel/core_pattern /proc/sysrq-trigger; do
    if (cat "$knob" > "$knob") 2>/dev/null; then echo "WROTE $knob"; else echo "refused $knob"; fi
done
if cat /proc/1/environ >/dev/null 2>&1; then echo "READ init environ"; fi
if mount -t tmpfs none /work 2>/dev/null; then echo "MOUNTED"; fi
"#;

fn assert_unprivileged(output: &str) {
    assert!(
        output.contains(&format!(
            "uid={} gid={} groups={}",
            overture_sandbox::STEP_UID,
            overture_sandbox::STEP_GID,
            overture_sandbox::STEP_GID
        )),
        "{output}"
    );
    for set in ["CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert!(
            output.contains(&format!("{set}:\t0000000000000000")),
            "{set} is not empty: {output}"
        );
    }
    assert!(
        output.contains("refused /proc/sys/vm/swappiness")
            && output.contains("refused /proc/sys/kernel/core_pattern"),
        "{output}"
    );
    for escape in ["WROTE", "READ init", "MOUNTED"] {
        assert!(!output.contains(escape), "{escape}: {output}");
    }
}

#[tokio::test]
async fn a_step_runs_as_its_own_user_with_no_capabilities_and_cannot_touch_the_kernel() {
    let (sandbox, _root) = sandbox();
    let swappiness = std::fs::read_to_string("/proc/sys/vm/swappiness").expect("swappiness");
    let outcome = run(&sandbox, request(&unique("root"), ROOT_PROBES)).await;
    assert_eq!(outcome.exit, Exit::Code(0), "{}", text(&outcome.output));
    assert_unprivileged(&text(&outcome.output));
    assert_eq!(
        std::fs::read_to_string("/proc/sys/vm/swappiness").expect("swappiness"),
        swappiness
    );
}

#[tokio::test]
async fn a_networked_step_is_as_unprivileged_as_any() {
    let (sandbox, _root) = sandbox();
    let mut networked = request(&unique("root-net"), ROOT_PROBES);
    networked.network = true;
    networked.network_policy = Some(overture_sandbox::NetworkPolicy::default());
    let outcome = run(&sandbox, networked).await;
    assert_eq!(outcome.exit, Exit::Code(0), "{}", text(&outcome.output));
    assert_unprivileged(&text(&outcome.output));
}

#[tokio::test]
async fn the_steps_inputs_and_workspace_are_its_own() {
    let (sandbox, _root) = sandbox();
    let mut request = request(
        &unique("own"),
        "stat -c '%u %a %n' /work /work/keys/id /run/overture/outputs && cat /work/keys/id \
         && mkdir /work/made && echo out > \"$OVERTURE_OUTPUTS\"",
    );
    request.files = vec![(PathBuf::from("keys/id"), b"key".to_vec())];
    let outcome = run(&sandbox, request).await;
    let output = text(&outcome.output);
    assert_eq!(outcome.exit, Exit::Code(0), "{output}");
    let uid = overture_sandbox::STEP_UID;
    assert!(output.contains(&format!("{uid} 711 /work\n")), "{output}");
    assert!(
        output.contains(&format!("{uid} 600 /work/keys/id\n")),
        "{output}"
    );
    assert!(
        output.contains(&format!("{uid} 600 /run/overture/outputs\n")),
        "{output}"
    );
    assert!(output.contains("key"), "{output}");
}
