//! Bad input: exit code 2, a message naming the file, the field and the fix, nothing recorded.

use crate::support::{text, Overture};

fn assert_refused(overture: &Overture, args: &[&str], words: &[&str]) {
    let output = overture.run(args);
    assert_eq!(
        output.status.code(),
        Some(2),
        "{args:?} must exit 2: {}",
        text(&output.stderr)
    );
    let message = text(&output.stderr);
    for word in words {
        assert!(
            message.contains(word),
            "{args:?}: `{word}` missing from:\n{message}"
        );
    }
}

fn nothing_recorded(overture: &Overture) {
    let list = overture.json(&["list", "--json"]);
    assert_eq!(list, serde_json::json!([]), "nothing was recorded");
}

#[test]
fn an_invalid_blueprint_is_refused_naming_the_file_and_field() {
    let overture = Overture::new();
    let file = overture.blueprint(
        "cycle.yaml",
        "name: c\nsteps:\n  a: { run: noop, needs: [b] }\n  b: { run: noop, needs: [a] }\n",
    );
    let path = file.to_str().expect("path");
    assert_refused(
        &overture,
        &["deploy", path],
        &["cycle.yaml", "steps", "cycle", "a → b → a"],
    );
    assert_refused(&overture, &["validate", path], &["cycle.yaml", "cycle"]);
    let typo = overture.blueprint(
        "typo.yaml",
        "name: t\nsteps:\n  a: { run: script, with: { command: 'echo {{ params.nope }}' } }\n",
    );
    assert_refused(
        &overture,
        &["deploy", typo.to_str().expect("path")],
        &["typo.yaml", "steps.a.with.command", "parameter `nope`"],
    );
    nothing_recorded(&overture);
}

#[test]
fn missing_files_params_and_secrets_are_refused() {
    let overture = Overture::new();
    assert_refused(
        &overture,
        &["deploy", "/nonexistent/blueprint.yaml"],
        &["/nonexistent/blueprint.yaml", "cannot read"],
    );
    let file = overture.blueprint(
        "p.yaml",
        "name: p\nparams: { who: {} }\nsecrets: [key]\nsteps:\n  a: { run: noop }\n",
    );
    let path = file.to_str().expect("path");
    assert_refused(
        &overture,
        &["deploy", path, "--param", "who"],
        &["--param `who`", "NAME=VALUE"],
    );
    assert_refused(
        &overture,
        &[
            "deploy",
            path,
            "--param",
            "who=x",
            "--secret",
            "key=OVERTURE_E2E_UNSET",
        ],
        &["OVERTURE_E2E_UNSET", "not set"],
    );
    assert_refused(
        &overture,
        &["deploy", path, "--secret", "key=PATH"],
        &["params.who", "--param who=VALUE"],
    );
    assert_refused(
        &overture,
        &["deploy", path, "--param", "who=x"],
        &["secrets.key", "--secret key=ENV_VAR"],
    );
    nothing_recorded(&overture);
}

#[test]
fn unknown_deployments_are_refused() {
    let overture = Overture::new();
    assert_refused(
        &overture,
        &["status", "not-an-id"],
        &["not a deployment id"],
    );
    assert_refused(
        &overture,
        &["status", "0192e4c5-6f1a-7c3e-9b1d-2f4a5b6c7d8e"],
        &["no deployment"],
    );
    assert_refused(
        &overture,
        &["events", "0192e4c5-6f1a-7c3e-9b1d-2f4a5b6c7d8e"],
        &["no deployment"],
    );
}

#[test]
fn steps_whose_files_or_hosts_are_missing_are_refused() {
    let overture = Overture::new();
    let file = overture.blueprint(
        "tools.yaml",
        r#"
name: tools
hosts:
  web: ["127.0.0.1:22"]
steps:
  infra: { run: terraform, with: { dir: no-such-folder } }
  outside: { run: terraform, with: { dir: ../elsewhere } }
  configure: { run: ansible, with: { playbook: site.yml, hosts: db } }
"#,
    );
    let path = file.to_str().expect("path");
    assert_refused(
        &overture,
        &["deploy", path],
        &[
            "tools.yaml",
            "steps.outside.with.dir: `../elsewhere` must be a plain path inside the blueprint's folder",
            "steps.configure.with.hosts: `db` is not a host group of the blueprint; the groups are: web",
        ],
    );
    let fixed = overture.blueprint(
        "tools.yaml",
        r#"
name: tools
steps:
  infra: { run: terraform, with: { dir: no-such-folder } }
  configure: { run: ansible, with: { playbook: site.yml, hosts: ["127.0.0.1:22"] } }
"#,
    );
    assert_refused(
        &overture,
        &["validate", fixed.to_str().expect("path")],
        &["steps.infra.with.dir", "no-such-folder` is not a folder"],
    );
    std::fs::create_dir(fixed.parent().expect("folder").join("no-such-folder")).expect("mkdir");
    assert_refused(
        &overture,
        &["deploy", fixed.to_str().expect("path")],
        &[
            "steps.infra.with.dir: `no-such-folder` holds no Terraform configuration",
            "steps.configure.with.playbook: `site.yml` is not a file in the blueprint's folder",
        ],
    );
    nothing_recorded(&overture);
}

#[test]
fn validate_accepts_the_examples() {
    let overture = Overture::new();
    let examples = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples");
    let mut checked = 0;
    for entry in std::fs::read_dir(examples).expect("examples").flatten() {
        let blueprint = entry.path().join("blueprint.yaml");
        if !blueprint.is_file() {
            continue;
        }
        let output = overture.run(&["validate", blueprint.to_str().expect("path")]);
        assert!(
            output.status.success(),
            "{}: {}",
            blueprint.display(),
            text(&output.stderr)
        );
        assert!(text(&output.stdout).contains("valid blueprint"));
        checked += 1;
    }
    assert!(checked >= 1, "no example found in {examples}");
}
