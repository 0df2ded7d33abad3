//! What every step kind shares: the attempt it is given ([`StepInput`]), the sandbox command it
//! prepares ([`Prepared`]), the verdict it reaches on the command's exit ([`Verdict`]), and
//! reference resolution.
//!
//! A kind is two pure functions: `prepare(&StepInput) -> Result<Prepared, String>` and
//! `conclude(&StepInput, exit code, &SandboxResult) -> Verdict`. The runner does the rest: the
//! sandbox, the per-attempt log, masking, timeouts, abandonment and recording.

use std::collections::BTreeMap;
use std::path::PathBuf;

use overture_domain::secret::{Masker, SecretString, SecretValues, SSH_KEY_SECRET};
use overture_domain::template::{Reference, Template};
use overture_domain::DeploymentState;
use overture_events::{DeploymentId, ErrorClass, StepSpec};
use secrecy::ExposeSecret;
use serde_json::Value;

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
}

impl StepInput<'_> {
    /// A `with` setting.
    pub fn setting(&self, key: &str) -> Option<&Value> {
        self.spec.with.get(key)
    }

    /// A `with` setting that is text.
    pub fn text_setting(&self, key: &str) -> Option<&str> {
        self.setting(key).and_then(Value::as_str)
    }

    /// The files the blueprint recorded under `dir` (relative to its folder), with paths
    /// relative to `dir`.
    pub fn files_under(&self, dir: &str) -> Vec<(String, &str)> {
        let Some(blueprint) = &self.state.blueprint else {
            return vec![];
        };
        blueprint
            .files
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
                .map(|value| Resolved::Plain(value.as_str()))
                .ok_or_else(|| format!("parameter `{param}` has no value")),
            Reference::Output { step, key } => self
                .state
                .steps
                .get(step)
                .and_then(|s| s.outputs.get(key))
                .map(|value| Resolved::Plain(value.as_str()))
                .ok_or_else(|| format!("`{reference}`: step `{step}` produced no output `{key}`")),
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
        let template = Template::parse(text).map_err(|e| e.to_string())?;
        template.render(|reference| {
            self.lookup(reference).map(|resolved| match resolved {
                Resolved::Plain(value) => value.to_owned(),
                Resolved::Secret(value) => value.expose_secret().to_owned(),
            })
        })
    }

    /// [`render`](Self::render) on every text inside a JSON value.
    pub fn render_value(&self, value: &Value) -> Result<Value, String> {
        Ok(match value {
            Value::String(text) => Value::String(self.render(text)?),
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

    /// The addresses of the step's `hosts` setting (a host group or a list), rendered.
    pub fn hosts(&self) -> Result<Vec<String>, String> {
        let value = self
            .setting("hosts")
            .ok_or("the step has no `with.hosts`")?;
        let groups = self
            .state
            .blueprint
            .as_ref()
            .map(|b| &b.hosts)
            .ok_or("the deployment has no blueprint")?;
        overture_domain::kinds::host_list(value, groups)?
            .into_iter()
            .map(|address| self.render(address))
            .collect()
    }

    /// The servers of the step's `hosts` setting, rendered and read.
    pub fn ssh_addresses(&self) -> Result<Vec<SshAddress>, String> {
        self.hosts()?
            .iter()
            .map(|address| SshAddress::parse(address))
            .collect()
    }

    /// The deployment's SSH private key, if it has one.
    pub fn ssh_key(&self) -> Option<&SecretString> {
        self.secrets.get(SSH_KEY_SECRET)
    }
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
    /// Reads `host`, `host:port`, `[ipv6]` or `[ipv6]:port`. A host is a name or an IP address
    /// and never starts with `-`, since tools take it as an argument (`ssh -oProxyCommand=...`)
    /// or a path segment (`/dev/tcp/HOST/PORT`).
    pub fn parse(address: &str) -> Result<Self, String> {
        let problem = || {
            format!(
                "`{address}` is not an address; write host or host:port, like 10.0.0.5:22 or [::1]:2222"
            )
        };
        let (host, port) = if let Some(rest) = address.strip_prefix('[') {
            let (host, after) = rest.split_once(']').ok_or_else(problem)?;
            let port = match after {
                "" => None,
                _ => Some(after.strip_prefix(':').ok_or_else(problem)?),
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
            return Err(problem());
        }
        let port = match port {
            None => SSH_PORT,
            Some(port) => port
                .parse::<u16>()
                .ok()
                .filter(|port| *port != 0)
                .ok_or_else(problem)?,
        };
        Ok(SshAddress {
            address: address.to_owned(),
            host: host.to_owned(),
            port,
        })
    }
}

/// A reference's value.
pub enum Resolved<'a> {
    /// A parameter or an output.
    Plain(&'a str),
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
        timeout: std::time::Duration::from_millis(input.spec.timeout_ms),
        output_limit: OUTPUT_LIMIT,
        log: Some(Box::new(MaskingWriter::new(log, masker.clone()))),
    }
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
    use super::*;

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
