//! `terraform` steps and `overture destroy`, with the real terraform program. The
//! configurations use only the built-in `terraform_data` resource and `local-exec`, so nothing
//! is downloaded and nothing leaves the machine.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::support::{
    assert_causal, files_containing, gone_within, id_of, marker, step_events, text, types, Overture,
};

/// Writes `main.tf` into the folder `dir` beside the blueprint file.
fn configuration(blueprint: &Path, dir: &str, main_tf: &str) {
    let folder = blueprint
        .parent()
        .expect("the blueprint's folder")
        .join(dir);
    std::fs::create_dir_all(&folder).expect("create the configuration's folder");
    std::fs::write(folder.join("main.tf"), main_tf).expect("write main.tf");
}

/// The output of one run of a step, as the data directory keeps it.
fn log(overture: &Overture, id: &str, step: &str, name: &str) -> String {
    let path = overture
        .data_dir()
        .join("logs")
        .join(id)
        .join(step)
        .join(format!("{name}.log"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Runs `overture destroy ID`, which must succeed, and returns the step's destroy log.
fn destroyed(overture: &Overture, id: &str, step: &str) -> String {
    let output = overture.run(&["destroy", id]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    log(overture, id, step, "destroy")
}

/// Runs `overture ARGS`, which must be refused as bad input (exit code 2); returns its message.
fn refused(overture: &Overture, args: &[&str]) -> String {
    let output = overture.run(args);
    let message = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{args:?}: {message}");
    message
}

/// `first` records whether the attempt found a kept state; it is planned and applied before
/// anything of the run is written to the state. `flaky` fails unless it did.
const FAILS_UNTIL_STATE_IS_KEPT: &str = r#"
resource "terraform_data" "first" {
  input = try(length(file("${path.module}/terraform.tfstate")), 0) > 0
}

resource "terraform_data" "flaky" {
  depends_on = [terraform_data.first]
  provisioner "local-exec" {
    command = terraform_data.first.output ? "echo found the kept state" : "echo no state yet; exit 1"
  }
}
"#;

#[test]
fn a_failed_apply_is_retried_with_the_state_it_left_and_succeeds() {
    let (overture, file) = Overture::with_blueprint(
        "retried.yaml",
        "name: retried\nsteps:\n  infra: { run: terraform, with: { dir: infra } }\n",
    );
    configuration(&file, "infra", FAILS_UNTIL_STATE_IS_KEPT);
    let (code, status, output) = overture.deploy(&file, &[]);
    assert_eq!(code, 0, "{}", text(&output.stderr));
    assert_eq!(status["status"], "succeeded");
    assert_eq!(status["steps"]["infra"]["attempts"], 2);

    let id = id_of(&status);
    let events = overture.events(&id);
    assert_causal(&events, &BTreeMap::new());
    assert_eq!(
        step_events(&events, "infra"),
        [
            ("StepScheduled", 1),
            ("StepStarted", 1),
            ("StepNetworkPolicyApplied", 1),
            ("StepAttemptFailed", 1),
            ("StepRetryScheduled", 1),
            ("StepStarted", 2),
            ("StepNetworkPolicyApplied", 2),
            ("StepSucceeded", 2),
        ]
        .map(|(t, a)| (t.to_owned(), a))
    );
    let failed = &events[types(&events)
        .iter()
        .position(|t| t == "StepAttemptFailed")
        .expect("the first attempt failed")]["data"];
    assert_eq!(failed["error_class"], "terraform");
    assert_eq!(failed["exit_code"], 1);
    let message = failed["message"].as_str().expect("message");
    assert!(
        message
            .starts_with("`terraform apply` failed with exit code 1: local-exec provisioner error"),
        "{message}"
    );
    assert!(
        message.contains("no state yet"),
        "the output's tail: {message}"
    );

    let first = log(&overture, &id, "infra", "1");
    assert!(
        first.contains("terraform_data.first: Creation complete"),
        "{first}"
    );
    let second = log(&overture, &id, "infra", "2");
    assert!(
        second.contains("terraform_data.flaky is tainted, so must be replaced")
            && second.contains("found the kept state")
            && !second.contains("terraform_data.first: Creating"),
        "the second attempt carried on from the state the first left:\n{second}"
    );
}

#[test]
fn a_configuration_that_always_fails_fails_after_two_attempts_and_can_still_be_destroyed() {
    let (overture, file) = Overture::with_blueprint(
        "broken.yaml",
        "name: broken\nsteps:\n  infra: { run: terraform, with: { dir: infra } }\n  after: { run: noop, needs: [infra] }\n",
    );
    configuration(
        &file,
        "infra",
        r#"
resource "terraform_data" "made" {
  input = "made before the failure"
}

resource "terraform_data" "broken" {
  depends_on = [terraform_data.made]
  provisioner "local-exec" {
    command = "echo 'quota exceeded' >&2; exit 3"
  }
}
"#,
    );
    let (code, status, output) = overture.deploy(&file, &[]);
    assert_eq!(
        code,
        1,
        "a failed deployment exits 1: {}",
        text(&output.stderr)
    );
    assert_eq!(status["status"], "failed");
    assert_eq!(status["steps"]["infra"]["status"], "failed");
    assert_eq!(status["steps"]["infra"]["attempts"], 2);
    assert_eq!(status["steps"]["infra"]["error_class"], "terraform");
    assert_eq!(status["steps"]["after"]["status"], "pending");

    let id = id_of(&status);
    let events = overture.events(&id);
    assert_causal(&events, &[("after", vec!["infra"])].into());
    let failures: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "StepAttemptFailed")
        .collect();
    assert_eq!(failures.len(), 2, "the terraform class allows one retry");
    for failure in failures {
        assert_eq!(failure["data"]["error_class"], "terraform");
        assert!(failure["data"]["message"]
            .as_str()
            .expect("message")
            .contains("quota exceeded"));
    }
    assert!(types(&events).contains(&"StepFailed".to_owned()));

    // What the failed attempts made is in the kept state, so it can be destroyed.
    let destroy_log = destroyed(&overture, &id, "infra");
    assert!(
        destroy_log.contains("terraform_data.made: Destruction complete")
            && destroy_log.contains("Destroy complete! Resources: 2 destroyed."),
        "{destroy_log}"
    );
}

#[test]
fn terraform_outputs_flow_into_a_later_script_step_and_sensitive_ones_are_left_out() {
    let (overture, file) = Overture::with_blueprint(
        "outputs.yaml",
        r#"
name: outputs
params:
  host: { default: "7" }
steps:
  infra:
    run: terraform
    with:
      dir: infra
      vars: { host: "{{ params.host }}", ports: [80, 443] }
  app:
    run: script
    needs: [infra]
    with:
      command: 'echo "seen={{ steps.infra.outputs.address }}" >> "$OVERTURE_OUTPUTS"; echo "ports={{ steps.infra.outputs.ports }}" >> "$OVERTURE_OUTPUTS"'
"#,
    );
    configuration(
        &file,
        "infra",
        r#"
variable "host" {
  type = string
}

variable "ports" {
  type = list(number)
}

resource "terraform_data" "server" {
  input = "10.0.0.${var.host}"
}

output "address" {
  value = terraform_data.server.output
}

output "ports" {
  value = var.ports
}

output "password" {
  value     = "hunter2-${var.host}"
  sensitive = true
}
"#,
    );
    let (code, status, output) = overture.deploy(&file, &["--param", "host=42"]);
    assert_eq!(code, 0, "{}", text(&output.stderr));
    assert_eq!(
        status["steps"]["infra"]["outputs"],
        json!({"address": "10.0.0.42", "ports": "[80,443]"}),
        "text as it is, other values as compact JSON, the sensitive output left out"
    );
    assert_eq!(
        status["steps"]["app"]["outputs"],
        json!({"seen": "10.0.0.42", "ports": "[80,443]"})
    );
    let events = overture.events(&id_of(&status));
    assert_causal(&events, &[("app", vec!["infra"])].into());
    let recorded = serde_json::to_string(&events).expect("JSON");
    assert!(
        !recorded.contains("hunter2-42"),
        "no event holds the sensitive output's value"
    );
}

#[test]
fn the_terraform_example_deploys_and_destroys() {
    let overture = Overture::new();
    let example = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/terraform/blueprint.yaml"
    );
    let status = overture.deploy_ok(Path::new(example), &[]);
    assert_eq!(
        status["steps"]["announce"]["outputs"]["announced"],
        "staging-net"
    );
    let id = id_of(&status);
    let destroy_log = destroyed(&overture, &id, "network");
    assert!(
        destroy_log.contains("releasing network staging-net")
            && destroy_log.contains("Destroy complete! Resources: 3 destroyed."),
        "{destroy_log}"
    );
}

/// Two Terraform steps, `app` needing `net`, each with a resource that says so when destroyed.
fn two_steps(overture: &Overture) -> PathBuf {
    let file = overture.blueprint(
        "two.yaml",
        r#"
name: two
steps:
  net: { run: terraform, with: { dir: net } }
  app: { run: terraform, needs: [net], with: { dir: app } }
  report: { run: script, needs: [app], with: { command: "true" } }
"#,
    );
    for dir in ["net", "app"] {
        configuration(
            &file,
            dir,
            &format!(
                r#"
resource "terraform_data" "{dir}" {{
  input = "{dir}"
  provisioner "local-exec" {{
    when    = destroy
    command = "echo tearing down ${{self.output}}"
  }}
}}
"#
            ),
        );
    }
    file
}

#[test]
fn destroy_tears_a_deployment_down_dependents_first_and_only_once() {
    let overture = Overture::new();
    let file = two_steps(&overture);
    let (code, status, output) = overture.deploy(&file, &[]);
    assert_eq!(code, 0, "{}", text(&output.stderr));
    let id = id_of(&status);
    let deployed = overture.events(&id).len();

    let destroyed = overture.run(&["destroy", &id, "--json"]);
    assert_eq!(
        destroyed.status.code(),
        Some(0),
        "{}",
        text(&destroyed.stderr)
    );
    let after: Value = serde_json::from_slice(&destroyed.stdout).expect("status JSON");
    assert_eq!(
        after["status"], "succeeded",
        "the deployment's own status stays"
    );
    assert_eq!(after["destroy"]["status"], "destroyed");
    assert!(after["destroy"]["at"].is_string());
    assert_eq!(overture.json(&["status", &id, "--json"]), after);
    let progress = text(&destroyed.stderr);
    assert!(
        progress.contains("destroying the resources of: app, net")
            && progress.contains("deployment destroyed"),
        "{progress}"
    );

    let events = overture.events(&id);
    let tail: Vec<(String, Value)> = events[deployed..]
        .iter()
        .map(|e| {
            (
                e["type"].as_str().expect("type").to_owned(),
                e["data"].clone(),
            )
        })
        .collect();
    assert_eq!(tail.len(), 4, "{tail:?}");
    assert_eq!(
        tail[0],
        ("DestroyRequested".into(), json!({"steps": ["app", "net"]}))
    );
    assert_eq!(
        (tail[1].0.as_str(), &tail[1].1["step"]),
        ("StepDestroyed", &json!("app"))
    );
    assert_eq!(
        (tail[2].0.as_str(), &tail[2].1["step"]),
        ("StepDestroyed", &json!("net"))
    );
    assert_eq!(tail[3].0, "DeploymentDestroyed");
    for step in ["app", "net"] {
        let destroy_log = log(&overture, &id, step, "destroy");
        assert!(
            destroy_log.contains(&format!("tearing down {step}"))
                && destroy_log.contains("Destroy complete! Resources: 1 destroyed."),
            "{step}: {destroy_log}"
        );
    }

    let again = refused(&overture, &["destroy", &id]);
    assert!(
        again.contains(&format!("deployment {id} has already been destroyed")),
        "{again}"
    );
    assert_eq!(overture.events(&id).len(), events.len(), "nothing recorded");
    let check = overture.run(&["replay", "--check"]);
    assert!(check.status.success(), "{}", text(&check.stderr));
}

#[test]
fn a_failed_destroy_exits_1_and_destroying_again_carries_on_from_the_step_that_failed() {
    let (overture, file) = Overture::with_blueprint(
        "revocable.yaml",
        r#"
name: revocable
secrets: [token]
steps:
  net: { run: terraform, with: { dir: net, vars: { token: "{{ secrets.token }}" } } }
  app: { run: terraform, needs: [net], with: { dir: app } }
"#,
    );
    // Terraform checks variables before it destroys anything: a revoked token stops it.
    configuration(
        &file,
        "net",
        r#"
variable "token" {
  type = string
  validation {
    condition     = var.token != "revoked"
    error_message = "The token was revoked."
  }
}

resource "terraform_data" "net" {
  input = "net"
}
"#,
    );
    configuration(&file, "app", "resource \"terraform_data\" \"app\" {}\n");
    let with_token = |token: &str, args: &[&str]| {
        overture
            .command(args)
            .env("E2E_TF_TOKEN", token)
            .output()
            .expect("run overture")
    };
    let path = file.to_str().expect("path");
    let deployed = with_token(
        "valid",
        &["deploy", path, "--secret", "token=E2E_TF_TOKEN", "--json"],
    );
    assert_eq!(
        deployed.status.code(),
        Some(0),
        "{}",
        text(&deployed.stderr)
    );
    let id = id_of(&serde_json::from_slice(&deployed.stdout).expect("status"));
    let deployed = overture.events(&id).len();

    let failed = with_token(
        "revoked",
        &["destroy", &id, "--secret", "token=E2E_TF_TOKEN", "--json"],
    );
    assert_eq!(failed.status.code(), Some(1), "{}", text(&failed.stderr));
    assert!(
        text(&failed.stderr).contains(&format!(
            "destroying step `net` failed; once its cause is fixed, `overture destroy {id}` carries on from it"
        )),
        "{}",
        text(&failed.stderr)
    );
    let status: Value = serde_json::from_slice(&failed.stdout).expect("status");
    assert_eq!(status["destroy"]["status"], "failed");
    assert_eq!(
        status["destroy"]["reason"],
        "destroying step `net` failed (exit code 1)"
    );
    let events = overture.events(&id);
    assert_eq!(
        types(&events[deployed..]),
        ["DestroyRequested", "StepDestroyed", "StepDestroyFailed"]
    );
    assert_eq!(events[deployed + 1]["data"]["step"], "app");
    let failure = &events[deployed + 2]["data"];
    assert_eq!(
        (&failure["step"], &failure["exit_code"]),
        (&json!("net"), &json!(1))
    );
    let message = failure["message"].as_str().expect("message");
    assert!(
        message
            .starts_with("`terraform destroy` failed with exit code 1: Invalid value for variable")
            && message.contains("var.token is \"***\""),
        "the headline, and the output's tail masked: {message}"
    );

    let carried_on = with_token("valid", &["destroy", &id, "--secret", "token=E2E_TF_TOKEN"]);
    assert_eq!(
        carried_on.status.code(),
        Some(0),
        "{}",
        text(&carried_on.stderr)
    );
    let events = overture.events(&id);
    assert_eq!(
        types(&events[deployed + 3..]),
        ["DestroyRequested", "StepDestroyed", "DeploymentDestroyed"]
    );
    assert_eq!(events[deployed + 3]["data"]["steps"], json!(["net"]));
    assert_eq!(events[deployed + 4]["data"]["step"], "net");
    let destroy_log = log(&overture, &id, "net", "destroy");
    assert!(
        destroy_log.contains("Invalid value for variable")
            && destroy_log.contains("Destroy complete! Resources: 1 destroyed."),
        "the destroy log keeps the failed run's output before the one that carried on:\n{destroy_log}"
    );
    assert_eq!(
        overture.json(&["status", &id, "--json"])["destroy"]["status"],
        "destroyed"
    );
}

#[test]
fn destroy_refuses_an_unknown_or_running_deployment_and_records_nothing() {
    let overture = Overture::new();
    let unknown = uuid::Uuid::now_v7().to_string();
    let message = refused(&overture, &["destroy", &unknown]);
    assert!(
        message.contains(&format!("no deployment {unknown}")),
        "{message}"
    );
    refused(&overture, &["destroy", "not-an-id"]);

    let slow = marker("running-during-destroy");
    let file = overture.blueprint(
        "running.yaml",
        &format!(
            r#"
name: running
steps:
  infra: {{ run: terraform, with: {{ dir: infra }} }}
  slow: {{ run: script, needs: [infra], with: {{ command: "sleep 120 # {slow}" }} }}
"#
        ),
    );
    configuration(&file, "infra", "resource \"terraform_data\" \"x\" {}\n");
    let engine = overture.deploy_until(&file, &["slow", "started (attempt 1)"]);
    let id = engine.id.clone();
    let before = overture.events(&id).len();

    let message = refused(&overture, &["destroy", &id]);
    assert!(
        message.contains(&format!("deployment {id} is still running")),
        "{message}"
    );
    assert_eq!(overture.events(&id).len(), before, "nothing recorded");

    engine.kill();
    let left = gone_within(&slow, std::time::Duration::from_secs(60));
    assert!(
        left.is_empty(),
        "the sandbox died with its engine: {left:?}"
    );
}

const SECRET: &str = "tf-9c41e7-never-shown";

#[test]
fn a_secret_in_terraform_vars_appears_nowhere_and_destroy_asks_for_it_again() {
    let (overture, file) = Overture::with_blueprint(
        "secret.yaml",
        r#"
name: terraform-secret
secrets: [token]
steps:
  infra:
    run: terraform
    with:
      dir: infra
      vars: { token: "{{ secrets.token }}" }
"#,
    );
    configuration(
        &file,
        "infra",
        r#"
variable "token" {
  type = string
}

resource "terraform_data" "holder" {
  input = var.token
  provisioner "local-exec" {
    command = "echo made with ${var.token}"
  }
  provisioner "local-exec" {
    when    = destroy
    command = "echo destroyed with ${self.output}"
  }
}

output "echoed" {
  value = terraform_data.holder.output
}
"#,
    );
    let with_secret = |args: &[&str]| {
        overture
            .command(args)
            .env("E2E_TF_TOKEN", SECRET)
            .output()
            .expect("run overture")
    };
    let mut shown = Vec::new();

    let deployed = with_secret(&[
        "deploy",
        file.to_str().expect("path"),
        "--secret",
        "token=E2E_TF_TOKEN",
        "--json",
    ]);
    assert_eq!(
        deployed.status.code(),
        Some(0),
        "{}",
        text(&deployed.stderr)
    );
    let status: Value = serde_json::from_slice(&deployed.stdout).expect("status");
    let id = id_of(&status);
    assert_eq!(
        status["steps"]["infra"]["outputs"]["echoed"], "***",
        "a non-sensitive output holding the secret is masked"
    );
    assert!(log(&overture, &id, "infra", "1").contains("made with ***"));
    let sealed = overture
        .data_dir()
        .join("states")
        .join(&id)
        .join("infra.sealed");
    assert!(
        std::fs::metadata(&sealed).map(|m| m.len()).unwrap_or(0) > 0,
        "the state, which holds the secret, is kept sealed"
    );
    shown.extend([deployed.stdout, deployed.stderr]);

    let recorded = overture.events(&id).len();
    let message = refused(&overture, &["destroy", &id]);
    assert!(
        message.contains("step `infra`")
            && message.contains("secret `token`")
            && message.contains("--secret token=ENV_VAR"),
        "{message}"
    );
    assert_eq!(overture.events(&id).len(), recorded, "nothing recorded");

    let destroyed = with_secret(&["destroy", &id, "--secret", "token=E2E_TF_TOKEN", "--json"]);
    assert_eq!(
        destroyed.status.code(),
        Some(0),
        "{}",
        text(&destroyed.stderr)
    );
    assert!(log(&overture, &id, "infra", "destroy").contains("destroyed with ***"));
    shown.extend([destroyed.stdout, destroyed.stderr]);

    for args in [
        vec!["events", id.as_str()],
        vec!["events", id.as_str(), "--json"],
        vec!["status", id.as_str()],
        vec!["status", id.as_str(), "--json"],
    ] {
        let out = overture.run(&args);
        shown.extend([out.stdout, out.stderr]);
    }
    for (i, printed) in shown.iter().enumerate() {
        assert!(
            !text(printed).contains(SECRET),
            "output {i} shows the secret:\n{}",
            text(printed)
        );
    }
    let leaks = files_containing(&overture.data_dir(), SECRET.as_bytes());
    assert!(leaks.is_empty(), "files holding the secret: {leaks:?}");
}

#[test]
fn resume_keeps_the_state_a_run_killed_with_its_engine_had_written() {
    let slow = marker("terraform-killed");
    let (overture, file) = Overture::with_blueprint(
        "killed.yaml",
        r#"
name: killed
secrets: [token]
steps:
  infra:
    run: terraform
    # An attempt cut short by the engine's death is run again by default.
    with: { dir: infra, vars: { token: "{{ secrets.token }}" } }
"#,
    );
    configuration(
        &file,
        "infra",
        &format!(
            r#"
variable "token" {{
  type      = string
  sensitive = true
}}

resource "terraform_data" "first" {{
  input = "made before the engine died"
}}

resource "terraform_data" "slow" {{
  depends_on = [terraform_data.first]
  provisioner "local-exec" {{
    command = "if [ \"$OVERTURE_ATTEMPT\" = 1 ]; then sleep 120; fi # {slow}"
  }}
}}
"#
        ),
    );
    let mut command = overture.command(&[
        "deploy",
        file.to_str().expect("path"),
        "--secret",
        "token=TF_KILLED",
    ]);
    command.env("TF_KILLED", SECRET);
    let deploying = crate::support::Deploying::spawn(command, &["infra", "started (attempt 1)"]);

    // Terraform writes its state after each resource: wait until `first` is in it.
    let sandboxes = overture.data_dir().join("sandboxes");
    let start = std::time::Instant::now();
    while !files_containing(&sandboxes, b"made before the engine died")
        .iter()
        .any(|path| path.ends_with("config/terraform.tfstate"))
    {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(120),
            "`first` was never made"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let id = deploying.id.clone();
    deploying.kill();

    let resumed = overture.run(&["resume"]);
    assert!(
        resumed.status.success(),
        "resume: {}",
        text(&resumed.stderr)
    );
    let left = gone_within(&slow, std::time::Duration::from_secs(60));
    assert!(left.is_empty(), "the killed run is gone: {left:?}");
    assert!(
        !sandboxes.exists() || std::fs::read_dir(&sandboxes).expect("dir").next().is_none(),
        "no workspace (with its variable file) is left"
    );

    let status = overture.json(&["status", &id, "--json"]);
    assert_eq!(status["status"], "succeeded");
    assert_eq!(status["steps"]["infra"]["attempts"], 2);
    let second = text(
        &overture
            .run(&["logs", &id, "infra", "--attempt", "2"])
            .stdout,
    );
    assert!(
        second.contains("Apply complete! Resources: 1 added"),
        "the second attempt made only what the first had not:\n{second}"
    );
    let found = files_containing(&overture.data_dir(), SECRET.as_bytes());
    assert!(found.is_empty(), "the secret is in {found:?}");
}

#[test]
fn the_configuration_is_recorded_by_hash_and_destroy_refuses_a_changed_copy() {
    let overture = Overture::new();
    let file = two_steps(&overture);
    let (code, status, output) = overture.deploy(&file, &[]);
    assert_eq!(code, 0, "{}", text(&output.stderr));
    let id = id_of(&status);

    let events = overture.events(&id);
    let blueprint = &events[0]["data"]["blueprint"];
    assert!(
        blueprint.get("files").is_none(),
        "no file's text in the event"
    );
    let payloads = overture.data_dir().join("payloads");
    for dir in ["net", "app"] {
        let stored = &blueprint["stored_files"][format!("{dir}/main.tf")];
        let text =
            std::fs::read_to_string(file.parent().expect("folder").join(dir).join("main.tf"))
                .expect("main.tf");
        assert_eq!(stored["size"], text.len(), "{dir}");
        let kept = std::fs::read_to_string(payloads.join(stored["sha256"].as_str().expect("hash")))
            .expect("the payload");
        assert_eq!(kept, text, "{dir}");
    }

    // Someone changes the kept copy of `app`'s configuration: destroy will not run it.
    let app = payloads.join(
        blueprint["stored_files"]["app/main.tf"]["sha256"]
            .as_str()
            .expect("hash"),
    );
    let original = std::fs::read(&app).expect("payload");
    std::fs::write(&app, "resource \"terraform_data\" \"other\" {}\n").expect("tamper");
    let failed = overture.run(&["destroy", &id]);
    assert_eq!(failed.status.code(), Some(1), "{}", text(&failed.stderr));
    let events = overture.events(&id);
    let last = events.last().expect("events");
    assert_eq!(last["type"], "StepDestroyFailed");
    assert_eq!(last["data"]["step"], "app");
    let message = last["data"]["message"].as_str().expect("message");
    assert!(
        message.contains("app/main.tf") && message.contains("changed or damaged"),
        "{message}"
    );

    std::fs::write(&app, original).expect("restore");
    destroyed(&overture, &id, "app");
    let check = overture.run(&["replay", "--check"]);
    assert!(check.status.success(), "{}", text(&check.stderr));
}
