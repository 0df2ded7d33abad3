//! The runner's half of the `terraform` kind: `terraform init` and `apply` on the configuration
//! the blueprint recorded, with the state kept between attempts and for `overture destroy`
//! ([`crate::destroy`]). Its settings ([`TerraformSettings`]: `dir`, `vars`) and their checks are
//! the kind's other half, `domain/src/kind/terraform.rs`.
//!
//! Every run (an attempt, or a destroy) gets the same `/work`:
//!
//! ```text
//! config/...                  the files of `with.dir`, as the deployment recorded them
//! config/terraform.tfstate    the state the step's last run kept, if any (the local backend's path)
//! overture.tfvars.json        `with.vars`, rendered: it may hold secrets, so it is a file,
//!                             never a command-line argument
//! terraform-outputs.json      `terraform output -json`, after a successful apply
//! terraform-stage             the terraform command running now, to name it when it fails
//! ```
//!
//! The runner keeps whatever state the run leaves, whether the run succeeded or not, so a
//! retry carries on from the resources the failed attempt made instead of making them again.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use overture_domain::kind::{terraform, Kind, TerraformSettings};
use overture_events::ErrorClass;

use crate::step::{collected, settings_problems, Prepared, StepInput, Verdict};
use crate::SandboxResult;

/// Where the configuration's state is, under `/work`, kept between attempts and for `destroy`.
pub const STATE_FILE: &str = "config/terraform.tfstate";

/// The configuration's folder under `/work`.
const CONFIG_DIR: &str = "config";
/// The rendered `with.vars`, under `/work`; outside `config/` so Terraform never loads it by
/// itself, and named `.json` so `-var-file` reads it as JSON.
const VAR_FILE: &str = "overture.tfvars.json";
/// What `terraform output -json` printed, under `/work`.
const OUTPUTS_FILE: &str = "terraform-outputs.json";
/// The terraform command running now, under `/work`.
const STAGE_FILE: &str = "terraform-stage";

/// Terraform's environment: no call to HashiCorp's checkpoint service (version and security
/// bulletins), output for a log rather than a person, and never a prompt.
const ENV: [(&str, &str); 3] = [
    ("CHECKPOINT_DISABLE", "1"),
    ("TF_IN_AUTOMATION", "1"),
    ("TF_INPUT", "0"),
];

/// Runs `terraform ARGS` in `config/`, first noting the command in the stage file and echoing
/// it to the log.
const RUN: &str =
    r#"run() { echo "$1" > ../terraform-stage; echo "\$ terraform $*" >&2; terraform "$@"; }"#;
const INIT: &str = "run init -input=false -no-color";

/// Builds the sandbox command of an attempt: init, apply, and the outputs read back.
pub fn prepare(input: &StepInput, settings: &TerraformSettings) -> Result<Prepared, String> {
    let mut prepared = workspace(input, settings)?;
    prepared.command = format!(
        "{RUN}\ncd {CONFIG_DIR} && {INIT} \
         && run apply -auto-approve -input=false -no-color -var-file=../{VAR_FILE} \
         && run output -json > ../{OUTPUTS_FILE}"
    );
    prepared.collect.push(OUTPUTS_FILE.into());
    Ok(prepared)
}

/// Builds the sandbox command that destroys what the step's attempts made.
pub fn prepare_destroy(input: &StepInput) -> Result<Prepared, String> {
    let settings = terraform::read(&input.spec.with).map_err(settings_problems)?;
    let mut prepared = workspace(input, &settings)?;
    prepared.command = format!(
        "{RUN}\ncd {CONFIG_DIR} && {INIT} \
         && run destroy -auto-approve -input=false -no-color -var-file=../{VAR_FILE}"
    );
    Ok(prepared)
}

/// Judges the command's exit: 0 succeeds with the configuration's outputs; anything else is a
/// failure of class `terraform`, which the retry policy retries once by default.
pub fn conclude(code: i32, result: &SandboxResult) -> Verdict {
    if code != 0 {
        return Verdict::Failure {
            class: ErrorClass::Terraform,
            headline: failure_headline(code, result),
        };
    }
    match collected(&result.collected, OUTPUTS_FILE) {
        Some(json) => match parse_outputs(json) {
            Ok(outputs) => Verdict::Success(outputs),
            Err(problem) => Verdict::failed(problem),
        },
        None => Verdict::failed("`terraform output -json` left no outputs"),
    }
}

/// Keeps the state a Terraform run left in a sandbox that outlived its engine, when it is newer
/// than the state kept: Terraform writes its state after every resource it changes, so a run
/// killed half-way has recorded resources the kept state does not know. Returns whether it
/// was kept.
///
/// A state is newer when it is a Terraform state of the same lineage with a higher serial (or
/// nothing was kept yet); a file cut short by the kill does not parse and is left alone.
pub async fn keep_leftover_state(
    sandbox: &str,
    state: &[u8],
    log: &dyn overture_kit::DeploymentLog,
    kept: &dyn crate::KeepStepState,
) -> Result<bool, crate::RunnerError> {
    let Some((deployment, step, _)) = crate::parse_sandbox_id(sandbox) else {
        return Ok(false);
    };
    let loaded = log.load(deployment).await?;
    let is_terraform = loaded
        .state
        .spec(&step)
        .is_some_and(|spec| overture_domain::kind::is(spec, Kind::Terraform));
    let Some(left) = is_terraform.then(|| StateVersion::of(state)).flatten() else {
        return Ok(false);
    };
    let tenant = &loaded.state.tenant;
    let newer = match kept.load(deployment, tenant, &step).await? {
        None => true,
        Some(current) => StateVersion::of(&current).is_none_or(|current| left.follows(&current)),
    };
    if newer {
        kept.save(deployment, tenant, &step, state).await?;
    }
    Ok(newer)
}

/// Where a Terraform state stands: its lineage (one per state's life) and serial (raised by
/// every write).
#[derive(Deserialize)]
struct StateVersion {
    lineage: String,
    serial: u64,
}

impl StateVersion {
    fn of(state: &[u8]) -> Option<Self> {
        serde_json::from_slice(state).ok()
    }

    fn follows(&self, earlier: &StateVersion) -> bool {
        self.lineage == earlier.lineage && self.serial > earlier.serial
    }
}

/// What went wrong, for a terraform command that exited with `code`: the command, and the first
/// error Terraform reported (the runner adds the last lines of output).
pub fn failure_headline(code: i32, result: &SandboxResult) -> String {
    let stage = collected(&result.collected, STAGE_FILE)
        .map(|stage| String::from_utf8_lossy(stage).trim().to_owned())
        .filter(|stage| !stage.is_empty());
    let command = match stage {
        Some(stage) => format!("terraform {stage}"),
        None => "terraform".to_owned(),
    };
    let output = String::from_utf8_lossy(&result.output);
    let error = output
        .lines()
        .find_map(|line| line.trim_start().strip_prefix("Error: "))
        .map(|error| format!(": {}", error.trim()))
        .unwrap_or_default();
    format!("`{command}` failed with exit code {code}{error}")
}

/// One output as `terraform output -json` prints it.
#[derive(Deserialize)]
struct Output {
    #[serde(default)]
    sensitive: bool,
    value: Value,
}

/// The step's outputs from what `terraform output -json` printed: text as it is, any other value
/// as compact JSON.
///
/// Outputs marked `sensitive` are left out: step outputs are recorded in events, which every
/// operator who can audit the deployment reads, and a sensitive output need not hold a secret
/// the masker knows. A later step that needs such a value should get it some other way (a
/// secret of its own).
pub fn parse_outputs(json: &[u8]) -> Result<BTreeMap<String, String>, String> {
    let outputs: BTreeMap<String, Output> = serde_json::from_slice(json)
        .map_err(|e| format!("cannot read what `terraform output -json` printed: {e}"))?;
    Ok(outputs
        .into_iter()
        .filter(|(_, output)| !output.sensitive)
        .map(|(name, output)| {
            let value = match output.value {
                Value::String(text) => text,
                other => other.to_string(),
            };
            (name, value)
        })
        .collect())
}

/// The JSON variable file of `with.vars`, every template rendered (secrets included).
pub fn var_file(input: &StepInput, settings: &TerraformSettings) -> Result<Vec<u8>, String> {
    let vars = input
        .render_value(&Value::Object(settings.vars.clone()))
        .map_err(|problem| format!("with.vars: {problem}"))?;
    serde_json::to_vec_pretty(&vars).map_err(|e| format!("with.vars: {e}"))
}

/// Everything but the command: the configuration, the kept state, the variables.
fn workspace(input: &StepInput, settings: &TerraformSettings) -> Result<Prepared, String> {
    let dir = settings.folder();
    let config = input.files_under(dir);
    if config.is_empty() {
        return Err(format!(
            "the deployment recorded no files under `{dir}`, so there is no configuration to run"
        ));
    }
    let mut files: Vec<(PathBuf, Vec<u8>)> = config
        .into_iter()
        .map(|(path, text)| (Path::new(CONFIG_DIR).join(path), text.as_bytes().to_vec()))
        .collect();
    if let Some(state) = &input.kept {
        files.push((STATE_FILE.into(), state.clone()));
    }
    files.push((VAR_FILE.into(), var_file(input, settings)?));
    Ok(Prepared {
        command: String::new(),
        env: ENV
            .iter()
            .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
            .collect(),
        secret_env: vec![],
        files,
        // Providers talk to their clouds.
        network: true,
        collect: vec![STATE_FILE.into(), STAGE_FILE.into()],
        engine_program: false,
    })
}

#[cfg(test)]
mod tests {
    use overture_domain::blueprint::parse;
    use overture_domain::secret::{SecretString, SecretValues};
    use overture_domain::{Deployment, DeploymentState};
    use overture_events::BlueprintSnapshot;
    use serde_json::json;

    use super::*;
    use crate::kind::{conclude, prepare};
    use crate::testing::{input, requested, sandbox_result, succeeded};

    const BLUEPRINT: &str = "name: x\nparams: { region: {} }\nsecrets: [token]\nsteps:\n  net: { run: noop }\n  infra:\n    run: terraform\n    needs: [net]\n    with:\n      dir: infra/\n      vars: { region: '{{ params.region }}', token: '{{ secrets.token }}', subnet: '{{ steps.net.outputs.id }}', count: 2, tags: [a] }\n";

    fn deployment(blueprint: &BlueprintSnapshot) -> DeploymentState {
        let mut blueprint = blueprint.clone();
        blueprint.files = [
            (
                "infra/main.tf".to_owned(),
                "resource \"terraform_data\" \"x\" {}".to_owned(),
            ),
            ("infra/modules/m/main.tf".to_owned(), "# module".to_owned()),
            ("other/main.tf".to_owned(), "# another step's".to_owned()),
        ]
        .into();
        Deployment::apply(
            requested(&blueprint, &[("region", "eu-1")]),
            succeeded("net", &[("id", "subnet-9")]),
        )
    }

    /// [`deployment`] of a blueprint whose one step, `infra`, runs terraform in `dir`.
    fn one_step_in(dir: &str) -> DeploymentState {
        let blueprint =
            format!("name: x\nsteps:\n  infra: {{ run: terraform, with: {{ dir: {dir} }} }}\n");
        deployment(&parse(&blueprint).expect("valid").snapshot)
    }

    fn file<'a>(prepared: &'a Prepared, path: &str) -> Option<&'a [u8]> {
        collected(&prepared.files, path)
    }

    #[test]
    fn the_configuration_state_and_rendered_vars_go_to_files_and_nothing_secret_to_the_command() {
        let blueprint = parse(BLUEPRINT).expect("valid").snapshot;
        let state = deployment(&blueprint);
        let secrets: SecretValues = [("token".to_owned(), SecretString::from("s3cr3t"))].into();
        let input = StepInput {
            attempt: 2,
            kept: Some(b"{\"version\": 4}".to_vec()),
            ..input(&state, "infra", &secrets)
        };
        let prepared = prepare(&input).expect("prepares");

        let paths: Vec<&Path> = prepared.files.iter().map(|(p, _)| p.as_path()).collect();
        assert_eq!(
            paths,
            [
                Path::new("config/main.tf"),
                Path::new("config/modules/m/main.tf"),
                Path::new(STATE_FILE),
                Path::new(VAR_FILE),
            ],
            "the step's folder only, under config/"
        );
        assert_eq!(file(&prepared, STATE_FILE), Some(&b"{\"version\": 4}"[..]));
        let vars: Value =
            serde_json::from_slice(file(&prepared, VAR_FILE).expect("var file")).expect("JSON");
        assert_eq!(
            vars,
            json!({"region": "eu-1", "token": "s3cr3t", "subnet": "subnet-9", "count": 2, "tags": ["a"]})
        );

        assert!(!prepared.command.contains("s3cr3t"));
        assert!(prepared.secret_env.is_empty());
        for part in [
            "cd config",
            "run init -input=false -no-color",
            "run apply -auto-approve -input=false -no-color -var-file=../overture.tfvars.json",
            "run output -json > ../terraform-outputs.json",
        ] {
            assert!(
                prepared.command.contains(part),
                "{part} in {}",
                prepared.command
            );
        }
        for setting in ENV {
            assert!(prepared.env.contains(&(setting.0.into(), setting.1.into())));
        }
        assert!(prepared.network);
        assert_eq!(
            prepared.collect,
            [STATE_FILE, STAGE_FILE, OUTPUTS_FILE].map(PathBuf::from)
        );

        let destroy = prepare_destroy(&input).expect("prepares");
        assert!(destroy.command.contains(
            "run destroy -auto-approve -input=false -no-color -var-file=../overture.tfvars.json"
        ));
        assert!(!destroy.command.contains("apply"));
        assert_eq!(destroy.files, prepared.files);
        assert_eq!(destroy.collect, [STATE_FILE, STAGE_FILE].map(PathBuf::from));
    }

    #[test]
    fn terraform_reads_every_var_back_exactly_and_evaluates_none() {
        const VALUES: &[&str] = &[
            "",
            "${path.module}",
            "$${x}",
            "%{ if true }x%{ endif }",
            "%%{",
            "{{ params.v0 }}",
            "$(touch pwned) `touch pwned`",
            "it's \"quoted\"",
            "a\\b\\\\c\\",
            "\\n is not a newline",
            "line1\nline2\r\n",
            "\ttab  spaced  ",
            "true",
            "null",
            "[1, 2]",
            "ünï©ødé 😀 \u{1} \u{7f} \u{85} \u{2028}",
        ];
        let vars: String = (0..VALUES.len())
            .map(|i| format!("v{i}: '{{{{ params.v{i} }}}}', "))
            .collect();
        let params: String = (0..VALUES.len()).map(|i| format!("v{i}: {{}}, ")).collect();
        let blueprint = parse(&format!(
            "name: x\nparams: {{ {params} }}\nsteps:\n  infra: {{ run: terraform, with: {{ dir: infra, vars: {{ {vars} nested: ['{{{{ params.v1 }}}}', {{ k: '{{{{ params.v2 }}}}' }}] }} }} }}\n"
        ))
        .expect("valid")
        .snapshot;
        let named: Vec<(String, &str)> = VALUES
            .iter()
            .enumerate()
            .map(|(i, value)| (format!("v{i}"), *value))
            .collect();
        let named: Vec<(&str, &str)> = named.iter().map(|(n, v)| (n.as_str(), *v)).collect();
        let state = requested(&blueprint, &named);
        let no_secrets = SecretValues::new();
        let input = input(&state, "infra", &no_secrets);
        let settings = terraform::read(&input.spec.with).expect("valid settings");
        let vars = var_file(&input, &settings).expect("renders");

        let dir = std::env::temp_dir().join(format!("overture-tf-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let mut main =
            String::from("variable \"nested\" {}\noutput \"nested\" { value = var.nested }\n");
        for i in 0..VALUES.len() {
            main.push_str(&format!(
                "variable \"v{i}\" {{ type = string }}\noutput \"v{i}\" {{ value = var.v{i} }}\n"
            ));
        }
        std::fs::write(dir.join("main.tf"), main).expect("main.tf");
        std::fs::write(dir.join("vars.json"), vars).expect("vars");
        let terraform = |args: &[&str]| {
            std::process::Command::new("terraform")
                .args(args)
                .current_dir(&dir)
                .envs(ENV.iter().copied())
                .output()
                .expect("run terraform")
        };
        let mut ran = vec![
            terraform(&["init", "-input=false", "-no-color"]),
            terraform(&[
                "apply",
                "-auto-approve",
                "-input=false",
                "-no-color",
                "-var-file=vars.json",
            ]),
        ];
        ran.push(terraform(&["output", "-json"]));
        let pwned = dir.join("pwned").exists();
        let _ = std::fs::remove_dir_all(&dir);
        for run in &ran {
            assert!(
                run.status.success(),
                "{}{}",
                String::from_utf8_lossy(&run.stdout),
                String::from_utf8_lossy(&run.stderr)
            );
        }
        assert!(!pwned, "a value ran");
        let outputs: Value = serde_json::from_slice(&ran[2].stdout).expect("JSON outputs");
        for (i, value) in VALUES.iter().enumerate() {
            assert_eq!(outputs[format!("v{i}")]["value"], *value);
        }
        assert_eq!(
            outputs["nested"]["value"],
            serde_json::json!([VALUES[1], {"k": VALUES[2]}])
        );
    }

    #[test]
    fn a_first_attempt_has_no_state_and_no_vars_make_an_empty_var_file() {
        let state = one_step_in("infra");
        let secrets = SecretValues::new();
        let input = input(&state, "infra", &secrets);
        let prepared = prepare(&input).expect("prepares");
        assert_eq!(file(&prepared, STATE_FILE), None);
        assert_eq!(file(&prepared, VAR_FILE), Some(&b"{}"[..]));
    }

    #[test]
    fn a_folder_the_deployment_did_not_record_cannot_run() {
        let state = one_step_in("elsewhere");
        let secrets = SecretValues::new();
        let input = input(&state, "infra", &secrets);
        let problem = prepare(&input).err().expect("refused");
        assert!(problem.contains("no files under `elsewhere`"), "{problem}");
    }

    #[test]
    fn outputs_are_text_or_compact_json_and_sensitive_ones_are_left_out() {
        let printed = r#"{
          "address": {"sensitive": false, "type": "string", "value": "10.0.0.7"},
          "ports": {"sensitive": false, "type": ["tuple", ["number", "number"]], "value": [80, 443]},
          "tags": {"sensitive": false, "type": ["object", {}], "value": {"env": "prod", "on": true}},
          "password": {"sensitive": true, "type": "string", "value": "hunter2"}
        }"#;
        assert_eq!(
            parse_outputs(printed.as_bytes()),
            Ok([
                ("address".to_owned(), "10.0.0.7".to_owned()),
                ("ports".to_owned(), "[80,443]".to_owned()),
                ("tags".to_owned(), r#"{"env":"prod","on":true}"#.to_owned()),
            ]
            .into())
        );
        assert_eq!(parse_outputs(b"{}"), Ok(BTreeMap::new()));
        let problem = parse_outputs(b"Error: no state").expect_err("refused");
        assert!(problem.contains("terraform output -json"), "{problem}");
    }

    #[test]
    fn success_reads_the_outputs_and_a_non_zero_exit_is_a_terraform_failure_naming_the_command() {
        let state = one_step_in("infra");
        let secrets = SecretValues::new();
        let input = input(&state, "infra", &secrets);
        let verdict = |code, output: &str, collected: &[(&str, &str)]| {
            conclude(&input, code, &sandbox_result(code, output, collected))
        };
        let outputs = r#"{"id": {"sensitive": false, "type": "string", "value": "abc"}}"#;
        assert_eq!(
            verdict(0, "", &[(OUTPUTS_FILE, outputs)]),
            Verdict::Success([("id".to_owned(), "abc".to_owned())].into())
        );

        let output = "$ terraform apply\nterraform_data.x: Creating...\n\nError: local-exec provisioner error\n\n  with terraform_data.x\n\nError: second\n";
        assert_eq!(
            verdict(1, output, &[(STAGE_FILE, "apply\n")]),
            Verdict::Failure {
                class: ErrorClass::Terraform,
                headline: "`terraform apply` failed with exit code 1: local-exec provisioner error"
                    .into()
            }
        );
        assert_eq!(
            verdict(127, "sh: terraform: not found\n", &[]),
            Verdict::Failure {
                class: ErrorClass::Terraform,
                headline: "`terraform` failed with exit code 127".into()
            }
        );
        assert!(matches!(
            verdict(0, "", &[]),
            Verdict::Failure {
                class: ErrorClass::StepFailed,
                ..
            }
        ));
    }

    #[test]
    fn a_leftover_state_is_newer_only_with_the_same_lineage_and_a_higher_serial() {
        let state = |lineage: &str, serial: u64| {
            StateVersion::of(
                format!(r#"{{"version": 4, "lineage": "{lineage}", "serial": {serial}}}"#)
                    .as_bytes(),
            )
            .expect("a state")
        };
        assert!(state("a", 3).follows(&state("a", 2)));
        assert!(!state("a", 2).follows(&state("a", 2)));
        assert!(
            !state("b", 9).follows(&state("a", 2)),
            "another state's life"
        );
        assert!(
            StateVersion::of(br#"{"version": 4, "lin"#).is_none(),
            "a file cut short by the kill"
        );
    }
}
