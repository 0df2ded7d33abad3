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
    let (overture, file) = Overture::with_blueprint(
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
        &["no live deployment named `not-an-id` in tenant `default`"],
    );
    assert_refused(
        &overture,
        &["status", "Not_An_Id"],
        &["neither a deployment id", "nor a deployment's name"],
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
    let (overture, file) = Overture::with_blueprint(
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

// Issue 9: input that used to slip through, or to take long to refuse.

/// Refused like [`assert_refused`], and without a single raw control character in what the
/// terminal would show.
fn assert_refused_printably(overture: &Overture, command: std::process::Command, words: &[&str]) {
    let mut command = command;
    let output = command.output().expect("run overture");
    let message = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "must exit 2: {message}");
    for word in words {
        assert!(message.contains(word), "`{word}` missing from:\n{message}");
    }
    let raw: Vec<char> = message
        .chars()
        .filter(|c| c.is_control() && *c != '\n')
        .collect();
    assert!(
        raw.is_empty(),
        "raw control characters {raw:?} in:\n{message:?}"
    );
    nothing_recorded(overture);
}

#[test]
fn a_key_given_twice_is_refused_with_both_lines() {
    let (overture, file) = Overture::with_blueprint(
        "twice.yaml",
        "name: twice\nsteps:\n  a: { run: noop }\n  b: { run: noop }\n  a: { run: script, with: { command: 'true' } }\n",
    );
    let path = file.to_str().expect("path");
    for command in ["validate", "deploy"] {
        assert_refused(
            &overture,
            &[command, path],
            &[
                "twice.yaml: steps.a: `a` is given twice, on lines 3 and 5",
                "remove or rename one",
            ],
        );
    }
    let nested = overture.blueprint(
        "nested.yaml",
        "name: n\nsteps:\n  a:\n    run: script\n    with:\n      command: 'echo 1'\n      command: 'echo 2'\n",
    );
    assert_refused(
        &overture,
        &["validate", nested.to_str().expect("path")],
        &["nested.yaml: steps.a.with.command", "lines 6 and 7"],
    );
    nothing_recorded(&overture);
}

#[test]
fn control_characters_in_names_are_refused_and_never_printed_raw() {
    let overture = Overture::new();
    // YAML's double quotes write ESC as `\e` and BEL as `\a`.
    let file = overture.blueprint(
        "escapes.yaml",
        "name: \"demo\\e[2J\\e]0;owned\\a\"\nsteps:\n  \"build\\e[31m\": { run: noop }\n  b: { run: noop, needs: [\"x\\a\"] }\n",
    );
    let path = file.to_str().expect("path");
    for command in ["validate", "deploy"] {
        assert_refused_printably(
            &overture,
            overture.command(&[command, path]),
            &[
                r"escapes.yaml: name: the blueprint's name `demo\u{1b}[2J\u{1b}]0;owned\u{7}` holds the control character `\u{1b}`",
                r"escapes.yaml: steps.build\u{1b}[31m: the step name",
                r"unknown step `x\u{7}`",
            ],
        );
    }
    // A parameter name is user text too.
    let valid = overture.blueprint("p.yaml", "name: p\nsteps:\n  a: { run: noop }\n");
    let mut command = overture.command(&["deploy", valid.to_str().expect("path")]);
    command.arg("--param").arg("who\u{1b}[31m=x");
    assert_refused_printably(&overture, command, &[r"--param who\u{1b}[31m"]);
    // So are the options' own words, whatever is wrong with them.
    let mut command = overture.command(&["deploy", valid.to_str().expect("path")]);
    command.arg("--param").arg("\u{1b}[2J");
    assert_refused_printably(
        &overture,
        command,
        &[r"--param `\u{1b}[2J`: expected NAME=VALUE"],
    );
    let mut command = overture.command(&["deploy", valid.to_str().expect("path")]);
    command
        .arg("--secret")
        .arg("k=UNSET\u{7}")
        .env_remove("UNSET\u{7}");
    assert_refused_printably(
        &overture,
        command,
        &[r"the environment variable UNSET\u{7}"],
    );
}

#[test]
fn a_tenant_is_held_to_the_name_rule() {
    let (overture, file) =
        Overture::with_blueprint("t.yaml", "name: t\nsteps:\n  a: { run: noop }\n");
    let path = file.to_str().expect("path");
    for tenant in ["", "../../x", "acme\u{1b}[2J", "Acme"] {
        let mut command = overture.command(&["deploy", path]);
        command.arg("--tenant").arg(tenant);
        assert_refused_printably(
            &overture,
            command,
            &[
                "--tenant: the tenant",
                "use lowercase letters, digits and '-', starting with a letter or digit",
            ],
        );
    }
    let status = overture.deploy_ok(&file, &["--tenant", "team-7"]);
    assert_eq!(status["tenant"], "team-7");
    let (code, status, _) = overture.deploy(&file, &[]);
    assert_eq!(
        (code, &status["tenant"]),
        (0, &serde_json::json!("default"))
    );
}

#[test]
fn an_http_url_of_another_scheme_is_refused_when_written_and_failed_when_rendered() {
    let (overture, file) = Overture::with_blueprint(
        "file.yaml",
        "name: f\nsteps:\n  read: { run: http, with: { url: 'file:///etc/passwd' } }\n",
    );
    assert_refused(
        &overture,
        &["validate", file.to_str().expect("path")],
        &[
            "file.yaml: steps.read.with.url: `file:///etc/passwd` has the scheme `file`",
            "http:// and https://",
        ],
    );
    nothing_recorded(&overture);

    // A URL that is a template can only be checked once rendered: the attempt fails, uncalled.
    let templated = overture.blueprint(
        "templated.yaml",
        "name: f\nparams: { api: {} }\nsteps:\n  read: { run: http, with: { url: '{{ params.api }}/passwd' } }\n",
    );
    let (code, status, output) = overture.deploy(&templated, &["--param", "api=file:///etc"]);
    assert_eq!(code, 1, "{}", text(&output.stderr));
    assert_eq!(status["steps"]["read"]["status"], "failed");
    assert_eq!(status["steps"]["read"]["error_class"], "step-failed");
    let id = status["id"].as_str().expect("id");
    let failed: Vec<_> = overture
        .events(id)
        .into_iter()
        .filter(|e| e["type"] == "StepAttemptFailed")
        .collect();
    assert_eq!(failed.len(), 1);
    let message = failed[0]["data"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("`with.url`: the URL's scheme is `file`; an `http` step calls only http:// and https:// URLs"),
        "{message}"
    );
}

#[test]
fn a_step_needing_itself_is_reported_beside_another_cycle() {
    let (overture, file) = Overture::with_blueprint(
        "cycles.yaml",
        "name: c\nsteps:\n  a: { run: noop, needs: [a] }\n  b: { run: noop, needs: [c] }\n  c: { run: noop, needs: [b] }\n",
    );
    assert_refused(
        &overture,
        &["validate", file.to_str().expect("path")],
        &[
            "cycles.yaml: steps.a.needs: step `a` needs itself; remove `a` from its needs",
            "cycles.yaml: steps: the needs form a cycle: b → c → b; remove one of these needs",
        ],
    );
}

#[test]
fn a_deep_or_huge_blueprint_is_refused_naming_the_limit() {
    let overture = Overture::new();
    let indented: String = (0..500)
        .map(|i| format!("{}k{i}:\n", " ".repeat(i)))
        .collect();
    let cases = [
        ("brackets.yaml", "[".repeat(200_000)),
        ("braces.yaml", "{".repeat(200_000)),
        ("indented.yaml", indented),
        (
            "inside.yaml",
            format!(
                "name: x\nsteps:\n  a: {{ run: script, with: {{ command: {} }} }}\n",
                "[".repeat(200_000)
            ),
        ),
    ];
    for (name, text) in cases {
        let file = overture.blueprint(name, &text);
        assert_refused(
            &overture,
            &["validate", file.to_str().expect("path")],
            &[name, "nest more than 64 deep", "at most 64 deep"],
        );
    }
    let huge = overture.blueprint(
        "huge.yaml",
        &format!(
            "name: x\ndescription: \"{}\"\nsteps:\n  a: {{ run: noop }}\n",
            "d".repeat(2 * 1024 * 1024)
        ),
    );
    let path = huge.to_str().expect("path");
    let size = std::fs::metadata(&huge).expect("the file").len();
    let said = format!("the file is {size} bytes");
    for command in ["validate", "deploy"] {
        assert_refused(
            &overture,
            &[command, path],
            &[
                "huge.yaml",
                &said,
                "more than the 1048576 (1 MiB) a blueprint may have",
            ],
        );
    }
    nothing_recorded(&overture);
}

// Issue 27: what the engine cannot run is refused at every door, naming the field (defects 7
// and 8: such input used to be recorded, then sit running for half an hour or crash the engine).

/// 2^63 ms: the retry wait that passed `validate` and then panicked the engine.
const TWO_TO_THE_63_MS: &str = "9223372036854775808ms";

#[test]
fn bad_paths_nul_bytes_and_huge_durations_are_refused_at_the_command_line() {
    let overture = Overture::new();
    let wait_words = format!("wait.yaml: steps.a.retry.step-failed.wait: `{TWO_TO_THE_63_MS}` is longer than the 720h (30 days) a blueprint may set; give at most 720h");
    let cases = [
        (
            "empty-part.yaml",
            "name: p\nsteps:\n  infra: { run: terraform, with: { dir: 'infra//net' } }\n".to_owned(),
            vec![
                "empty-part.yaml: steps.infra.with.dir: `infra//net` must be a plain path inside the blueprint's folder",
                "without `..`, `.` or empty parts",
            ],
        ),
        (
            "absolute.yaml",
            "name: p\nsteps:\n  infra: { run: terraform, with: { dir: /etc } }\n".to_owned(),
            vec!["absolute.yaml: steps.infra.with.dir: `/etc` must be a plain path"],
        ),
        (
            "nul.yaml",
            "name: p\nparams: { who: { default: \"a\\0b\" } }\nsteps:\n  a: { run: script, with: { command: \"echo 1\\0 2\" } }\n".to_owned(),
            vec![
                r"nul.yaml: steps.a.with.command: holds a NUL byte (\0), which no step can be given",
                r"nul.yaml: params.who.default: holds a NUL byte (\0)",
                "remove it",
            ],
        ),
        (
            "wait.yaml",
            format!("name: p\nsteps:\n  a: {{ run: noop, retry: {{ step-failed: {{ times: 1, wait: {TWO_TO_THE_63_MS} }} }} }}\n"),
            vec![
                wait_words.as_str(),
            ],
        ),
        (
            "durations.yaml",
            "name: p\non_failure: { grace: 721h }\nsteps:\n  a: { run: noop, timeout: 43201m }\n  b: { run: wait-ssh, timeout: 720h, with: { hosts: ['127.0.0.1:22'], timeout: 800h } }\n  c: { run: noop, requires: [{ service: web, timeout: 99999999999999999999h }] }\n".to_owned(),
            vec![
                "durations.yaml: on_failure.grace: `721h` is longer than the 720h",
                "durations.yaml: steps.a.timeout: `43201m` is longer than the 720h",
                "durations.yaml: steps.b.with.timeout: `800h` is longer than the 720h",
                "durations.yaml: steps.c.requires[0].timeout: `99999999999999999999h` is longer than the 720h",
            ],
        ),
    ];
    for (name, text, words) in cases {
        let file = overture.blueprint(name, &text);
        let path = file.to_str().expect("path");
        for command in ["validate", "deploy"] {
            assert_refused_printably(&overture, overture.command(&[command, path]), &words);
        }
    }
    // The bound itself is allowed.
    let longest = overture.blueprint(
        "longest.yaml",
        "name: p\non_failure: { grace: 720h }\nsteps:\n  a: { run: noop, timeout: 720h, retry: { step-failed: { times: 1, wait: 720h } } }\n",
    );
    let output = overture.run(&["validate", longest.to_str().expect("path")]);
    assert!(output.status.success(), "{}", text(&output.stderr));
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_paths_nul_bytes_and_huge_durations_are_refused_over_http_and_nothing_is_recorded() {
    use crate::api::{code, parsed, Client, Server};
    use reqwest::StatusCode;
    use serde_json::json;

    let cloud = crate::local_cloud::LocalCloud::up();
    let (_, token) = cloud.token("acme");
    let overture = Overture::new();
    let server = Server::start(&overture, &cloud.auth_url);
    let client = Client::new(&token);
    let url = server.at("/v1/deployments");
    let terraform = "name: t\nsteps:\n  infra: { run: terraform, with: { dir: infra } }\n";
    let with_param = "name: p\nparams: { who: {} }\nsecrets: [key]\nsteps:\n  a: { run: noop }\n";
    let main_tf = "resource \"terraform_data\" \"x\" {}\n";
    const SECRET_TAIL: &str = "never-shown-tail";
    let cases = [
        (
            json!({"blueprint": terraform, "files": {"infra/main.tf": main_tf, "infra/../../../etc/cron.d/x.tf": main_tf}}),
            "files",
            "has a `.` or `..` part",
        ),
        (
            json!({"blueprint": terraform, "files": {"infra//main.tf": main_tf}}),
            "files",
            "has an empty part",
        ),
        (
            json!({"blueprint": terraform, "files": {"infra/main.tf": main_tf, "/etc/passwd": "x"}}),
            "files",
            "is absolute",
        ),
        (
            json!({"blueprint": with_param, "params": {"who": "a\u{0}b"}, "secrets": {"key": "long-enough"}}),
            "params.who",
            "NUL byte",
        ),
        (
            json!({"blueprint": with_param, "params": {"who": "x"}, "secrets": {"key": format!("s\u{0}{SECRET_TAIL}")}}),
            "secrets.key",
            "NUL byte",
        ),
        (
            json!({"blueprint": format!("name: w\nsteps:\n  a: {{ run: noop, retry: {{ step-failed: {{ times: 1, wait: {TWO_TO_THE_63_MS} }} }} }}\n")}),
            "steps.a.retry.step-failed.wait",
            "longer than the 720h (30 days) a blueprint may set",
        ),
        (
            json!({"blueprint": "name: g\non_failure: { grace: 9999999h }\nsteps:\n  a: { run: noop }\n"}),
            "on_failure.grace",
            "give at most 720h",
        ),
    ];
    for (body, field, words) in cases {
        let (status, answer) = client.post(&url, &body).await;
        assert_eq!(
            (status, code(&answer).as_str()),
            (StatusCode::BAD_REQUEST, "invalid"),
            "{body}: {answer}"
        );
        let problems = parsed(&answer)["problems"].clone();
        assert!(
            problems
                .as_array()
                .into_iter()
                .flatten()
                .any(|p| p["field"] == field
                    && p["problem"]
                        .as_str()
                        .is_some_and(|text| text.contains(words))),
            "{body}: `{field}` with `{words}` missing from {answer}"
        );
        assert!(!answer.contains(SECRET_TAIL), "{answer}");
    }
    let (status, listed) = client.get(&url).await;
    assert_eq!((status, parsed(&listed)), (StatusCode::OK, json!([])));
    nothing_recorded(&overture);
}
