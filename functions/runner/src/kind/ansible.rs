//! The runner's half of the `ansible` kind: `ansible-playbook` runs a playbook from the
//! blueprint's folder against the step's hosts, logging in over SSH with the deployment's own
//! key. Its settings ([`AnsibleSettings`]: `playbook`, `hosts`, `user`, `vars`) and their checks
//! are the kind's other half, `domain/src/kind/ansible.rs`.
//!
//! [`prepare`] lays out the sandbox's `/work`:
//!
//! ```text
//! playbook/...            the playbook's folder, as the blueprint recorded it
//! ansible/ansible.cfg     the settings (ANSIBLE_CONFIG points here, see CONFIG)
//! ansible/inventory.yml   one host per address, see `inventory`
//! ansible/extra-vars.yml  the rendered `vars`, passed with `-e @file`, see `extra_vars`
//! ssh/id_ed25519          the deployment's private key (see `StepInput::ssh_key_file`)
//! ```
//!
//! Behind a bastion, the inventory gives every host ssh arguments that reach it through the
//! bastion (`Jump::proxy_command`).
//!
//! Secrets reach ansible only inside files (the sandbox writes them with mode 0600), never on its
//! command line or in its environment. [`conclude`] reads the PLAY RECAP at the end of the
//! output: its counts become the step's outputs on success ([`outputs`]), and name the hosts that
//! failed or could not be reached on failure.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use overture_domain::kind::AnsibleSettings;
use overture_events::ErrorClass;
use serde_json::{json, Value};

use crate::step::{
    check_user, shell_quote, Jump, Prepared, SshAddress, StepInput, Verdict, SSH_KEY_FILE,
};
use crate::SandboxResult;

/// The user ansible logs in as, unless the step says.
pub const DEFAULT_USER: &str = "root";

/// `ansible-playbook`'s exit code when a host could not be reached. It is also its code for a
/// playbook or inventory it could not parse; [`conclude`] tells the two apart by the recap,
/// which only a run that reached its plays prints.
const EXIT_UNREACHABLE: i32 = 4;

/// Where the playbook's folder goes, under `/work`.
const PLAYBOOK_DIR: &str = "playbook";
const CONFIG_FILE: &str = "ansible/ansible.cfg";
const INVENTORY_FILE: &str = "ansible/inventory.yml";
const EXTRA_VARS_FILE: &str = "ansible/extra-vars.yml";

/// The settings every run uses. Host keys are checked against the deployment's pinned keys
/// only ([`crate::host_keys`]): a host not pinned yet is learned on first contact. Everything
/// ansible and ssh write stays in `/work` or `/tmp`, which vanish with the sandbox.
const CONFIG: &str = "\
[defaults]
host_key_checking = True
retry_files_enabled = False
local_tmp = /work/.ansible/tmp
# On the managed hosts: under /tmp rather than the user's home, so a run leaves nothing behind
# that outlives the host's next boot.
remote_tmp = /tmp/.ansible-${USER}/tmp
nocolor = True
stdout_callback = default
interpreter_python = auto_silent
# Host group names may hold '-' (they are blueprint names); ansible would warn about each.
force_valid_group_names = ignore

[ssh_connection]
ssh_args = -o ControlMaster=auto -o ControlPersist=60s -o UserKnownHostsFile=/work/ssh/known_hosts -o StrictHostKeyChecking=accept-new -o HashKnownHosts=no -o UpdateHostKeys=no -o IdentitiesOnly=yes -o BatchMode=yes -o LogLevel=ERROR
control_path_dir = /tmp/ansible-cp
# Modules go over the SSH session's stdin instead of as files (fewer round trips); a step can
# turn this off for its hosts with `vars: { ansible_pipelining: false }`.
pipelining = True
";

/// Builds the sandbox command of an attempt.
pub fn prepare(input: &StepInput, settings: &AnsibleSettings) -> Result<Prepared, String> {
    let playbook = settings.playbook.as_str();
    let dir = settings.folder();
    let playbook_file = if dir.is_empty() {
        playbook
    } else {
        playbook
            .strip_prefix(&dir)
            .and_then(|rest| rest.strip_prefix('/'))
            .unwrap_or(playbook)
    };
    let user = match &settings.user {
        Some(user) => input.render(user)?,
        None => DEFAULT_USER.to_owned(),
    };
    check_user(&user)?;
    let key = input.ssh_key_file()?;
    let bastion = input.bastion()?;

    let hosts: Vec<Host> = input
        .render_hosts(&settings.hosts)?
        .into_iter()
        .map(Host::from)
        .collect();
    // A host group's name also becomes an inventory group, so a playbook may target it.
    let group = settings.hosts.group.as_deref();
    let inventory = inventory(
        &hosts,
        group,
        &user,
        &format!("/work/{SSH_KEY_FILE}"),
        bastion.as_ref(),
    )?;
    let vars = input.render_value(&Value::Object(settings.vars.clone()))?;

    let mut files: Vec<(PathBuf, Vec<u8>)> = input
        .files_under(&dir)
        .into_iter()
        .map(|(path, text)| {
            (
                PathBuf::from(PLAYBOOK_DIR).join(path),
                text.as_bytes().to_vec(),
            )
        })
        .collect();
    files.extend([
        (PathBuf::from(CONFIG_FILE), CONFIG.as_bytes().to_vec()),
        (PathBuf::from(INVENTORY_FILE), inventory.into_bytes()),
        (
            PathBuf::from(EXTRA_VARS_FILE),
            extra_vars(&vars).into_bytes(),
        ),
        key,
        crate::host_keys::known_hosts_file(input.state),
    ]);

    let command = format!(
        "exec ansible-playbook -i /work/{INVENTORY_FILE} -e @/work/{EXTRA_VARS_FILE} {}",
        shell_quote(&format!("/work/{PLAYBOOK_DIR}/{playbook_file}"))
    );
    Ok(Prepared {
        command,
        env: vec![("ANSIBLE_CONFIG".into(), format!("/work/{CONFIG_FILE}"))],
        files,
        network: true,
        collect: vec![crate::host_keys::KNOWN_HOSTS_FILE.into()],
        ..Prepared::default()
    })
}

/// Judges the command's exit: 0 succeeds with the recap's counts as outputs; 4 with a host the
/// recap calls unreachable is [`ErrorClass::HostUnreachable`]; anything else is `step-failed`.
pub fn conclude(input: &StepInput, code: i32, result: &SandboxResult) -> Verdict {
    let recap = parse_recap(&String::from_utf8_lossy(&result.output));
    let named = |pick: fn(&Counts) -> u64| -> Vec<&str> {
        recap
            .iter()
            .filter(|(_, counts)| pick(counts) > 0)
            .map(|(host, _)| host.as_str())
            .collect()
    };
    let unreachable = named(|c| c.unreachable);
    let failed = named(|c| c.failed);
    match code {
        0 => Verdict::Success(outputs(&recap)),
        // Behind a bastion, an unreachable bastion makes every host unreachable: the same class,
        // since a retry is as likely to help. The headline names the bastion because nothing
        // else will: with ControlPersist, ssh sends its ProxyCommand's error output to /dev/null
        // (so that it cannot hold ansible's pipes open), and ansible only reports that the
        // connection closed.
        EXIT_UNREACHABLE if !unreachable.is_empty() => Verdict::Failure {
            class: ErrorClass::HostUnreachable,
            headline: format!(
                "could not reach {}{} (ansible-playbook exited with code {code})",
                unreachable.join(", "),
                match input.bastion() {
                    Ok(Some(bastion)) => format!(" through the bastion {}", bastion.address.address),
                    _ => String::new(),
                }
            ),
        },
        EXIT_UNREACHABLE if recap.is_empty() => Verdict::failed(format!(
            "ansible-playbook exited with code {code} before running a play: it could not load the playbook or its inventory"
        )),
        _ if !failed.is_empty() => Verdict::failed(format!(
            "the playbook failed on {} (ansible-playbook exited with code {code})",
            failed.join(", ")
        )),
        _ => Verdict::failed(format!("ansible-playbook exited with code {code}")),
    }
}

/// One inventory host: the address it is reached at, and its name in the inventory and in the
/// step's outputs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Host {
    /// The address as the step gave it, rendered.
    pub address: String,
    /// Its name: the address with every character other than ASCII letters, digits, `-` and
    /// `_` replaced by `_` (`10.0.0.5:2222` is `10_0_0_5_2222`), so that it can be part of an
    /// output key.
    pub name: String,
    /// The host name or IP address ssh connects to.
    pub host: String,
    /// The port ssh connects to.
    pub port: u16,
}

impl Host {
    /// Reads `host`, `host:port`, `[ipv6]` or `[ipv6]:port` (see [`SshAddress::parse`]).
    pub fn parse(address: &str) -> Result<Self, String> {
        Ok(Self::from(SshAddress::parse(address)?))
    }
}

impl From<SshAddress> for Host {
    fn from(address: SshAddress) -> Self {
        Host {
            name: sanitise(&address.address),
            address: address.address,
            host: address.host,
            port: address.port,
        }
    }
}

/// The text with every character that may not be in an output key replaced by `_`.
fn sanitise(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The inventory (JSON, which ansible reads as YAML): every host under `all`, and under a group
/// named after the step's host group when it names one. Behind a bastion, `all` also sets the
/// ssh arguments that reach its hosts through it.
pub fn inventory(
    hosts: &[Host],
    group: Option<&str>,
    user: &str,
    key_file: &str,
    bastion: Option<&Jump>,
) -> Result<String, String> {
    let mut entries = serde_json::Map::new();
    let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
    for host in hosts {
        if let Some(earlier) = seen.insert(&host.name, &host.address) {
            return Err(format!(
                "the hosts `{earlier}` and `{}` would both be named `{}` in the inventory; list each host once",
                host.address, host.name
            ));
        }
        entries.insert(
            host.name.clone(),
            json!({
                "ansible_host": host.host,
                "ansible_port": host.port,
                "ansible_user": user,
                "ansible_ssh_private_key_file": key_file,
            }),
        );
    }
    let mut all = json!({ "hosts": entries });
    // `all` and `ungrouped` are ansible's own groups, which every host is in already.
    if let Some(group) = group.filter(|group| !matches!(*group, "all" | "ungrouped")) {
        let members: serde_json::Map<String, Value> = hosts
            .iter()
            .map(|host| (host.name.clone(), json!({})))
            .collect();
        all["children"] = json!({ group: { "hosts": members } });
    }
    if let Some(bastion) = bastion {
        // `ssh_common_args` rather than ansible.cfg's `ssh_args`: ansible.cfg is read with `%`
        // interpolation and `;` comments, both of which a ProxyCommand would trip, and these
        // arguments also reach scp and sftp, which copy files over the same way. As a variable
        // of `all` it also covers a host a playbook adds (`add_host`): it is behind the bastion
        // too. ansible.cfg's `ssh_args` still apply, so each host keeps one ControlPersist master
        // connection, and with it one ProxyCommand, for the whole run.
        let through = format!("-o ProxyCommand={}", shlex_quote(&bastion.proxy_command()));
        all["vars"] = json!({ "ansible_ssh_common_args": through });
    }
    serde_json::to_string_pretty(&json!({ "all": all })).map_err(|e| e.to_string())
}

/// Quotes a value as Python's `shlex.split` reads it back as one word, which is how ansible
/// splits `ansible_ssh_common_args`: inside double quotes only `\\` and `\"` are escapes.
fn shlex_quote(value: &str) -> String {
    format!("\"{}\"", value.replace('\\', "\\\\").replace('"', "\\\""))
}

/// The extra variables as YAML (flow style) with every text tagged `!unsafe`: ansible then takes
/// a value holding `{{ ... }}` as it is, instead of evaluating it, so a parameter, an output or
/// a secret cannot run code in the playbook as a template.
pub fn extra_vars(vars: &Value) -> String {
    let mut out = String::new();
    write_unsafe(vars, &mut out);
    out.push('\n');
    out
}

fn write_unsafe(value: &Value, out: &mut String) {
    match value {
        Value::String(text) => {
            out.push_str("!unsafe ");
            quote_yaml(text, out);
        }
        Value::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push_str(", ");
                }
                write_unsafe(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (index, (key, item)) in map.iter().enumerate() {
                if index > 0 {
                    out.push_str(", ");
                }
                quote_yaml(key, out);
                out.push_str(": ");
                write_unsafe(item, out);
            }
            out.push('}');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// A YAML double-quoted scalar. Only the characters YAML allows raw are written raw: a YAML
/// reader refuses a stream holding, say, DEL or a C1 control character, even inside quotes.
fn quote_yaml(text: &str, out: &mut String) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            // U+0085 (NEL), U+2028 and U+2029 are line breaks to YAML 1.1, which a reader folds
            // into a space inside quotes: they are escaped below with the rest.
            ' '..='~'
            | '\u{a0}'..='\u{2027}'
            | '\u{202a}'..='\u{d7ff}'
            | '\u{e000}'..='\u{fffd}' => out.push(c),
            c if u32::from(c) > 0xffff => out.push(c),
            // Writing to a String cannot fail.
            c => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
        }
    }
    out.push('"');
}

/// One host's counts from the PLAY RECAP.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Tasks that succeeded.
    pub ok: u64,
    /// Tasks that changed something.
    pub changed: u64,
    /// The host could not be reached.
    pub unreachable: u64,
    /// Tasks that failed.
    pub failed: u64,
}

/// The hosts of the last PLAY RECAP in the output, with their counts, in its order; empty when
/// the output has none (ansible stopped before running a play).
pub fn parse_recap(output: &str) -> Vec<(String, Counts)> {
    let Some(start) = output.rfind("PLAY RECAP") else {
        return vec![];
    };
    output[start..]
        .lines()
        .skip(1)
        .filter_map(recap_line)
        .collect()
}

/// `web1   : ok=2    changed=1    unreachable=0    failed=0    skipped=0 ...`
fn recap_line(line: &str) -> Option<(String, Counts)> {
    let (host, stats) = line.trim().split_once(" : ")?;
    let host = host.trim();
    if host.is_empty() || host.contains(char::is_whitespace) {
        return None;
    }
    let mut counts = Counts::default();
    let mut seen_ok = false;
    for pair in stats.split_whitespace() {
        let (key, value) = pair.split_once('=')?;
        let value: u64 = value.parse().ok()?;
        match key {
            "ok" => {
                counts.ok = value;
                seen_ok = true;
            }
            "changed" => counts.changed = value,
            "unreachable" => counts.unreachable = value,
            "failed" => counts.failed = value,
            _ => {}
        }
    }
    seen_ok.then(|| (host.to_owned(), counts))
}

/// The step's outputs from the recap: the totals over every host (`ok`, `changed`, `failed`,
/// `unreachable`), and each host's own counts under `<name>_ok`, `<name>_changed`,
/// `<name>_failed` and `<name>_unreachable`, `<name>` being its inventory name.
pub fn outputs(recap: &[(String, Counts)]) -> BTreeMap<String, String> {
    let fields = |counts: &Counts| {
        [
            ("ok", counts.ok),
            ("changed", counts.changed),
            ("failed", counts.failed),
            ("unreachable", counts.unreachable),
        ]
    };
    let mut totals = Counts::default();
    let mut outputs = BTreeMap::new();
    for (host, counts) in recap {
        totals.ok += counts.ok;
        totals.changed += counts.changed;
        totals.failed += counts.failed;
        totals.unreachable += counts.unreachable;
        // Names from our inventory are already keys; sanitised again for any other a playbook
        // could add (`add_host`).
        let name = sanitise(host);
        for (field, value) in fields(counts) {
            outputs.insert(format!("{name}_{field}"), value.to_string());
        }
    }
    for (field, value) in fields(&totals) {
        outputs.insert(field.to_owned(), value.to_string());
    }
    outputs
}

#[cfg(test)]
mod tests {
    use overture_domain::blueprint::parse;
    use overture_domain::secret::{SecretString, SecretValues, SSH_KEY_SECRET};
    use overture_domain::DeploymentState;
    use overture_events::BlueprintSnapshot;

    use std::process::Command;

    use super::*;
    use crate::kind::{conclude, prepare};
    use crate::testing::{input, requested, sandbox_result, BASTION, SSH_KEY as KEY};

    /// A recap as ansible-core 2.14 prints it (captured from a real run).
    const RECAP: &str = "\
TASK [ansible.builtin.copy] ****************************************************
changed: [127_0_0_1_42222]

PLAY RECAP *********************************************************************
127_0_0_1_1                : ok=0    changed=0    unreachable=1    failed=0    skipped=0    rescued=0    ignored=0   
127_0_0_1_42222            : ok=2    changed=1    unreachable=0    failed=0    skipped=1    rescued=0    ignored=0   

";

    fn blueprint(with: &str) -> BlueprintSnapshot {
        blueprint_behind(with, "")
    }

    /// The blueprint, with `bastion` (its `bastion:` lines, if any) before its steps.
    fn blueprint_behind(with: &str, bastion: &str) -> BlueprintSnapshot {
        let mut snapshot = parse(&format!(
            "name: x\nparams: {{ port: {{ default: '2222' }}, who: {{ default: deploy }}, bastion: {{ default: '' }} }}\nsecrets: [token]\nhosts: {{ web: ['127.0.0.1:{{{{ params.port }}}}', 'db.internal'] }}\n{bastion}steps:\n  conf: {{ run: ansible, with: {with} }}\n"
        ))
        .expect("valid")
        .snapshot;
        snapshot.files = [
            ("play/site.yml".to_owned(), "- hosts: all\n".to_owned()),
            ("play/roles/r/tasks/main.yml".to_owned(), "[]\n".to_owned()),
            ("other/x.txt".to_owned(), "no".to_owned()),
        ]
        .into();
        snapshot
    }

    fn state(blueprint: &BlueprintSnapshot) -> DeploymentState {
        requested(blueprint, &[("port", "2222"), ("who", "deploy")])
    }

    fn secrets(with_key: bool) -> SecretValues {
        let mut secrets: SecretValues = [("token".to_owned(), SecretString::from("s3cr3t"))].into();
        if with_key {
            secrets.insert(SSH_KEY_SECRET.to_owned(), SecretString::from(KEY));
        }
        secrets
    }

    fn prepared(with: &str, with_key: bool) -> Result<Prepared, String> {
        let state = state(&blueprint(with));
        let secrets = secrets(with_key);
        prepare(&input(&state, "conf", &secrets))
    }

    /// The step `conf` behind a bastion whose host renders to `bastion`.
    fn prepared_behind(bastion: &str) -> Result<Prepared, String> {
        let blueprint = blueprint_behind("{ playbook: play/site.yml, hosts: web }", BASTION);
        let state = requested(
            &blueprint,
            &[("port", "2222"), ("who", "deploy"), ("bastion", bastion)],
        );
        let secrets = secrets(true);
        prepare(&input(&state, "conf", &secrets))
    }

    fn file<'a>(prepared: &'a Prepared, path: &str) -> &'a str {
        let (_, content) = prepared
            .files
            .iter()
            .find(|(p, _)| p.as_os_str() == path)
            .unwrap_or_else(|| panic!("no {path}"));
        std::str::from_utf8(content).expect("utf-8")
    }

    #[test]
    fn the_inventory_has_one_host_per_address_in_the_group_with_the_key_and_user() {
        let prepared = prepared(
            "{ playbook: play/site.yml, hosts: web, user: '{{ params.who }}', vars: { token: '{{ secrets.token }}', n: 3 } }",
            true,
        )
        .expect("prepares");
        let inventory: Value =
            serde_json::from_str(file(&prepared, INVENTORY_FILE)).expect("JSON inventory");
        assert_eq!(
            inventory,
            json!({"all": {
                "hosts": {
                    "127_0_0_1_2222": {"ansible_host": "127.0.0.1", "ansible_port": 2222,
                        "ansible_user": "deploy", "ansible_ssh_private_key_file": "/work/ssh/id_ed25519"},
                    "db_internal": {"ansible_host": "db.internal", "ansible_port": 22,
                        "ansible_user": "deploy", "ansible_ssh_private_key_file": "/work/ssh/id_ed25519"},
                },
                "children": {"web": {"hosts": {"127_0_0_1_2222": {}, "db_internal": {}}}},
            }})
        );
        assert_eq!(
            file(&prepared, SSH_KEY_FILE),
            format!("{KEY}\n"),
            "the key, its last line ended"
        );
        assert_eq!(
            file(&prepared, EXTRA_VARS_FILE),
            "{\"n\": 3, \"token\": !unsafe \"s3cr3t\"}\n"
        );
        assert_eq!(file(&prepared, "playbook/site.yml"), "- hosts: all\n");
        assert_eq!(file(&prepared, "playbook/roles/r/tasks/main.yml"), "[]\n");
        assert!(
            !prepared
                .files
                .iter()
                .any(|(p, _)| p.starts_with("playbook/other") || p.ends_with("x.txt")),
            "only the playbook's folder"
        );
        assert!(prepared.network);
        assert_eq!(
            prepared.command,
            "exec ansible-playbook -i /work/ansible/inventory.yml -e @/work/ansible/extra-vars.yml '/work/playbook/site.yml'"
        );
        assert_eq!(
            prepared.env,
            vec![(
                "ANSIBLE_CONFIG".to_owned(),
                "/work/ansible/ansible.cfg".to_owned()
            )]
        );
        assert!(prepared.secret_env.is_empty());
        assert!(!prepared.command.contains("s3cr3t"));
        let config = file(&prepared, CONFIG_FILE);
        for line in [
            "host_key_checking = True",
            "retry_files_enabled = False",
            "UserKnownHostsFile=/work/ssh/known_hosts -o StrictHostKeyChecking=accept-new",
            "local_tmp = /work/",
            "control_path_dir = /tmp/",
            "nocolor = True",
        ] {
            assert!(config.contains(line), "ansible.cfg lacks {line}");
        }
    }

    #[test]
    fn behind_a_bastion_every_host_is_reached_through_it_with_the_key_in_a_file() {
        let behind = prepared_behind("192.0.2.1").expect("prepares");
        let inventory: Value =
            serde_json::from_str(file(&behind, INVENTORY_FILE)).expect("JSON inventory");
        assert_eq!(
            inventory["all"]["vars"],
            json!({"ansible_ssh_common_args": "-o ProxyCommand=\"'ssh' '-i' '/work/ssh/id_ed25519' '-p' '22' '-o' 'BatchMode=yes' '-o' 'StrictHostKeyChecking=accept-new' '-o' 'UserKnownHostsFile=/work/ssh/known_hosts' '-o' 'HashKnownHosts=no' '-o' 'UpdateHostKeys=no' '-o' 'IdentitiesOnly=yes' '-o' 'ConnectTimeout=10' -W '[%h]:%p' 'jumper@192.0.2.1'\""})
        );
        // The hosts themselves are as without a bastion: ssh reaches them by their own address.
        assert_eq!(
            inventory["all"]["hosts"]["db_internal"]["ansible_host"],
            "db.internal"
        );
        assert_eq!(file(&behind, SSH_KEY_FILE), format!("{KEY}\n"));
        let holding_the_key: Vec<_> = behind
            .files
            .iter()
            .filter(|(_, content)| {
                String::from_utf8_lossy(content).contains("b3BlbnNzaC1rZXktdjEAAAAA")
            })
            .map(|(path, _)| path.clone())
            .collect();
        assert_eq!(holding_the_key, vec![PathBuf::from(SSH_KEY_FILE)]);
        assert!(!behind.command.contains("PRIVATE KEY"));
        assert!(behind
            .env
            .iter()
            .all(|(_, value)| !value.contains("PRIVATE KEY")));
        assert!(behind.secret_env.is_empty());

        // Without a bastion, nothing of it.
        let direct = prepared("{ playbook: play/site.yml, hosts: web }", true).expect("prepares");
        let inventory: Value =
            serde_json::from_str(file(&direct, INVENTORY_FILE)).expect("JSON inventory");
        assert!(inventory["all"].get("vars").is_none());
    }

    #[test]
    fn the_proxy_command_is_one_word_for_ansible() {
        // ansible splits `ansible_ssh_common_args` as Python's shlex does: inside double quotes
        // only `\\` and `\"` are escapes.
        assert_eq!(shlex_quote(r#"a 'b' "c" \d"#), r#""a 'b' \"c\" \\d""#);
    }

    #[test]
    fn a_bastion_that_is_not_an_address_fails_the_step_saying_so() {
        let problem = prepared_behind("not an address").err().expect("refused");
        assert!(
            problem.starts_with(
                "the bastion's host `{{ params.bastion }}`: `not an address` is not an address"
            ),
            "{problem}"
        );
    }

    #[test]
    fn hosts_unreachable_behind_a_bastion_name_it() {
        let blueprint = blueprint_behind("{ playbook: play/site.yml, hosts: web }", BASTION);
        let state = requested(
            &blueprint,
            &[
                ("port", "2222"),
                ("who", "deploy"),
                ("bastion", "192.0.2.1"),
            ],
        );
        let secrets = secrets(true);
        let input = input(&state, "conf", &secrets);
        assert_eq!(
            conclude(&input, 4, &sandbox_result(4, RECAP, &[])),
            Verdict::Failure {
                class: ErrorClass::HostUnreachable,
                headline: "could not reach 127_0_0_1_1 through the bastion 192.0.2.1 (ansible-playbook exited with code 4)".into()
            }
        );
    }

    #[test]
    fn a_host_list_gets_no_group_and_root_is_the_default_user() {
        let prepared = prepared(
            "{ playbook: play/site.yml, hosts: ['[::1]:2200', '10.0.0.5'] }",
            true,
        )
        .expect("prepares");
        let inventory: Value =
            serde_json::from_str(file(&prepared, INVENTORY_FILE)).expect("JSON inventory");
        assert!(inventory["all"].get("children").is_none());
        assert_eq!(
            inventory["all"]["hosts"]["___1__2200"]["ansible_host"],
            "::1"
        );
        assert_eq!(
            inventory["all"]["hosts"]["___1__2200"]["ansible_port"],
            2200
        );
        assert_eq!(
            inventory["all"]["hosts"]["10_0_0_5"]["ansible_user"],
            "root"
        );
        assert_eq!(file(&prepared, EXTRA_VARS_FILE), "{}\n");
    }

    #[test]
    fn a_host_group_named_like_an_ansible_group_adds_no_group() {
        let hosts = [Host::parse("10.0.0.5").expect("an address")];
        for group in ["all", "ungrouped"] {
            let inventory: Value = serde_json::from_str(
                &inventory(&hosts, Some(group), "root", "/k", None).expect("made"),
            )
            .expect("JSON");
            assert!(inventory["all"].get("children").is_none(), "{group}");
            assert_eq!(inventory["all"]["hosts"]["10_0_0_5"]["ansible_port"], 22);
        }
    }

    #[test]
    fn without_a_key_or_with_bad_hosts_or_user_it_says_what_is_wrong() {
        let no_key = prepared("{ playbook: play/site.yml, hosts: web }", false)
            .err()
            .expect("refused");
        assert!(no_key.contains("no SSH key"), "{no_key}");

        let twice = prepared(
            "{ playbook: play/site.yml, hosts: ['a.b:22', 'a_b:22'] }",
            true,
        )
        .err()
        .expect("refused");
        assert!(twice.contains("`a.b:22` and `a_b:22`"), "{twice}");

        let user = prepared(
            "{ playbook: play/site.yml, hosts: web, user: '{{ params.port }} x' }",
            true,
        )
        .err()
        .expect("refused");
        assert!(user.contains("not a user name"), "{user}");

        for address in [
            "", "a b", "h:0", "h:99999", "h:x", "[::1", "[::1]x", "{{ 7 }}", "-oProxy",
        ] {
            assert!(Host::parse(address).is_err(), "{address:?} accepted");
        }
        assert_eq!(
            Host::parse("fe80::1").map(|h| (h.host, h.port)),
            Ok(("fe80::1".into(), 22))
        );
    }

    #[test]
    fn extra_vars_are_unsafe_yaml_that_keeps_every_character() {
        let vars = json!({"a": "{{ 7 * 6 }}", "b": [1, true, null, "x\"y\\z\n\u{7f}é😀\u{85}\u{2028}"], "c": {"d": 1.5}});
        assert_eq!(
            extra_vars(&vars),
            "{\"a\": !unsafe \"{{ 7 * 6 }}\", \"b\": [1, true, null, !unsafe \"x\\\"y\\\\z\\n\\u007fé😀\\u0085\\u2028\"], \"c\": {\"d\": 1.5}}\n"
        );
    }

    #[test]
    fn ansible_reads_every_extra_var_back_exactly_and_evaluates_none() {
        const VALUES: &[&str] = &[
            "",
            "{{ 7 * 6 }}",
            "{% if true %}x{% endif %}",
            "{# comment #}",
            "{{ lookup('pipe', 'touch pwned') }}",
            "$(touch pwned) `touch pwned`",
            "it's \"quoted\"",
            "a\\b\\\\c\\",
            "line1\nline2\r\n",
            "\ttab  spaced  ",
            "[1, 2]",
            "{\"a\": 1}",
            "True",
            "42",
            "null",
            "~",
            "- item",
            "key: value",
            "&anchor *alias !tag",
            "ünï©ødé 😀 \u{1} \u{7f} \u{85} \u{a0} \u{2028} \u{2029} \u{feff}",
        ];
        let dir = std::env::temp_dir().join(format!("overture-ansible-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let vars: serde_json::Map<String, Value> = VALUES
            .iter()
            .enumerate()
            .map(|(i, value)| (format!("v{i}"), json!(value)))
            .collect();
        std::fs::write(dir.join("vars.yml"), extra_vars(&Value::Object(vars))).expect("vars");
        let tasks: String = (0..VALUES.len())
            .map(|i| {
                format!(
                    "    - ansible.builtin.copy: {{ content: \"{{{{ v{i} }}}}\", dest: \"{{{{ playbook_dir }}}}/o{i}\" }}\n"
                )
            })
            .collect();
        std::fs::write(
            dir.join("play.yml"),
            format!(
                "- hosts: localhost\n  connection: local\n  gather_facts: false\n  tasks:\n{tasks}"
            ),
        )
        .expect("playbook");
        let ran = Command::new("ansible-playbook")
            .args(["-i", "localhost,", "-e", "@vars.yml", "play.yml"])
            .current_dir(&dir)
            .env("ANSIBLE_NOCOLOR", "1")
            .env("ANSIBLE_LOCAL_TEMP", dir.join("tmp"))
            .env("ANSIBLE_REMOTE_TEMP", dir.join("tmp"))
            .output()
            .expect("run ansible-playbook");
        let written: Vec<Vec<u8>> = (0..VALUES.len())
            .map(|i| std::fs::read(dir.join(format!("o{i}"))).unwrap_or_default())
            .collect();
        let pwned = dir.join("pwned").exists();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(
            ran.status.success(),
            "{}{}",
            String::from_utf8_lossy(&ran.stdout),
            String::from_utf8_lossy(&ran.stderr)
        );
        assert!(!pwned, "a value ran");
        for (value, written) in VALUES.iter().zip(&written) {
            assert_eq!(String::from_utf8_lossy(written), *value);
        }
    }

    #[test]
    fn the_recap_gives_each_host_and_the_totals() {
        let recap = parse_recap(RECAP);
        assert_eq!(
            recap,
            vec![
                (
                    "127_0_0_1_1".to_owned(),
                    Counts {
                        unreachable: 1,
                        ..Counts::default()
                    }
                ),
                (
                    "127_0_0_1_42222".to_owned(),
                    Counts {
                        ok: 2,
                        changed: 1,
                        ..Counts::default()
                    }
                ),
            ]
        );
        let outputs = outputs(&recap);
        let expected: BTreeMap<String, String> = [
            ("ok", "2"),
            ("changed", "1"),
            ("failed", "0"),
            ("unreachable", "1"),
            ("127_0_0_1_1_ok", "0"),
            ("127_0_0_1_1_changed", "0"),
            ("127_0_0_1_1_failed", "0"),
            ("127_0_0_1_1_unreachable", "1"),
            ("127_0_0_1_42222_ok", "2"),
            ("127_0_0_1_42222_changed", "1"),
            ("127_0_0_1_42222_failed", "0"),
            ("127_0_0_1_42222_unreachable", "0"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        assert_eq!(outputs, expected);
        assert!(outputs.keys().all(|k| k
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')));
        assert_eq!(
            parse_recap("ERROR! the playbook: x.yml could not be found\n"),
            vec![]
        );
        // Only the last recap counts, and lines around it that are not host lines are skipped.
        let twice = format!("PLAY RECAP ***\nold : ok=9 changed=9\n{RECAP}[WARNING]: x : y=z\n");
        assert_eq!(parse_recap(&twice).len(), 2);
    }

    #[test]
    fn exit_codes_become_verdicts() {
        let state = state(&blueprint("{ playbook: play/site.yml, hosts: web }"));
        let secrets = secrets(true);
        let input = input(&state, "conf", &secrets);
        let verdict =
            |output: &str, code| conclude(&input, code, &sandbox_result(code, output, &[]));

        let Verdict::Success(outputs) = verdict(RECAP, 0) else {
            panic!("exit 0 succeeds")
        };
        assert_eq!(outputs["127_0_0_1_42222_changed"], "1");

        assert_eq!(
            verdict(RECAP, 4),
            Verdict::Failure {
                class: ErrorClass::HostUnreachable,
                headline: "could not reach 127_0_0_1_1 (ansible-playbook exited with code 4)"
                    .into()
            }
        );
        let Verdict::Failure { class, headline } =
            verdict("ERROR! Syntax Error while loading YAML.\n", 4)
        else {
            panic!("fails")
        };
        assert_eq!(
            class,
            ErrorClass::StepFailed,
            "a playbook that does not parse is not retried"
        );
        assert!(
            headline.contains("could not load the playbook"),
            "{headline}"
        );

        let failed = RECAP.replace("failed=0    skipped=1", "failed=1    skipped=1");
        assert_eq!(
            verdict(&failed.replace("unreachable=1", "unreachable=0"), 2),
            Verdict::failed(
                "the playbook failed on 127_0_0_1_42222 (ansible-playbook exited with code 2)"
            )
        );
        assert_eq!(
            verdict("", 250),
            Verdict::failed("ansible-playbook exited with code 250")
        );
    }
}
