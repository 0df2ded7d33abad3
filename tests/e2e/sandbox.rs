//! What a script step can see: only its own workspace and the variables it was given; and what
//! happens past the sandbox's limits: the attempt fails at once, saying which and by how much.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{assert_step, id_of, text, Overture};

/// How long a received job stays another engine's (the embedded engine's `LEASE`): an attempt
/// whose runner died is found and failed only once it has passed.
const JOB_LEASE: Duration = Duration::from_secs(30);

/// Deploys `file` and asserts it failed (exit code 1) at once, not after the job's lease;
/// returns the final status and the progress printed.
fn fails_at_once(overture: &Overture, file: &Path) -> (Value, String) {
    let started = Instant::now();
    let (code, status, output) = overture.deploy(file, &[]);
    let took = started.elapsed();
    let progress = text(&output.stderr);
    assert_eq!(code, 1, "{progress}");
    // An attempt failed through the lease takes at least the lease, however fast the machine;
    // one failed at once takes a few seconds even on a loaded one. The callers also check that
    // the one failure recorded is the step's, not an interruption.
    assert!(
        took < JOB_LEASE,
        "failed at once, not after the job's lease: {took:?}"
    );
    (status, progress)
}

#[test]
fn a_step_sees_neither_the_data_directory_nor_root_nor_other_workspaces_and_only_its_variables() {
    let overture = Overture::new();
    let data = overture.data_dir();
    let data = data.to_str().expect("path");
    let file = overture.blueprint(
        "peek.yaml",
        &format!(
            r#"
name: peek
params: {{ shown: {{ default: "yes" }} }}
steps:
  holder:
    run: script
    with: {{ command: 'echo private > mine.txt; sleep 1' }}
  peeker:
    run: script
    with:
      command: |
        ls {data} >/dev/null 2>&1 && echo "data=visible" >> "$OVERTURE_OUTPUTS"
        cat {data}/overture.db >/dev/null 2>&1 && echo "db=readable" >> "$OVERTURE_OUTPUTS"
        ls /root >/dev/null 2>&1 && echo "root=visible" >> "$OVERTURE_OUTPUTS"
        cat {data}/sandboxes/*/work/mine.txt >/dev/null 2>&1 && echo "neighbour=readable" >> "$OVERTURE_OUTPUTS"
        touch /usr/overture-was-here 2>/dev/null && echo "usr=writable" >> "$OVERTURE_OUTPUTS"
        echo "param={{{{ params.shown }}}}" >> "$OVERTURE_OUTPUTS"
        echo "env=$(env | cut -d= -f1 | grep -v -x -e PWD -e SHLVL -e _ | sort | tr '\n' ,)" >> "$OVERTURE_OUTPUTS"
"#
        ),
    );
    let status = overture.deploy_ok(&file, &[]);
    let outputs = &status["steps"]["peeker"]["outputs"];
    assert_eq!(
        outputs
            .as_object()
            .expect("outputs")
            .keys()
            .cloned()
            .collect::<Vec<_>>(),
        ["env", "param"],
        "the step saw something it must not: {outputs}"
    );
    assert_eq!(outputs["param"], "yes");
    assert_eq!(
        outputs["env"],
        "HOME,OVERTURE_ATTEMPT,OVERTURE_DEPLOYMENT,OVERTURE_OUTPUTS,OVERTURE_REF_1,OVERTURE_STEP,PATH,",
        "only the variables it was given"
    );
    assert!(!std::path::Path::new("/usr/overture-was-here").exists());
}

/// The failed attempt's `StepAttemptFailed` data, for a deployment with one failed step.
fn only_failure(overture: &Overture, id: &str) -> Value {
    let events = overture.events(id);
    let failures: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "StepAttemptFailed")
        .collect();
    assert_eq!(failures.len(), 1, "{events:?}");
    failures[0]["data"].clone()
}

#[test]
fn a_command_too_long_for_an_argument_runs_and_one_over_the_limit_fails_at_once() {
    let overture = Overture::new();
    // 300 KB: more than the kernel takes as one argument, so it reaches the shell as a file.
    let long = overture.blueprint(
        "long.yaml",
        &format!(
            "name: long\nsteps:\n  big:\n    run: script\n    with: {{ command: 'v={}; echo \"n=${{#v}}\" >> \"$OVERTURE_OUTPUTS\"' }}\n",
            "a".repeat(300_000)
        ),
    );
    let status = overture.deploy_ok(&long, &[]);
    assert_eq!(status["steps"]["big"]["outputs"]["n"], "300000");

    // A command longer than a blueprint may be is refused before anything is recorded.
    let huge = overture.blueprint(
        "huge.yaml",
        &format!(
            "name: huge\nsteps:\n  big:\n    run: script\n    with: {{ command: 'echo {} > /dev/null' }}\n",
            "a".repeat(3_000_000)
        ),
    );
    let (code, _, output) = overture.deploy(&huge, &[]);
    assert_eq!(code, 2, "{}", text(&output.stderr));
    assert!(
        text(&output.stderr).contains("more than the 1048576 (1 MiB) a blueprint may have"),
        "{}",
        text(&output.stderr)
    );

    // One that grows past the sandbox's limit as its references are placed (each becomes a
    // quoted variable, longer than the reference) fails its attempt at once, saying why.
    let grown = overture.blueprint(
        "grown.yaml",
        &format!(
            "name: grown\nparams: {{ p: {{ default: x }} }}\nsteps:\n  big:\n    run: script\n    with: {{ command: 'true {}' }}\n",
            "{{params.p}}".repeat(70_000)
        ),
    );
    let (status, progress) = fails_at_once(&overture, &grown);
    assert_step(&status, "big", "failed", 1);
    let failure = only_failure(&overture, &id_of(&status));
    assert_eq!(failure["error_class"], "step-failed");
    let message = failure["message"].as_str().expect("message");
    assert!(message.contains("at most 1 MiB"), "{message}");
    assert!(
        progress.contains("attempt 1 failed (step-failed): "),
        "{progress}"
    );
    assert!(
        !progress.contains("WARN") && !progress.contains("interrupted"),
        "{progress}"
    );
}

#[test]
fn a_step_writing_more_than_1_mib_of_outputs_fails_at_once_saying_how_much() {
    let (overture, file) = Overture::with_blueprint(
        "outputs.yaml",
        r#"
name: outputs
steps:
  chatty:
    run: script
    with: { command: 'echo starting; yes k=0123456789 | head -c 2000000 > "$OVERTURE_OUTPUTS"' }
"#,
    );
    let (status, progress) = fails_at_once(&overture, &file);
    let failure = only_failure(&overture, &id_of(&status));
    assert_eq!(failure["error_class"], "step-failed");
    assert_eq!(failure["exit_code"], 0);
    let message = failure["message"].as_str().expect("message");
    assert!(
        message.starts_with(
            "wrote 1.9 MiB (2000000 bytes) to $OVERTURE_OUTPUTS; at most 1 MiB (1048576 bytes) is read"
        ),
        "{message}"
    );
    assert!(message.ends_with("last output:\nstarting"), "{message}");
    assert!(
        progress.contains("attempt 1 failed (step-failed): wrote 1.9 MiB"),
        "{progress}"
    );
    assert!(!progress.contains("WARN"), "{progress}");
}

#[test]
fn an_output_too_large_for_a_variable_fails_the_step_that_uses_it_at_once_naming_the_variable() {
    let (overture, file) = Overture::with_blueprint(
        "variable.yaml",
        r#"
name: variable
steps:
  producer:
    run: script
    with: { command: 'printf "big=%s\n" "$(head -c 200000 /dev/zero | tr "\0" y)" >> "$OVERTURE_OUTPUTS"' }
  consumer:
    run: script
    needs: [producer]
    with: { command: 'echo "{{ steps.producer.outputs.big }}" | wc -c' }
"#,
    );
    let (status, progress) = fails_at_once(&overture, &file);
    assert_eq!(status["steps"]["producer"]["status"], "succeeded");
    let failure = only_failure(&overture, &id_of(&status));
    assert_eq!(failure["step"], "consumer");
    assert_eq!(failure["error_class"], "step-failed");
    let message = failure["message"].as_str().expect("message");
    assert!(
        message.starts_with(
            "the step's variable `OVERTURE_REF_1` (`NAME=value`) is 195.3 KiB (200015 bytes); the kernel passes at most 127.9 KiB (131071 bytes) in one variable"
        ),
        "{message}"
    );
    assert!(!message.contains("yyyy"), "no value in the message");
    assert!(!progress.contains("WARN"), "{progress}");
}

/// A directory for `PATH` holding links to the sandbox's tools but `left_out`.
fn path_without(left_out: &[&str]) -> tempfile::TempDir {
    let bin = tempfile::tempdir().expect("a PATH directory");
    for program in ["bwrap", "nsenter", "nft", "pasta"] {
        if left_out.contains(&program) {
            continue;
        }
        let found = std::env::var_os("PATH")
            .iter()
            .flat_map(std::env::split_paths)
            .map(|dir| dir.join(program))
            .find(|path| path.is_file())
            .unwrap_or_else(|| panic!("{program} is installed (scripts/setup.sh)"));
        std::os::unix::fs::symlink(found, bin.path().join(program)).expect("linked");
    }
    bin
}

#[test]
fn an_engine_on_a_machine_without_pasta_or_nft_refuses_to_start_naming_them_and_records_nothing() {
    let (overture, file) = Overture::with_blueprint(
        "hello.yaml",
        "name: hello\nsteps:\n  a: { run: script, with: { command: 'true' } }\n",
    );
    let bin = path_without(&["pasta", "nft"]);
    for args in [
        vec!["deploy", file.to_str().expect("a UTF-8 path")],
        vec!["resume"],
        vec![
            "serve",
            "--addr",
            "127.0.0.1:0",
            "--auth-url",
            "http://127.0.0.1:9/v3",
        ],
    ] {
        let output = overture
            .command(&args)
            .env("PATH", bin.path())
            .output()
            .expect("overture runs");
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(3), "{args:?}: {stderr}");
        for named in [
            "steps cannot run on this machine",
            "`pasta`",
            "`apt-get install passt`",
            "`nft`",
            "`apt-get install nftables`",
            "scripts/setup.sh",
        ] {
            assert!(stderr.contains(named), "{args:?} names {named}: {stderr}");
        }
        assert!(!stderr.contains("`bwrap`"), "bubblewrap is there: {stderr}");
    }
    assert!(overture.deployment_ids().is_empty(), "nothing was recorded");
}
