//! What every step kind shares: the attempt it is given ([`StepInput`]), the sandbox command it
//! prepares ([`Prepared`]), the verdict it reaches on the command's exit ([`Verdict`]), and
//! reference resolution.
//!
//! A kind is two pure functions: `prepare(&StepInput) -> Result<Prepared, String>` and
//! `conclude(&StepInput, exit code, &SandboxResult) -> Verdict`. The runner does the rest: the
//! sandbox, the per-attempt log, masking, timeouts, abandonment and recording.

use std::collections::BTreeMap;
use std::path::PathBuf;

use overture_domain::blueprint::used_outputs;
use overture_domain::kind::{uses_bastion, Hosts, Kind, Problems, StepKind};
use overture_domain::secret::{
    secret_within, Masker, SecretString, SecretValues, SSH_KEY_SECRET, TOKEN_SECRET,
};
use overture_domain::services::{field_value, ServiceValue};
use overture_domain::template::{Reference, ServiceField, Template};
use overture_domain::DeploymentState;
use overture_events::{DeploymentId, ErrorClass, StepSpec};
use secrecy::ExposeSecret;
use serde_json::Value;

use crate::limits::CappedLog;
use crate::logs::{LogName, MaskingWriter};
use crate::{SandboxJob, OUTPUT_LIMIT};

/// One attempt of one step, with everything a kind may read to prepare it.
pub struct StepInput<'a> {
    /// The deployment as the log has it.
    pub state: &'a DeploymentState,
    /// The step.
    pub spec: &'a StepSpec,
    /// The deployment's opened secrets (the SSH key among them, if it has one).
    pub secrets: &'a SecretValues,
    /// The deployment.
    pub deployment: DeploymentId,
    /// The 1-based attempt.
    pub attempt: u32,
    /// What the step's earlier attempts kept between sandboxes (a Terraform state), if any.
    pub kept: Option<Vec<u8>>,
    /// The files the step takes from the blueprint's folder, by path relative to it, fetched
    /// and checked ([`crate::files::step_files`]).
    pub files: &'a BTreeMap<String, String>,
}

impl StepInput<'_> {
    /// The step's kind with its settings, read from its recorded `with` by the kind's own
    /// reader in `overture_domain::kind` (the one validation used), against the blueprint's
    /// host groups. Its problems (which validation refused before the deployment was
    /// recorded) are one message: `with.FIELD: PROBLEM; ...`.
    pub fn kind(&self) -> Result<StepKind, String> {
        let Some(kind) = Kind::of(self.spec) else {
            return Err(format!(
                "this engine cannot run steps of kind `{}`",
                self.spec.kind
            ));
        };
        let no_groups = BTreeMap::new();
        let groups = self
            .state
            .blueprint
            .as_ref()
            .map_or(&no_groups, |blueprint| &blueprint.hosts);
        kind.read(&self.spec.with, groups)
            .map_err(settings_problems)
    }

    /// Those of the step's [`files`](Self::files) under `dir` (relative to the blueprint's
    /// folder), with paths relative to `dir`.
    pub fn files_under(&self, dir: &str) -> Vec<(String, &str)> {
        self.files
            .iter()
            .filter_map(|(path, text)| {
                let relative = if dir.is_empty() {
                    Some(path.as_str())
                } else {
                    path.strip_prefix(dir)
                        .and_then(|rest| rest.strip_prefix('/'))
                };
                relative.map(|relative| (relative.to_owned(), text.as_str()))
            })
            .collect()
    }

    /// What a reference stands for: a plain value or a secret.
    pub fn lookup(&self, reference: &Reference) -> Result<Resolved<'_>, String> {
        match reference {
            Reference::Param(param) => self
                .state
                .params
                .get(param)
                .map(|value| Resolved::Plain(value.as_str().into()))
                .ok_or_else(|| format!("parameter `{param}` has no value")),
            Reference::Output { step, key } => self
                .state
                .steps
                .get(step)
                .and_then(|s| s.outputs.get(key))
                .map(|value| Resolved::Plain(value.as_str().into()))
                .ok_or_else(|| format!("`{reference}`: step `{step}` produced no output `{key}`")),
            Reference::Service { service, field } => self
                .service_value(service, *field)
                .map(|value| Resolved::Plain(value.into_text().into())),
            Reference::Secret(secret) => self
                .secrets
                .get(secret)
                .map(Resolved::Secret)
                .ok_or_else(|| format!("secret `{secret}` was not given")),
        }
    }

    /// The text with every reference replaced by its value, secrets included: only for what the
    /// step alone sees (its files and environment), never for anything recorded.
    pub fn render(&self, text: &str) -> Result<String, String> {
        self.render_template(&Template::parse(text).map_err(|e| e.to_string())?)
    }

    /// [`render`](Self::render), of a template already parsed.
    fn render_template(&self, template: &Template) -> Result<String, String> {
        template.render(|reference| {
            self.lookup(reference).map(|resolved| match resolved {
                Resolved::Plain(value) => value.into_owned(),
                Resolved::Secret(value) => value.expose_secret().to_owned(),
            })
        })
    }

    /// What a reference to a service stands for, from the members recorded for this step.
    pub fn service_value(
        &self,
        service: &str,
        field: ServiceField,
    ) -> Result<ServiceValue, String> {
        let members = self
            .state
            .steps
            .get(&self.spec.name)
            .and_then(|step| step.services.get(service))
            .ok_or_else(|| {
                format!(
                    "service `{service}` was not resolved for step `{}`; the step must require or watch it",
                    self.spec.name
                )
            })?;
        field_value(service, members, field)
    }

    /// [`render`](Self::render) on every text inside a JSON value. A text that is just a
    /// reference to a service's members becomes the list of them.
    pub fn render_value(&self, value: &Value) -> Result<Value, String> {
        Ok(match value {
            Value::String(text) => {
                let template = Template::parse(text).map_err(|e| e.to_string())?;
                match template.sole_reference() {
                    Some(Reference::Service { service, field }) => {
                        match self.service_value(service, *field)? {
                            ServiceValue::List(members) => {
                                Value::Array(members.into_iter().map(Value::String).collect())
                            }
                            ServiceValue::Text(text) => Value::String(text),
                        }
                    }
                    _ => Value::String(self.render_template(&template)?),
                }
            }
            Value::Array(items) => Value::Array(
                items
                    .iter()
                    .map(|item| self.render_value(item))
                    .collect::<Result<_, _>>()?,
            ),
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(key, item)| Ok((key.clone(), self.render_value(item)?)))
                    .collect::<Result<_, String>>()?,
            ),
            other => other.clone(),
        })
    }

    /// The servers of the step's `hosts` setting, whatever its kind, rendered and read.
    pub fn ssh_addresses(&self) -> Result<Vec<SshAddress>, String> {
        let kind = self.kind()?;
        self.render_hosts(kind.hosts().ok_or("the step has no `with.hosts`")?)
    }

    /// The servers of a `hosts` setting, rendered and read.
    pub fn render_hosts(&self, hosts: &Hosts) -> Result<Vec<SshAddress>, String> {
        let rendered = hosts
            .addresses
            .iter()
            .map(|address| self.render(address))
            .collect::<Result<Vec<_>, _>>()?;
        rendered
            .iter()
            .map(|address| SshAddress::parse(address))
            .collect()
    }

    /// The deployment's SSH private key, if it has one.
    pub fn ssh_key(&self) -> Option<&SecretString> {
        self.secrets.get(SSH_KEY_SECRET)
    }

    /// The deployment's SSH private key as a file of [`Prepared::files`], at [`SSH_KEY_FILE`];
    /// an error when the deployment has none.
    pub fn ssh_key_file(&self) -> Result<(PathBuf, Vec<u8>), String> {
        let key = self.ssh_key().ok_or(
            "the deployment has no SSH key to log in with (its sealed secrets hold none); deploy the blueprint again to give it one",
        )?;
        let mut key = key.expose_secret().as_bytes().to_vec();
        // OpenSSH refuses a key file whose last line does not end.
        if !key.ends_with(b"\n") {
            key.push(b'\n');
        }
        Ok((PathBuf::from(SSH_KEY_FILE), key))
    }

    /// The bastion the step goes through: `None` when the blueprint names none or the step
    /// does not go through it ([`uses_bastion`]); an error when its host does not render to an
    /// address.
    pub fn bastion(&self) -> Result<Option<Jump>, String> {
        let Some(bastion) = self
            .state
            .blueprint
            .as_ref()
            .and_then(|b| b.bastion.as_ref())
        else {
            return Ok(None);
        };
        if !uses_bastion(self.spec) {
            return Ok(None);
        }
        let problem = |problem: String| format!("the bastion's host `{}`: {problem}", bastion.host);
        let address =
            SshAddress::parse(&self.render(&bastion.host).map_err(problem)?).map_err(problem)?;
        check_user(&bastion.user).map_err(|problem| format!("the bastion's user: {problem}"))?;
        Ok(Some(Jump {
            address,
            user: bastion.user.clone(),
        }))
    }
}

/// The problems a kind's reader found in a step's recorded settings, as one message:
/// `with.FIELD: PROBLEM; ...`.
pub fn settings_problems(problems: Problems) -> String {
    problems
        .into_iter()
        .map(|(field, problem)| format!("with{field}: {problem}"))
        .collect::<Vec<_>>()
        .join("; ")
}

/// The port SSH listens on unless an address says.
pub const SSH_PORT: u16 = 22;

/// One server of a step's `hosts`, as `ssh` reaches it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SshAddress {
    /// The address as the step gave it, rendered.
    pub address: String,
    /// The host name or IP address to connect to.
    pub host: String,
    /// The port to connect to.
    pub port: u16,
}

impl SshAddress {
    /// Reads `host`, `host:port`, `[ipv6]` or `[ipv6]:port` (see [`host_and_port`]).
    pub fn parse(address: &str) -> Result<Self, String> {
        let (host, port) = host_and_port(address, SSH_PORT).ok_or_else(|| {
            // The address is rendered from outputs and parameters: quoted escaped, so that the
            // message stays one line that moves no terminal's cursor.
            format!(
                "`{}` is not an address; write host or host:port, like 10.0.0.5:22 or [::1]:2222",
                overture_domain::text::escaped(address)
            )
        })?;
        Ok(SshAddress {
            address: address.to_owned(),
            host: host.to_owned(),
            port,
        })
    }
}

/// The host and the port of `host`, `host:port`, `[ipv6]` or `[ipv6]:port`, the port being
/// `default_port` when the address names none. A host is a name or an IP address and never
/// starts with `-`, since tools take it as an argument (`ssh -oProxyCommand=...`) or a path
/// segment (`/dev/tcp/HOST/PORT`).
pub fn host_and_port(address: &str, default_port: u16) -> Option<(&str, u16)> {
    let (host, port) = if let Some(rest) = address.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        let port = match after {
            "" => None,
            _ => Some(after.strip_prefix(':')?),
        };
        (host, port)
    } else {
        match address.split_once(':') {
            Some((host, port)) if !port.contains(':') => (host, Some(port)),
            // Bare IPv6, without a port.
            Some(_) | None => (address, None),
        }
    };
    let name_like = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_');
    let ipv6_like = |c: char| c.is_ascii_hexdigit() || matches!(c, ':' | '.' | '%');
    let host_ok = !host.is_empty()
        && !host.starts_with('-')
        && (host.chars().all(name_like) || (host.contains(':') && host.chars().all(ipv6_like)));
    if !host_ok {
        return None;
    }
    let port = match port {
        None => default_port,
        Some(port) => port.parse::<u16>().ok().filter(|port| *port != 0)?,
    };
    Some((host, port))
}

/// Where a step that logs in over SSH finds the deployment's private key, under `/work`.
pub const SSH_KEY_FILE: &str = "ssh/id_ed25519";

/// The bastion a step reaches its servers through, as [`StepInput::bastion`] found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Jump {
    /// The bastion's address, rendered and read.
    pub address: SshAddress,
    /// The user the engine logs in as on the bastion.
    pub user: String,
}

/// The ssh client options for the bastion, after `-i` and `-p`, the same for every kind:
/// - only the deployment's pinned host keys count ([`crate::host_keys::SSH_OPTIONS`]): a
///   bastion whose key is pinned must offer it; one not pinned yet is learned on first contact;
/// - `BatchMode`: never a prompt, which would hold the step until its timeout;
/// - `IdentitiesOnly`: only the deployment's key is offered, so a bastion that counts failed
///   attempts never sees another;
/// - `ConnectTimeout`: a bastion whose security group drops packets fails a try in seconds,
///   not minutes.
///
/// The log level stays ssh's default, INFO: it is the level at which ssh says why the bastion
/// could not open a connection onwards (`channel 0: open failed: connect failed: ...`), which
/// is the one line that explains a failure behind the bastion, and the level of ssh's refusal
/// of a changed host key. The price is one "Permanently added ... to the list of known hosts"
/// line for a host learned on first contact.
const JUMP_OPTIONS: [&str; 7] = [
    "BatchMode=yes",
    crate::host_keys::SSH_OPTIONS[0],
    crate::host_keys::SSH_OPTIONS[1],
    crate::host_keys::SSH_OPTIONS[2],
    crate::host_keys::SSH_OPTIONS[3],
    "IdentitiesOnly=yes",
    "ConnectTimeout=10",
];

impl Jump {
    /// `ssh` logging in to the bastion with the deployment's key at [`SSH_KEY_FILE`], as a
    /// command line for `/bin/sh`. `args` is shell text put as it is before the destination:
    /// the caller quotes its literals with [`shell_quote`].
    pub fn ssh_command(&self, args: &str) -> String {
        let words: Vec<String> = self.words().iter().map(|word| shell_quote(word)).collect();
        format!(
            "{} {args} {}",
            words.join(" "),
            shell_quote(&self.destination())
        )
    }

    /// The `ProxyCommand` through which ssh reaches any host behind the bastion: the bastion
    /// joins ssh's connection to the host's port (`-W`), so the host sees the bastion connect.
    pub fn proxy_command(&self) -> String {
        // ssh expands `%` tokens in a ProxyCommand before the shell reads it: each `%` of ours
        // (an IPv6 zone in the bastion's address) is doubled, so only `%h` and `%p` are tokens.
        // `[%h]` keeps an IPv6 host apart from its port.
        let escape = |word: &str| shell_quote(word).replace('%', "%%");
        let words: Vec<String> = self.words().iter().map(|word| escape(word)).collect();
        format!(
            "{} -W {} {}",
            words.join(" "),
            shell_quote("[%h]:%p"),
            escape(&self.destination())
        )
    }

    /// The program and its options, unquoted.
    fn words(&self) -> Vec<String> {
        let mut words = vec![
            "ssh".to_owned(),
            "-i".to_owned(),
            format!("/work/{SSH_KEY_FILE}"),
            "-p".to_owned(),
            self.address.port.to_string(),
        ];
        for option in JUMP_OPTIONS {
            words.extend(["-o".to_owned(), option.to_owned()]);
        }
        words
    }

    /// `user@host`: ssh splits it at the last `@`, so an IPv6 host needs no brackets.
    fn destination(&self) -> String {
        format!("{}@{}", self.user, self.address.host)
    }
}

/// A user name ssh can log in as: it goes on ssh's command line and into ansible's inventory,
/// which ansible reads as templates.
pub fn check_user(user: &str) -> Result<(), String> {
    let valid = !user.is_empty()
        && !user.starts_with('-')
        && user
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'));
    if valid {
        Ok(())
    } else {
        Err(format!(
            "`{user}` is not a user name; use letters, digits, '.', '-' and '_'"
        ))
    }
}

/// A reference's value.
pub enum Resolved<'a> {
    /// A parameter, an output or a service's members.
    Plain(std::borrow::Cow<'a, str>),
    /// A secret.
    Secret(&'a SecretString),
}

/// A step attempt ready for its sandbox.
#[derive(Default)]
pub struct Prepared {
    /// Run with `/bin/sh -c` in `/work`.
    pub command: String,
    /// Plain environment variables.
    pub env: Vec<(String, String)>,
    /// Environment variables holding secrets.
    pub secret_env: Vec<(String, SecretString)>,
    /// Files placed under `/work` (mode 0600; they may hold secrets).
    pub files: Vec<(PathBuf, Vec<u8>)>,
    /// Whether the step keeps network access.
    pub network: bool,
    /// Files under `/work` to read back once the command has ended.
    pub collect: Vec<PathBuf>,
    /// Whether the command runs the engine's own program (at [`crate::ENGINE_PROGRAM`]).
    pub engine_program: bool,
}

/// What a kind makes of its command's exit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The attempt succeeded with these outputs (masked by the runner before recording).
    Success(BTreeMap<String, String>),
    /// The attempt failed: its class and a headline (the runner adds the last lines of output).
    Failure {
        /// How the retry policy sees it.
        class: ErrorClass,
        /// What went wrong, for the user.
        headline: String,
    },
}

impl Verdict {
    /// A failure of class `step-failed`.
    pub fn failed(headline: impl Into<String>) -> Self {
        Verdict::Failure {
            class: ErrorClass::StepFailed,
            headline: headline.into(),
        }
    }
}

/// The sandbox job of a prepared run of a step: what the kind prepared, the variables naming
/// the run, the step's timeout, and the output copied masked to `log`.
pub fn sandbox_job(
    id: String,
    prepared: Prepared,
    input: &StepInput,
    run: LogName,
    log: Box<dyn std::io::Write + Send + Sync>,
    masker: &Masker,
) -> SandboxJob {
    let mut env = prepared.env;
    env.extend([
        (
            "OVERTURE_DEPLOYMENT".to_owned(),
            input.deployment.to_string(),
        ),
        ("OVERTURE_STEP".to_owned(), input.spec.name.clone()),
    ]);
    let limits = input.spec.limits.unwrap_or_default();
    if let LogName::Attempt(attempt) = run {
        env.push(("OVERTURE_ATTEMPT".to_owned(), attempt.to_string()));
    }
    SandboxJob {
        id,
        command: prepared.command,
        env,
        secret_env: prepared.secret_env,
        files: prepared.files,
        collect: prepared.collect,
        network: prepared.network,
        engine_program: prepared.engine_program,
        timeout: std::time::Duration::from_millis(input.spec.timeout_ms),
        output_limit: OUTPUT_LIMIT,
        // Masked first, so the cut can never fall inside a secret and let a piece of it through.
        log: Some(Box::new(MaskingWriter::new(
            CappedLog::new(log, limits.log_bytes),
            masker.clone(),
        ))),
        masked: input.secrets.values().cloned().collect(),
        limits,
        network_policy: None,
    }
}

/// The outputs as they may be recorded (masked), or why they may not be.
///
/// An output that holds a secret's value is masked where it is shown and stored; but when a
/// template of the blueprint uses it, masking would hand that step `***` in place of the value,
/// so it is refused instead and the attempt fails. An output's name is recorded as it is, so it
/// may never hold a secret. The message names the output and the secret, never the value.
pub fn recordable(
    outputs: BTreeMap<String, String>,
    input: &StepInput,
    masker: &Masker,
) -> Result<BTreeMap<String, String>, String> {
    let used = input
        .state
        .blueprint
        .as_ref()
        .map(|blueprint| used_outputs(blueprint, &input.spec.name))
        .unwrap_or_default();
    for (key, value) in &outputs {
        let found = match secret_within(input.secrets, key) {
            Some(secret) => Some((format!("the name of output `{}`", masker.mask(key)), secret)),
            None if used.contains(key) => secret_within(input.secrets, value)
                .map(|secret| (format!("output `{key}`, which another step uses,"), secret)),
            None => None,
        };
        let Some((output, secret)) = found else {
            continue;
        };
        let (what, instead) = match secret {
            SSH_KEY_SECRET => (
                "the deployment's SSH private key".to_owned(),
                "outputs are recorded, so they must not hold it".to_owned(),
            ),
            TOKEN_SECRET => (
                "the user's cloud token".to_owned(),
                "outputs are recorded, so they must not hold it".to_owned(),
            ),
            user => (
                format!("the value of secret `{user}`"),
                format!("pass the secret to the next step with {{{{ secrets.{user} }}}} instead"),
            ),
        };
        return Err(format!("{output} contains {what}; {instead}"));
    }
    Ok(outputs
        .into_iter()
        .map(|(key, value)| (key, masker.mask(&value)))
        .collect())
}

/// A collected file's content, if the step left it.
pub fn collected<'a>(collected: &'a [(PathBuf, Vec<u8>)], path: &str) -> Option<&'a [u8]> {
    collected
        .iter()
        .find(|(p, _)| p.as_os_str() == path)
        .map(|(_, content)| content.as_slice())
}

/// Quotes a value for `/bin/sh`, so it is one word whatever it holds.
pub fn shell_quote(value: &str) -> String {
    format!("'{}'", value.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use overture_domain::blueprint::parse;

    use super::*;
    use crate::testing::{input, key_secrets, requested, BASTION};

    /// A blueprint behind a bastion (unless `bastion` is false) with a step of every sort.
    fn blueprint(bastion: bool) -> overture_events::BlueprintSnapshot {
        let text = format!(
            "name: x\nparams: {{ bastion: {{}} }}\n{}steps:\n  conf: {{ run: ansible, with: {{ playbook: p.yml, hosts: ['10.0.0.5'] }} }}\n  wait: {{ run: wait-ssh, with: {{ hosts: ['10.0.0.5'] }} }}\n  inside: {{ run: http, with: {{ url: 'http://10.0.0.5/', via: bastion }} }}\n  outside: {{ run: http, with: {{ url: 'https://api.example.com/' }} }}\n  build: {{ run: script, with: {{ command: 'true' }} }}\n",
            if bastion { BASTION } else { "" }
        );
        parse(&text).expect("valid").snapshot
    }

    fn bastion_of(step: &str, bastion: Option<&str>) -> Result<Option<Jump>, String> {
        let state = requested(
            &blueprint(bastion.is_some()),
            &[("bastion", bastion.unwrap_or("unused"))],
        );
        let secrets = key_secrets();
        input(&state, step, &secrets).bastion()
    }

    #[test]
    fn the_steps_that_log_in_or_say_so_go_through_the_bastion() {
        let jump = Jump {
            address: SshAddress::parse("192.0.2.1:2222").expect("an address"),
            user: "jumper".into(),
        };
        for step in ["conf", "wait", "inside"] {
            assert_eq!(
                bastion_of(step, Some("192.0.2.1:2222")),
                Ok(Some(jump.clone())),
                "{step}"
            );
            assert_eq!(bastion_of(step, None), Ok(None), "{step} without a bastion");
        }
        for step in ["outside", "build"] {
            assert_eq!(bastion_of(step, Some("192.0.2.1:2222")), Ok(None), "{step}");
        }
    }

    #[test]
    fn a_bastion_host_that_is_not_an_address_says_so() {
        for bad in ["", "bastion one", "-oProxyCommand=x", "10.0.0.1:ssh"] {
            let problem = bastion_of("wait", Some(bad)).expect_err(bad);
            assert!(
                problem.starts_with("the bastion's host `{{ params.bastion }}`: ")
                    && problem.contains("is not an address"),
                "{bad:?}: {problem}"
            );
        }
        // A step that does not go through it is not held up by it.
        assert_eq!(bastion_of("build", Some("bastion one")), Ok(None));
    }

    #[test]
    fn the_jump_is_one_ssh_command_naming_the_key_file() {
        let jump = Jump {
            address: SshAddress::parse("192.0.2.1:2222").expect("an address"),
            user: "jumper".into(),
        };
        const OPTIONS: &str = "'ssh' '-i' '/work/ssh/id_ed25519' '-p' '2222' '-o' 'BatchMode=yes' '-o' 'StrictHostKeyChecking=accept-new' '-o' 'UserKnownHostsFile=/work/ssh/known_hosts' '-o' 'HashKnownHosts=no' '-o' 'UpdateHostKeys=no' '-o' 'IdentitiesOnly=yes' '-o' 'ConnectTimeout=10'";
        assert_eq!(
            jump.proxy_command(),
            format!("{OPTIONS} -W '[%h]:%p' 'jumper@192.0.2.1'")
        );
        assert_eq!(
            jump.ssh_command("-N"),
            format!("{OPTIONS} -N 'jumper@192.0.2.1'")
        );
        // ssh would take the `%2` of an IPv6 zone for a token of its own.
        let zoned = Jump {
            address: SshAddress::parse("fe80::1%2").expect("an address"),
            user: "root".into(),
        };
        assert!(zoned
            .proxy_command()
            .ends_with("-W '[%h]:%p' 'root@fe80::1%%2'"));
        assert!(zoned.ssh_command("-N").ends_with("-N 'root@fe80::1%2'"));
    }

    #[test]
    fn the_key_file_ends_its_last_line() {
        let state = requested(&blueprint(false), &[("bastion", "unused")]);
        let secrets = key_secrets();
        let (path, key) = input(&state, "conf", &secrets)
            .ssh_key_file()
            .expect("a key");
        assert_eq!(path, PathBuf::from(SSH_KEY_FILE));
        assert_eq!(key, format!("{}\n", crate::testing::SSH_KEY).into_bytes());
        let none = SecretValues::new();
        let problem = input(&state, "conf", &none)
            .ssh_key_file()
            .expect_err("no key");
        assert!(problem.contains("no SSH key"), "{problem}");
    }

    #[test]
    fn an_output_holding_a_secret_is_refused_if_a_step_uses_it_and_masked_if_none_does() {
        let blueprint = parse(
            "name: x\nsecrets: [api_key]\nsteps:\n  a: { run: script, with: { command: 'true' } }\n  b: { run: script, needs: [a], with: { command: 'echo {{ steps.a.outputs.used }}' } }\n",
        )
        .expect("valid")
        .snapshot;
        let state = requested(&blueprint, &[]);
        let mut secrets = key_secrets();
        secrets.insert("api_key".into(), SecretString::from("k-123"));
        let masker = Masker::new(secrets.values());
        let input = input(&state, "a", &secrets);
        let outputs = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };

        assert_eq!(
            recordable(outputs(&[("used", "k-123-suffix")]), &input, &masker),
            Err("output `used`, which another step uses, contains the value of secret `api_key`; pass the secret to the next step with {{ secrets.api_key }} instead".into())
        );
        let key_line = crate::testing::SSH_KEY.lines().nth(1).expect("a key line");
        let refused = recordable(outputs(&[("used", key_line)]), &input, &masker)
            .expect_err("the key is refused");
        assert!(
            refused.contains("the deployment's SSH private key") && !refused.contains(key_line),
            "{refused}"
        );
        assert_eq!(
            recordable(
                outputs(&[("shown", "k-123-suffix"), ("used", "plain")]),
                &input,
                &masker
            ),
            Ok(outputs(&[("shown", "***-suffix"), ("used", "plain")])),
            "an output no step uses is only shown, masked"
        );
        let secrets: SecretValues = [("api_key".into(), SecretString::from("token"))].into();
        let input = crate::testing::input(&state, "a", &secrets);
        assert_eq!(
            recordable(outputs(&[("a_token", "x")]), &input, &Masker::new(secrets.values())),
            Err("the name of output `a_***` contains the value of secret `api_key`; pass the secret to the next step with {{ secrets.api_key }} instead".into()),
            "a name is recorded as it is, so it may never hold a secret"
        );
    }

    #[test]
    fn a_job_carries_its_step_s_limits_and_its_log_is_masked_then_capped() {
        let blueprint = parse(
            "name: x\nsecrets: [api_key]\nsteps:\n  a: { run: script, limits: { log: 4KiB, cpu: 0.5 }, with: { command: 'true' } }\n",
        )
        .expect("valid")
        .snapshot;
        let state = requested(&blueprint, &[]);
        let mut secrets = key_secrets();
        secrets.insert("api_key".into(), SecretString::from("k-123"));
        let masker = Masker::new(secrets.values());
        let input = input(&state, "a", &secrets);
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        struct Shared(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
        impl std::io::Write for Shared {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.0.lock().expect("log").extend_from_slice(bytes);
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let job = sandbox_job(
            "id".into(),
            Prepared::default(),
            &input,
            LogName::Attempt(1),
            Box::new(Shared(log.clone())),
            &masker,
        );
        assert_eq!(job.limits.cpu_millis, 500);
        assert_eq!(job.limits.log_bytes, 4096);
        let mut writer = job.log.expect("a log");
        for _ in 0..1000 {
            writer.write_all(b"using k-123 now\n").expect("written");
        }
        writer.flush().expect("flushed");
        drop(writer);
        let log = String::from_utf8(log.lock().expect("log").clone()).expect("utf-8");
        assert!(!log.contains("k-123"), "masked before it is cut");
        assert!(log.starts_with("using *** now\n"), "{log}");
        assert!(log.ends_with("using *** now\n"), "{log}");
        assert!(log.contains(" bytes cut …\n"), "{log}");
        assert!(log.len() < 4096 + 100, "{}", log.len());
    }

    #[test]
    fn addresses_name_a_host_and_a_port() {
        let parsed = |address: &str| SshAddress::parse(address).map(|t| (t.host, t.port));
        assert_eq!(parsed("10.0.0.5"), Ok(("10.0.0.5".into(), 22)));
        assert_eq!(parsed("127.0.0.1:2222"), Ok(("127.0.0.1".into(), 2222)));
        assert_eq!(
            parsed("web-1.example.com:22"),
            Ok(("web-1.example.com".into(), 22))
        );
        assert_eq!(parsed("[::1]:2222"), Ok(("::1".into(), 2222)));
        assert_eq!(parsed("fd00::5"), Ok(("fd00::5".into(), 22)));
        for bad in [
            "",
            "host:0",
            "host:ssh",
            "host:70000",
            "[::1",
            "a/b:22",
            "a b",
            "$(x):22",
        ] {
            assert!(SshAddress::parse(bad).is_err(), "{bad}");
        }
    }
}
