//! Blueprint validation: every problem is refused before anything runs, naming the field.

use overture_domain::blueprint::{parse, resolve_params, BlueprintError};
use overture_events::ErrorClass;

const VALID: &str = r#"
name: hello-world
description: says hello
params:
  greeting: { default: hello }
  name: {}
secrets: [api_key]
on_failure: { grace: 30s }
steps:
  build:
    run: script
    with: { command: "echo {{ params.greeting }} > out && echo url=x >> $OVERTURE_OUTPUTS" }
    timeout: 5m
    retry:
      step-failed: { times: 2, wait: 1s }
  test:
    run: script
    needs: [build]
    with: { command: "test {{ steps.build.outputs.url }} = x && echo {{ secrets.api_key }}" }
  report:
    run: noop
    needs: [test]
"#;

fn problems(text: &str) -> Vec<(String, String)> {
    match parse(text) {
        Ok(_) => panic!("expected the blueprint to be refused"),
        Err(BlueprintError(problems)) => {
            problems.into_iter().map(|p| (p.field, p.problem)).collect()
        }
    }
}

fn assert_problem(text: &str, field: &str, words: &[&str]) {
    let found = problems(text);
    assert!(
        found
            .iter()
            .any(|(f, p)| f == field && words.iter().all(|w| p.contains(w))),
        "expected a problem at `{field}` mentioning {words:?}, got {found:#?}"
    );
}

#[test]
fn a_valid_blueprint_is_read_whole() {
    let parsed = parse(VALID).expect("valid");
    let blueprint = parsed.snapshot;
    assert_eq!(blueprint.name, "hello-world");
    assert_eq!(blueprint.grace_ms, 30_000);
    assert_eq!(
        blueprint
            .steps
            .iter()
            .map(|s| s.name.as_str())
            .collect::<Vec<_>>(),
        ["build", "test", "report"]
    );
    let build = blueprint.step("build").expect("build");
    assert_eq!(build.timeout_ms, 300_000);
    assert_eq!(build.retry[&ErrorClass::StepFailed].times, 2);
    assert_eq!(build.retry[&ErrorClass::StepFailed].wait_ms, 1_000);
    assert_eq!(blueprint.params[0].default.as_deref(), Some("hello"));
    assert_eq!(parsed.hash.len(), 64);
}

#[test]
fn defaults_apply_when_left_out() {
    let parsed = parse("name: x\nsteps:\n  a: { run: noop }\n").expect("valid");
    assert_eq!(parsed.snapshot.grace_ms, 120_000);
    assert_eq!(parsed.snapshot.steps[0].timeout_ms, 600_000);
}

#[test]
fn a_cycle_names_the_steps_on_it() {
    let text = "name: x\nsteps:\n  a: { run: noop, needs: [c] }\n  b: { run: noop, needs: [a] }\n  c: { run: noop, needs: [b] }\n";
    assert_problem(text, "steps", &["cycle", "a → c → b → a"]);
}

#[test]
fn needs_naming_an_unknown_step() {
    assert_problem(
        "name: x\nsteps:\n  a: { run: noop, needs: [biuld] }\n",
        "steps.a.needs",
        &["unknown step `biuld`", "a"],
    );
}

#[test]
fn an_unknown_kind() {
    assert_problem(
        "name: x\nsteps:\n  a: { run: sript }\n",
        "steps.a.run",
        &["unknown step kind `sript`", "script", "noop"],
    );
}

#[test]
fn an_unknown_error_class() {
    let text = "name: x\nsteps:\n  a: { run: noop, retry: { flaky: { times: 1 } } }\n";
    assert_problem(
        text,
        "steps.a.retry.flaky",
        &["unknown error class", "step-failed"],
    );
}

#[test]
fn bad_durations_name_their_field() {
    assert_problem(
        "name: x\nsteps:\n  a: { run: noop, timeout: 5 minutes }\n",
        "steps.a.timeout",
        &["`5 minutes` is not a duration", "10s"],
    );
    assert_problem(
        "name: x\non_failure: { grace: soon }\nsteps:\n  a: { run: noop }\n",
        "on_failure.grace",
        &["soon"],
    );
    let text =
        "name: x\nsteps:\n  a: { run: noop, retry: { step-failed: { times: 1, wait: 1d } } }\n";
    assert_problem(text, "steps.a.retry.step-failed.wait", &["1d"]);
}

#[test]
fn templates_must_refer_to_what_can_exist() {
    let step = |command: &str| {
        format!("name: x\nparams: {{ p: {{}} }}\nsecrets: [s]\nsteps:\n  a: {{ run: script, with: {{ command: echo a }} }}\n  b: {{ run: script, with: {{ command: \"{command}\" }} }}\n")
    };
    assert_problem(
        &step("echo {{ params.q }}"),
        "steps.b.with.command",
        &["parameter `q`", "params"],
    );
    assert_problem(
        &step("echo {{ secrets.t }}"),
        "steps.b.with.command",
        &["secret `t`", "secrets"],
    );
    assert_problem(
        &step("echo {{ steps.zz.outputs.k }}"),
        "steps.b.with.command",
        &["step `zz`", "does not exist"],
    );
    assert_problem(
        &step("echo {{ steps.a.outputs.k }}"),
        "steps.b.with.command",
        &["does not need", "add `a` to its needs"],
    );
    assert_problem(
        &step("echo {{ env.HOME }}"),
        "steps.b.with.command",
        &["not a reference"],
    );
    parse(&step("echo {{ params.p }} {{ secrets.s }}")).expect("known references are fine");
}

#[test]
fn a_reference_whose_quoting_cannot_hold_its_value_is_refused_naming_the_fix() {
    // A block scalar keeps the command's newlines, so here-documents are what they seem.
    let step = |command: &str| {
        let indented = command.replace('\n', "\n        ");
        format!("name: x\nparams: {{ p: {{}} }}\nsteps:\n  b:\n    run: script\n    with:\n      command: |\n        {indented}\n")
    };
    assert_problem(
        &step("echo ${X:-{{ params.p }}}"),
        "steps.b.with.command",
        &[
            "`{{ params.p }}` is inside a `${...}` expansion",
            "assign it to a variable first",
        ],
    );
    assert_problem(
        &step("cat <<\\E{{ params.p }}\nx"),
        "steps.b.with.command",
        &["here-document's delimiter", "write the delimiter out"],
    );
    // Every quoting a shell teaches is fine, a quoted here-document included.
    parse(&step(
        "echo {{ params.p }} \"{{ params.p }}\" '{{ params.p }}' $(echo {{ params.p }})\ncat <<'EOF'\n{{ params.p }}\nEOF",
    ))
    .expect("every quoting context is accepted");
}

#[test]
fn an_unknown_top_level_field() {
    let found = problems("name: x\nstpes: {}\nsteps:\n  a: { run: noop }\n");
    assert!(
        found
            .iter()
            .any(|(_, p)| p.contains("unknown field `stpes`") && p.contains("steps")),
        "{found:#?}"
    );
}

#[test]
fn an_unknown_step_field_names_the_step() {
    let found = problems("name: x\nsteps:\n  a: { run: noop, cmd: x }\n");
    assert!(
        found
            .iter()
            .any(|(f, p)| f.contains("steps.a") && p.contains("unknown field `cmd`")),
        "{found:#?}"
    );
}

#[test]
fn kind_settings_are_checked() {
    assert_problem(
        "name: x\nsteps:\n  a: { run: script }\n",
        "steps.a.with",
        &["needs `with.command`"],
    );
    assert_problem(
        "name: x\nsteps:\n  a: { run: noop, with: { command: x } }\n",
        "steps.a.with.command",
        &["takes none"],
    );
}

#[test]
fn names_must_be_slugs() {
    assert_problem(
        "name: Hello World\nsteps:\n  a: { run: noop }\n",
        "name",
        &["lowercase"],
    );
    assert_problem(
        "name: x\nsteps:\n  Build_It: { run: noop }\n",
        "steps.Build_It",
        &["lowercase"],
    );
}

#[test]
fn every_problem_is_reported_at_once() {
    let text = "name: x\nsteps:\n  a: { run: sript, needs: [nope], timeout: never }\n";
    assert_eq!(problems(text).len(), 3);
}

#[test]
fn parameters_are_resolved_from_given_values_and_defaults() {
    let blueprint = parse(VALID).expect("valid").snapshot;
    let given = [("name".to_owned(), "ada".to_owned())].into();
    let values = resolve_params(&blueprint, &given).expect("resolves");
    assert_eq!(values["greeting"], "hello");
    assert_eq!(values["name"], "ada");

    let missing = resolve_params(&blueprint, &Default::default()).expect_err("name has no default");
    assert!(
        missing.to_string().contains("params.name: no value given"),
        "{missing}"
    );
    let unknown = resolve_params(
        &blueprint,
        &[
            ("nmae".to_owned(), "x".to_owned()),
            ("name".to_owned(), "x".to_owned()),
        ]
        .into(),
    )
    .expect_err("unknown parameter");
    assert!(unknown.to_string().contains("--param nmae"), "{unknown}");
}

#[test]
fn host_groups_are_named_and_their_templates_checked_where_they_are_used() {
    let text = r#"
name: hosts
hosts:
  web: ["{{ steps.infra.outputs.address }}:22"]
  Bad_Name: ["10.0.0.1"]
  empty: []
steps:
  infra: { run: noop }
  wait: { run: wait-ssh, with: { hosts: web } }
"#;
    assert_problem(text, "hosts.Bad_Name", &["lowercase"]);
    assert_problem(text, "hosts.empty", &["at least one"]);
    assert_problem(
        text,
        "steps.wait.with.hosts",
        &["step `infra`", "add `infra` to its needs"],
    );
    let fixed = parse(
        r#"
name: hosts
hosts:
  web: ["{{ steps.infra.outputs.address }}:22", "10.0.0.2"]
steps:
  infra: { run: noop }
  wait: { run: wait-ssh, needs: [infra], with: { hosts: web, timeout: 30s } }
"#,
    )
    .expect("valid");
    assert_eq!(fixed.snapshot.hosts["web"].len(), 2);
}

#[test]
fn the_files_steps_take_are_recorded_in_the_blueprint_and_its_hash() {
    use overture_domain::blueprint::{attach_files, bundle_dirs};
    let text = "name: files\nsteps:\n  infra: { run: terraform, with: { dir: infra } }\n  conf: { run: ansible, with: { playbook: play/site.yml, hosts: ['h:22'] } }\n";
    let mut parsed = parse(text).expect("valid");
    let text_only = parsed.hash.clone();
    assert_eq!(
        bundle_dirs(&parsed.snapshot),
        vec![
            ("steps.infra.with.dir".to_owned(), "infra".to_owned()),
            ("steps.conf.with.playbook".to_owned(), "play".to_owned())
        ]
    );
    let missing = attach_files(
        &mut parsed.clone(),
        [("infra/main.tf".to_owned(), String::new())].into(),
    )
    .expect_err("the playbook is missing");
    assert_eq!(missing.0[0].field, "steps.conf.with.playbook");

    let files: std::collections::BTreeMap<String, String> = [
        (
            "infra/main.tf".to_owned(),
            "resource \"terraform_data\" \"x\" {}".to_owned(),
        ),
        ("play/site.yml".to_owned(), "- hosts: all\n".to_owned()),
    ]
    .into();
    attach_files(&mut parsed, files.clone()).expect("attached");
    assert_eq!(parsed.snapshot.files, files);
    assert_ne!(parsed.hash, text_only, "the hash covers the files");
}

#[test]
fn a_wait_for_ssh_must_end_before_its_step_times_out() {
    assert_problem(
        "name: w\nsteps:\n  wait: { run: wait-ssh, timeout: 1m, with: { hosts: ['h:22'], timeout: 2m } }\n",
        "steps.wait.with.timeout",
        &["shorter than the step's `timeout` (1m)"],
    );
    assert_problem(
        "name: w\nsteps:\n  wait: { run: wait-ssh, timeout: 90s, with: { hosts: ['h:22'] } }\n",
        "steps.wait.with.timeout",
        &["the wait (2m)"],
    );
}

#[test]
fn a_step_name_is_at_most_63_characters() {
    let long = "s".repeat(64);
    assert_problem(
        &format!("name: n\nsteps:\n  {long}: {{ run: noop }}\n"),
        &format!("steps.{long}"),
        &["at most 63 characters"],
    );
    assert!(parse(&format!(
        "name: n\nsteps:\n  {}: {{ run: noop }}\n",
        "s".repeat(63)
    ))
    .is_ok());
}

const CLOUD_STEPS: &str = r#"
steps:
  servers:
    run: servers
    with:
      security_groups: { bastion: [] }
      servers: { bastion: { security_groups: [bastion], role: bastion }, web-1: {} }
  configure:
    run: ansible
    with: { playbook: site.yml, hosts: web }
    needs: [servers]
"#;

#[test]
fn hosts_made_in_the_cloud_need_a_bastion() {
    let text = format!(
        "name: cloud\nhosts:\n  web: [\"{{{{ steps.servers.outputs.web-1 }}}}\"]\n{CLOUD_STEPS}"
    );
    let problems = parse(&text).expect_err("no bastion").0;
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].field, "bastion");
    assert!(
        problems[0].problem.contains("add `bastion:`"),
        "{}",
        problems[0]
    );
}

#[test]
fn a_bastion_names_its_host_and_group_and_precedes_the_steps_that_use_it() {
    let bastion = "bastion:\n  host: \"{{ steps.servers.outputs.bastion }}\"\n  security_group: \"{{ steps.servers.outputs.security-group-bastion }}\"\n";
    let text = format!(
        "name: cloud\nhosts:\n  web: [\"{{{{ steps.servers.outputs.web-1 }}}}\"]\n{bastion}{CLOUD_STEPS}"
    );
    let parsed = parse(&text).expect("valid");
    let spec = parsed.snapshot.bastion.expect("a bastion");
    assert_eq!(spec.user, "root");

    let early = text.replace("    needs: [servers]\n", "");
    let problems = parse(&early).expect_err("ansible does not need servers").0;
    assert!(
        problems.iter().any(|p| p.field == "steps.configure.needs"
            && p.problem.contains("add `servers` to its needs")),
        "{problems:?}"
    );

    let secret = text.replace(
        "{{ steps.servers.outputs.bastion }}",
        "{{ secrets.bastion }}",
    );
    let problems = parse(&secret).expect_err("a secret bastion").0;
    assert!(
        problems
            .iter()
            .any(|p| p.field == "bastion.host" && p.problem.contains("cannot be a secret")),
        "{problems:?}"
    );
}

#[test]
fn the_outputs_a_step_hands_on_are_those_some_template_uses() {
    let blueprint = parse(
        "name: x\nhosts:\n  web: ['{{ steps.infra.outputs.address }}']\nsteps:\n  infra: { run: noop }\n  conf: { run: script, needs: [infra], with: { command: 'echo {{ steps.infra.outputs.port }} {{ steps.infra.outputs.port }}' } }\n  check: { run: wait-ssh, needs: [infra], with: { hosts: web } }\n",
    )
    .expect("valid")
    .snapshot;
    assert_eq!(
        overture_domain::blueprint::used_outputs(&blueprint, "infra"),
        ["address".to_owned(), "port".to_owned()].into()
    );
    assert!(overture_domain::blueprint::used_outputs(&blueprint, "conf").is_empty());
}

// Issue 9: each defect, given the input a user would write.

#[test]
fn a_step_given_twice_is_refused_with_both_lines() {
    let text = "name: x\nsteps:\n  a: { run: noop }\n  b: { run: noop }\n  a: { run: script, with: { command: 'true' } }\n";
    let found = problems(text);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_problem(
        text,
        "steps.a",
        &["given twice", "lines 3 and 5", "remove or rename one"],
    );
}

#[test]
fn any_key_given_twice_is_refused_with_both_lines() {
    assert_problem(
        "name: x\nsteps:\n  a: { run: noop }\nname: y\n",
        "name",
        &["lines 1 and 4"],
    );
    assert_problem(
        "name: x\nsteps:\n  a:\n    run: script\n    with:\n      command: 'true'\n      command: 'false'\n",
        "steps.a.with.command",
        &["lines 6 and 7"],
    );
    assert_problem(
        "name: x\nsecrets: [k]\nsteps:\n  a: { run: noop, retry: { step-failed: { times: 1, times: 2 } } }\n",
        "steps.a.retry.step-failed.times",
        &["line", "4 and 4"],
    );
}

#[test]
fn control_characters_in_names_are_refused_and_never_shown_raw() {
    // YAML's double quotes write ESC as `\e` and BEL as `\a`.
    let text = "name: \"demo\\e[2J\"\nsteps:\n  \"ok\\a\": { run: noop }\n  b: { run: noop, needs: [\"x\\e]0;owned\\a\"] }\n";
    let error = parse(text).expect_err("refused");
    let fields: Vec<&str> = error.0.iter().map(|p| p.field.as_str()).collect();
    assert!(fields.contains(&"name"), "{fields:?}");
    assert!(fields.contains(&"steps.ok\u{7}"), "{fields:?}");
    assert!(fields.contains(&"steps.b.needs"), "{fields:?}");
    let shown = error.to_string();
    assert!(
        !shown.contains('\u{1b}') && !shown.contains('\u{7}'),
        "{shown:?}"
    );
    assert!(shown.contains(r"`demo\u{1b}[2J`"), "{shown}");
    assert!(shown.contains(r"steps.ok\u{7}:"), "{shown}");
}

#[test]
fn an_unknown_field_with_an_escape_sequence_is_shown_escaped() {
    let error =
        parse("name: x\n\"\\e[31mred\": 1\nsteps:\n  a: { run: noop }\n").expect_err("refused");
    let shown = error.to_string();
    assert!(shown.contains(r"\u{1b}[31mred"), "{shown}");
    assert!(!shown.contains('\u{1b}'), "{shown:?}");
}

#[test]
fn an_http_url_of_another_scheme_is_refused() {
    assert_problem(
        "name: x\nsteps:\n  a: { run: http, with: { url: 'file:///etc/passwd' } }\n",
        "steps.a.with.url",
        &["scheme `file`", "http:// and https://"],
    );
    assert_problem(
        "name: x\nparams: { host: {} }\nsteps:\n  a: { run: http, with: { url: 'gopher://{{ params.host }}/' } }\n",
        "steps.a.with.url",
        &["scheme `gopher`"],
    );
    parse("name: x\nparams: { api: {} }\nsteps:\n  a: { run: http, with: { url: '{{ params.api }}/x' } }\n")
        .expect("a URL that is a template is checked when it is rendered");
}

#[test]
fn a_step_needing_itself_is_reported_beside_another_cycle() {
    let text = "name: x\nsteps:\n  a: { run: noop, needs: [a] }\n  b: { run: noop, needs: [c] }\n  c: { run: noop, needs: [b] }\n";
    assert_problem(text, "steps.a.needs", &["`a` needs itself"]);
    assert_problem(text, "steps", &["cycle", "b → c → b"]);
    assert_eq!(problems(text).len(), 2);
}

#[test]
fn two_separate_cycles_are_both_reported() {
    let text = "name: x\nsteps:\n  a: { run: noop, needs: [b] }\n  b: { run: noop, needs: [a] }\n  c: { run: noop, needs: [d] }\n  d: { run: noop, needs: [c] }\n";
    assert_problem(text, "steps", &["a → b → a"]);
    assert_problem(text, "steps", &["c → d → c"]);
}

#[test]
fn deep_nesting_is_refused_naming_the_limit() {
    for text in [
        "[".repeat(200_000),
        "{".repeat(200_000),
        format!(
            "name: x\nsteps:\n  a: {{ run: noop, with: {{ command: {} }} }}\n",
            "[".repeat(100_000)
        ),
    ] {
        let found = problems(&text);
        assert_eq!(found.len(), 1, "{found:#?}");
        assert!(found[0].1.contains("at most 64 deep"), "{:?}", found[0]);
    }
    let indented: String = (0..200)
        .map(|i| format!("{}k{i}:\n", "  ".repeat(i)))
        .collect();
    let found = problems(&indented);
    assert!(found[0].1.contains("at most 64 deep"), "{found:#?}");
}

#[test]
fn a_blueprint_over_a_mebibyte_is_refused() {
    let text = format!(
        "name: x\ndescription: \"{}\"\nsteps:\n  a: {{ run: noop }}\n",
        "d".repeat(1024 * 1024)
    );
    let found = problems(&text);
    assert!(found[0].1.contains("1 MiB"), "{found:#?}");
}

#[test]
fn a_host_address_with_a_control_character_is_refused() {
    let text = "name: x\nhosts:\n  web: [\"10.0.0.1\\e[31m\"]\nsteps:\n  a: { run: wait-ssh, with: { hosts: [\"h\\a:22\"] } }\n";
    assert_problem(text, "hosts.web[0]", &["control character"]);
    assert_problem(text, "steps.a.with.hosts", &["control character"]);
    assert!(!parse(text)
        .expect_err("refused")
        .to_string()
        .contains('\u{1b}'));
}

#[test]
fn a_step_s_limits_are_recorded_with_the_defaults_filled_in() {
    let parsed = parse(
        "name: x\nsteps:\n  a: { run: script, with: { command: 'true' }, limits: { memory: 512MiB, pids: 256, cpu: 1.5 } }\n  b: { run: script, with: { command: 'true' } }\n",
    )
    .expect("valid");
    let step = |name: &str| {
        parsed
            .snapshot
            .steps
            .iter()
            .find(|s| s.name == name)
            .and_then(|s| s.limits)
            .expect("limits are recorded")
    };
    let a = step("a");
    assert_eq!(
        (a.memory_bytes, a.pids, a.cpu_millis),
        (512 << 20, 256, 1500)
    );
    assert_eq!(
        a.workspace_bytes,
        overture_events::StepLimits::DEFAULT_WORKSPACE
    );
    assert_eq!(step("b"), overture_events::StepLimits::default());
}

#[test]
fn a_bad_limit_names_its_field_and_the_fix() {
    assert_problem(
        "name: x\nsteps:\n  a: { run: script, with: { command: 'true' }, limits: { memory: 1 Gigabyte } }\n",
        "steps.a.limits.memory",
        &["not a size", "512MiB"],
    );
    assert_problem(
        "name: x\nsteps:\n  a: { run: script, with: { command: 'true' }, limits: { pids: 1 } }\n",
        "steps.a.limits.pids",
        &["too few", "at least 8"],
    );
}

#[test]
fn egress_destinations_are_kept_as_declared() {
    let text = VALID.replace(
        "on_failure:",
        "egress: [\"10.20.0.0/16\", \"192.0.2.10:443\", \"127.0.0.1:8500\"]\non_failure:",
    );
    let parsed = parse(&text).expect("valid");
    assert_eq!(
        parsed.snapshot.egress,
        ["10.20.0.0/16", "192.0.2.10:443", "127.0.0.1:8500"]
    );
}

#[test]
fn egress_refuses_metadata_loopback_ranges_and_what_is_not_an_address() {
    let with = |entry: &str| {
        VALID.replace(
            "on_failure:",
            &format!("egress: [\"{entry}\"]\non_failure:"),
        )
    };
    assert_problem(
        &with("169.254.169.254:80"),
        "egress[0]",
        &["link-local", "10.0.0.5:443"],
    );
    assert_problem(&with("0.0.0.0/0"), "egress[0]", &["link-local"]);
    assert_problem(
        &with("127.0.0.0/8"),
        "egress[0]",
        &["loopback", "127.0.0.1:PORT"],
    );
    assert_problem(
        &with("db.example.com:5432"),
        "egress[0]",
        &["not an IPv4 address"],
    );
    assert_problem(
        &with("10.0.0.1/24"),
        "egress[0]",
        &["host bits", "10.0.0.0/24"],
    );
}

/// db provides `db`, app requires it and provides `app` on two hosts, lb requires both app
/// instances, watches app and takes its members.
const SERVICES: &str = r#"
name: cluster
steps:
  db:
    run: wait-ssh
    with: { hosts: ["10.0.0.5:22"] }
    provides: { service: db, port: 5432 }
  app:
    run: wait-ssh
    with: { hosts: ["10.0.0.6:22", "10.0.0.7:22"] }
    requires: [{ service: db, timeout: 90s }]
    provides: { service: app, port: 8000, check: { http: /health } }
  lb:
    run: script
    with: { command: "echo {{ services.app.addresses }} {{ services.app.addresses[1] }} {{ services.app.count }}" }
    requires: [{ service: app, count: 2 }]
    watch: [app]
"#;

#[test]
fn services_provided_required_and_watched_are_read_with_their_defaults() {
    use overture_events::{ServiceCheck, ServiceProvision, ServiceRequirement};
    let parsed = parse(SERVICES).expect("valid");
    assert!(parsed.warnings.is_empty(), "{:#?}", parsed.warnings);
    let blueprint = parsed.snapshot;
    let db = blueprint.step("db").expect("db");
    assert_eq!(
        db.provides,
        Some(ServiceProvision {
            service: "db".into(),
            port: 5432,
            check: ServiceCheck::Tcp
        }),
        "the check is tcp unless given"
    );
    let app = blueprint.step("app").expect("app");
    assert_eq!(
        app.provides.as_ref().map(|p| &p.check),
        Some(&ServiceCheck::Http {
            path: "/health".into()
        })
    );
    assert_eq!(
        app.requires,
        vec![ServiceRequirement {
            service: "db".into(),
            count: 1,
            timeout_ms: 90_000
        }],
        "a count of 1 unless given"
    );
    let lb = blueprint.step("lb").expect("lb");
    assert_eq!(
        lb.requires,
        vec![ServiceRequirement {
            service: "app".into(),
            count: 2,
            timeout_ms: 600_000
        }],
        "a wait of 10 min unless given"
    );
    assert_eq!(lb.watch, ["app"]);
}

#[test]
fn a_requirement_that_only_a_later_step_provides_is_a_cycle_naming_its_steps() {
    let text = r#"
name: x
steps:
  app:
    run: wait-ssh
    with: { hosts: ["10.0.0.6:22"] }
    requires: [{ service: db }]
    provides: { service: app, port: 8000 }
  db:
    run: wait-ssh
    needs: [app]
    with: { hosts: ["10.0.0.5:22"] }
    provides: { service: db, port: 5432 }
"#;
    let found = problems(text);
    assert!(
        found.iter().any(|(field, problem)| field == "steps"
            && problem.contains("cycle")
            && problem.contains("app")
            && problem.contains("db")),
        "{found:#?}"
    );
    let mutual = r#"
name: x
steps:
  a:
    run: wait-ssh
    with: { hosts: ["10.0.0.1:22"] }
    requires: [{ service: b }]
    provides: { service: a, port: 1 }
  b:
    run: wait-ssh
    with: { hosts: ["10.0.0.2:22"] }
    requires: [{ service: a }]
    provides: { service: b, port: 2 }
"#;
    assert_problem(mutual, "steps", &["cycle", "a → b", "b → a"]);
    let own = r#"
name: x
steps:
  a:
    run: wait-ssh
    with: { hosts: ["10.0.0.1:22"] }
    requires: [{ service: a }]
    provides: { service: a, port: 1 }
"#;
    assert_problem(own, "steps", &["cycle", "a → a"]);
}

#[test]
fn a_template_naming_a_service_the_step_neither_requires_nor_watches_is_refused() {
    let text = r#"
name: x
steps:
  lb:
    run: script
    with: { command: "echo {{ services.app.addresses }}" }
"#;
    assert_problem(
        text,
        "steps.lb.with.command",
        &["service `app`", "neither requires nor watches"],
    );
    let watched = r#"
name: x
steps:
  lb:
    run: script
    with: { command: "echo {{ services.app.addresses }}" }
    watch: [app]
"#;
    assert!(parse(watched).is_ok(), "watching it is enough");
}

#[test]
fn a_member_beyond_the_required_count_is_refused_naming_the_count_to_require() {
    let text = r#"
name: x
steps:
  lb:
    run: script
    with: { command: "echo {{ services.app.addresses[2] }}" }
    requires: [{ service: app, count: 2 }]
"#;
    assert_problem(
        text,
        "steps.lb.with.command",
        &["member 2", "only 2 member(s)", "count: 3"],
    );
    let within = text.replace("count: 2", "count: 3");
    assert!(parse(&within).is_ok());
    let only_watched = r#"
name: x
steps:
  lb:
    run: script
    with: { command: "echo {{ services.app.addresses[0] }}" }
    watch: [app]
"#;
    assert_problem(
        only_watched,
        "steps.lb.with.command",
        &["member 0", "does not wait for any", "count: 1"],
    );
}

#[test]
fn a_required_count_the_blueprint_cannot_provide_is_a_warning_not_an_error() {
    let too_few = SERVICES.replace("count: 2", "count: 3");
    let parsed = parse(&too_few).expect("allowed");
    let warnings: Vec<(&str, &str)> = parsed
        .warnings
        .iter()
        .map(|w| (w.field.as_str(), w.problem.as_str()))
        .collect();
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    assert_eq!(warnings[0].0, "steps.lb.requires[0]");
    assert!(
        warnings[0].1.contains("at most 2") && warnings[0].1.contains("fewer than the 3"),
        "{warnings:#?}"
    );

    let nobody = r#"
name: x
steps:
  lb:
    run: noop
    requires: [{ service: app, timeout: 5m }]
"#;
    let parsed = parse(nobody).expect("allowed: another deployment may provide it");
    assert_eq!(parsed.warnings.len(), 1);
    assert_eq!(parsed.warnings[0].field, "steps.lb.requires[0]");
    assert!(
        parsed.warnings[0]
            .problem
            .contains("no step of this blueprint provides service `app`")
            && parsed.warnings[0].problem.contains("5m"),
        "{:#?}",
        parsed.warnings
    );
}

#[test]
fn a_bad_provides_names_its_field() {
    let with = |provides: &str| {
        format!(
            "name: x\nsteps:\n  db:\n    run: wait-ssh\n    with: {{ hosts: [\"10.0.0.5:22\"] }}\n    provides: {provides}\n"
        )
    };
    assert_problem(
        &with("{ service: db, port: 0 }"),
        "steps.db.provides.port",
        &["`0`", "1 to 65535"],
    );
    assert_problem(
        &with("{ service: db, port: 65536 }"),
        "steps.db.provides.port",
        &["`65536`", "1 to 65535"],
    );
    for check in [
        "udp",
        "{ http: health }",
        "{ http: /a b }",
        "{ grpc: /x }",
        "{ http: /x, tcp: 1 }",
    ] {
        assert_problem(
            &with(&format!("{{ service: db, port: 5432, check: {check} }}")),
            "steps.db.provides.check",
            &["check: tcp", "http: /PATH"],
        );
    }
    assert_problem(
        &with("{ service: Bad_Name, port: 5432 }"),
        "steps.db.provides.service",
        &["a service's name"],
    );
    assert!(parse(&with("{ service: db, port: 65535, check: tcp }")).is_ok());
    assert_problem(
        "name: x\nsteps:\n  db:\n    run: noop\n    provides: { service: db, port: 5432 }\n",
        "steps.db.provides",
        &["with.hosts"],
    );
}

#[test]
fn a_bad_requires_names_its_field() {
    let with = |requires: &str| {
        format!("name: x\nsteps:\n  lb:\n    run: noop\n    requires: {requires}\n")
    };
    assert_problem(
        &with("[{ service: app, count: 0 }]"),
        "steps.lb.requires[0].count",
        &["at least 1"],
    );
    assert_problem(
        &with("[{ service: app, timeout: soon }]"),
        "steps.lb.requires[0].timeout",
        &["soon"],
    );
    assert_problem(
        &with("[{ service: app, timeout: 0s }]"),
        "steps.lb.requires[0].timeout",
        &["0s"],
    );
    assert_problem(
        &with("[{ service: app }, { service: app, count: 2 }]"),
        "steps.lb.requires[1].service",
        &["required twice"],
    );
    assert_problem(
        &with("[{ service: Bad_Name }]"),
        "steps.lb.requires[0].service",
        &["a service's name"],
    );
    assert_problem(
        "name: x\nsteps:\n  lb:\n    run: noop\n    requires: [{ service: app }]\n    retry: { service-timeout: { times: 2 } }\n",
        "steps.lb.retry.service-timeout",
        &["not retried", "`timeout` under `requires`"],
    );
}

#[test]
fn a_bad_watch_entry_names_its_field() {
    let with = |watch: &str| format!("name: x\nsteps:\n  lb:\n    run: noop\n    watch: {watch}\n");
    assert_problem(
        &with("[app, app]"),
        "steps.lb.watch[1]",
        &["`app` is listed twice"],
    );
    assert_problem(
        &with("[app, Bad_Name]"),
        "steps.lb.watch[1]",
        &["a service's name"],
    );
    assert!(parse(&with("[app, db]")).is_ok());
}
