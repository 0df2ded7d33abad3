//! The step kinds. [`Kind`] is the one place a step's `run:` is read into a kind; each kind's
//! module owns its name, the `with` settings it takes and the checks on them:
//!
//! - [`script`], [`noop`], [`terraform`], [`ansible`], [`http`], [`wait_ssh`], [`servers`].
//!
//! The runner's half of each kind (preparing the sandbox command, judging the exit) is the file
//! of the same name in `functions/runner/src/kind/`. What several kinds share (host lists, plain
//! paths, text settings) is below.

pub mod ansible;
pub mod http;
pub mod noop;
pub mod script;
pub mod servers;
pub mod terraform;
pub mod wait_ssh;

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use overture_events::StepSpec;
use serde_json::Value;

use crate::template::Template;

/// One `with` setting of a kind.
pub(crate) struct Setting {
    name: &'static str,
    required: bool,
}

pub(crate) const fn required(name: &'static str) -> Setting {
    Setting {
        name,
        required: true,
    }
}

pub(crate) const fn optional(name: &'static str) -> Setting {
    Setting {
        name,
        required: false,
    }
}

/// A step kind this engine can run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// A shell command ([`script`]).
    Script,
    /// Nothing at all ([`noop`]).
    Noop,
    /// `terraform apply` of a folder ([`terraform`]).
    Terraform,
    /// `ansible-playbook` against hosts ([`ansible`]).
    Ansible,
    /// One HTTP request ([`http`]).
    Http,
    /// A wait for hosts to answer SSH ([`wait_ssh`]).
    WaitSsh,
    /// Servers and security groups made in the tenant's cloud ([`servers`]).
    Servers,
}

impl Kind {
    /// Every kind, in the order messages list them.
    pub const ALL: [Kind; 7] = [
        Kind::Script,
        Kind::Noop,
        Kind::Terraform,
        Kind::Ansible,
        Kind::Http,
        Kind::WaitSsh,
        Kind::Servers,
    ];

    /// The kind a step's `run:` names, if this engine knows it.
    pub fn parse(name: &str) -> Option<Kind> {
        Self::ALL.into_iter().find(|kind| kind.name() == name)
    }

    /// The kind of a recorded step, if this engine knows it.
    pub fn of(step: &StepSpec) -> Option<Kind> {
        Self::parse(&step.kind)
    }

    /// The name a blueprint's `run:` gives the kind.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Script => script::NAME,
            Kind::Noop => noop::NAME,
            Kind::Terraform => terraform::NAME,
            Kind::Ansible => ansible::NAME,
            Kind::Http => http::NAME,
            Kind::WaitSsh => wait_ssh::NAME,
            Kind::Servers => servers::NAME,
        }
    }

    fn settings(self) -> &'static [Setting] {
        match self {
            Kind::Script => &script::SETTINGS,
            Kind::Noop => &noop::SETTINGS,
            Kind::Terraform => &terraform::SETTINGS,
            Kind::Ansible => &ansible::SETTINGS,
            Kind::Http => &http::SETTINGS,
            Kind::WaitSsh => &wait_ssh::SETTINGS,
            Kind::Servers => &servers::SETTINGS,
        }
    }

    /// What is wrong with one setting's value, read on its own.
    fn setting_problem(
        self,
        key: &str,
        value: &Value,
        hosts: &BTreeMap<String, Vec<String>>,
    ) -> Option<String> {
        match self {
            Kind::Script => script::setting_problem(key, value),
            Kind::Terraform => terraform::setting_problem(key, value),
            Kind::Ansible => ansible::setting_problem(key, value, hosts),
            Kind::Http => http::setting_problem(key, value),
            Kind::WaitSsh => wait_ssh::setting_problem(key, value, hosts),
            Kind::Noop | Kind::Servers => None,
        }
    }

    /// What is wrong with the settings read together, once each has been read on its own, as
    /// (field below `with`, problem).
    fn settings_problems(self, with: &BTreeMap<String, Value>) -> Vec<(String, String)> {
        match self {
            Kind::Script => script::command_problems(with),
            // Its settings refer to each other (a server to its groups, a rule to a group), so
            // they are read as a whole.
            Kind::Servers => servers::read(with).err().unwrap_or_default(),
            _ => vec![],
        }
    }

    /// Every problem with a step's `with` settings, as (field below `with`, problem).
    pub fn check_with(
        self,
        with: &BTreeMap<String, Value>,
        hosts: &BTreeMap<String, Vec<String>>,
    ) -> Vec<(String, String)> {
        let kind = self.name();
        let settings = self.settings();
        let mut problems = Vec::new();
        for setting in settings.iter().filter(|s| s.required) {
            if !with.contains_key(setting.name) {
                problems.push((
                    String::new(),
                    format!("a `{kind}` step needs `with.{}`", setting.name),
                ));
            }
        }
        for key in with.keys() {
            if !settings.iter().any(|s| s.name == key) {
                let known: Vec<&str> = settings.iter().map(|s| s.name).collect();
                let hint = if known.is_empty() {
                    "it takes none".to_owned()
                } else {
                    format!("it takes: {}", known.join(", "))
                };
                problems.push((
                    format!(".{key}"),
                    format!("unknown setting for a `{kind}` step; {hint}"),
                ));
            }
        }
        for (key, value) in with {
            if let Some(text) = self.setting_problem(key, value, hosts) {
                problems.push((format!(".{key}"), text));
            }
        }
        problems.extend(self.settings_problems(with));
        problems
    }

    /// Whether a step of this kind reaches its hosts through the blueprint's bastion (when it
    /// has one): every kind that logs in to servers, and `http` steps that say `via: bastion`.
    pub fn uses_bastion(self, with: &BTreeMap<String, Value>) -> bool {
        match self {
            Kind::Ansible | Kind::WaitSsh => true,
            Kind::Http => http::goes_via_bastion(with),
            _ => false,
        }
    }

    /// The folder (relative to the blueprint's) whose files a step takes into its sandbox.
    pub fn bundle_dir(self, with: &BTreeMap<String, Value>) -> Option<String> {
        match self {
            Kind::Terraform => terraform::bundle_dir(with),
            Kind::Ansible => ansible::bundle_dir(with),
            _ => None,
        }
    }

    /// The setting that names the files a step of this kind takes from the blueprint's folder.
    pub fn bundle_setting(self) -> Option<&'static str> {
        match self {
            Kind::Terraform => Some(terraform::BUNDLE_SETTING),
            Kind::Ansible => Some(ansible::BUNDLE_SETTING),
            _ => None,
        }
    }

    /// What a step of this kind misses among the files of the blueprint's folder, as (setting,
    /// problem).
    pub fn missing_files(
        self,
        with: &BTreeMap<String, Value>,
        files: &BTreeMap<String, String>,
    ) -> Option<(&'static str, String)> {
        match self {
            Kind::Terraform => terraform::missing_files(with, files),
            Kind::Ansible => ansible::missing_files(with, files),
            _ => None,
        }
    }

    /// How long a kind that waits inside its attempt (for SSH, for servers to boot) waits when
    /// the step does not say; `None` for the kinds that do not wait.
    pub fn default_wait(self) -> Option<Duration> {
        match self {
            Kind::WaitSsh => Some(wait_ssh::DEFAULT_SSH_WAIT),
            Kind::Servers => Some(servers::DEFAULT_BOOT_WAIT),
            _ => None,
        }
    }

    /// Whether this is the kind a deployment's destroy tears down, and whose state it keeps.
    pub fn is_destroyable(self) -> bool {
        self == Kind::Terraform
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The names of every kind, for messages.
pub fn names() -> Vec<&'static str> {
    Kind::ALL.iter().map(|kind| kind.name()).collect()
}

/// Whether a step reaches its hosts through the blueprint's bastion (see [`Kind::uses_bastion`];
/// a kind this engine does not know never does).
pub fn uses_bastion(step: &StepSpec) -> bool {
    Kind::of(step).is_some_and(|kind| kind.uses_bastion(&step.with))
}

/// The folder whose files a step takes into its sandbox (see [`Kind::bundle_dir`]).
pub fn bundle_dir(step: &StepSpec) -> Option<String> {
    Kind::of(step)?.bundle_dir(&step.with)
}

/// Whether a recorded step is of the given kind.
pub fn is(step: &StepSpec, kind: Kind) -> bool {
    Kind::of(step) == Some(kind)
}

/// The addresses a `hosts` setting names: a host group of the blueprint, or a list.
pub fn host_list<'a>(
    value: &'a Value,
    groups: &'a BTreeMap<String, Vec<String>>,
) -> Result<Vec<&'a str>, String> {
    match value {
        Value::String(group) => groups
            .get(group)
            .map(|addresses| addresses.iter().map(String::as_str).collect())
            .ok_or_else(|| {
                let known: Vec<&str> = groups.keys().map(String::as_str).collect();
                format!(
                    "`{group}` is not a host group of the blueprint; {}",
                    if known.is_empty() {
                        "declare it under `hosts`, or give a list of address:port".to_owned()
                    } else {
                        format!("the groups are: {}", known.join(", "))
                    }
                )
            }),
        Value::Array(items) if !items.is_empty() => items
            .iter()
            .map(|item| {
                let address = item
                    .as_str()
                    .ok_or_else(|| "each host must be text: address or address:port".to_owned())?;
                address_problem(address).map_or(Ok(address), Err)
            })
            .collect(),
        _ => Err("give a host group's name or a list of address:port".to_owned()),
    }
}

/// What is wrong with a host's address as written: a control or text-direction character,
/// which no address has and which would reach terminals in every message naming the host.
pub fn address_problem(address: &str) -> Option<String> {
    address.chars().any(crate::text::is_unprintable).then(|| {
        format!(
            "`{}` holds a control character; write an address, address:port or [ipv6]:port",
            crate::text::escaped(address)
        )
    })
}

/// What is wrong with a `vars` setting (`terraform`, `ansible`).
pub(crate) fn vars_problem(value: &Value) -> Option<String> {
    value
        .as_object()
        .is_none()
        .then(|| "must be a map of variable names to values".to_owned())
}

pub(crate) fn text(value: &Value) -> Result<&str, String> {
    value.as_str().ok_or_else(|| "must be text".to_owned())
}

/// A plain path inside the blueprint's folder, without templates ([`crate::inputs::path_problem`];
/// a folder may end in one '/').
pub(crate) fn relative_path(value: &Value) -> Result<&str, String> {
    let path = text(value)?;
    let templated = Template::parse(path).map_or(true, |t| t.references().next().is_some());
    let plain = path.strip_suffix('/').unwrap_or(path);
    if templated || crate::inputs::path_problem(plain).is_some() {
        return Err(format!(
            "`{}` must be a plain path inside the blueprint's folder, like `infra` or `site.yml` \
             (relative, without `..`, `.` or empty parts)",
            crate::text::escaped(path)
        ));
    }
    Ok(path)
}

/// A setting's value as a user wrote it, for messages.
pub(crate) fn plain(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn with(value: Value) -> BTreeMap<String, Value> {
        serde_json::from_value(value).expect("a map")
    }

    #[test]
    fn every_kind_checks_its_settings() {
        let groups = BTreeMap::from([("web".to_owned(), vec!["10.0.0.1:22".to_owned()])]);
        let cases = [
            (Kind::Terraform, json!({"dir": "../infra"}), ".dir"),
            (
                Kind::Terraform,
                json!({"dir": "infra", "vars": [1]}),
                ".vars",
            ),
            (
                Kind::Ansible,
                json!({"playbook": "site.txt", "hosts": "web"}),
                ".playbook",
            ),
            (
                Kind::Ansible,
                json!({"playbook": "site.yml", "hosts": "db"}),
                ".hosts",
            ),
            (
                Kind::Http,
                json!({"url": "http://x", "method": "FETCH"}),
                ".method",
            ),
            (
                Kind::Http,
                json!({"url": "http://x", "expect_status": 42}),
                ".expect_status",
            ),
            (
                Kind::Http,
                json!({"url": "http://x", "outputs": {"id": "id"}}),
                ".outputs",
            ),
            (
                Kind::WaitSsh,
                json!({"hosts": ["a:22"], "timeout": "soon"}),
                ".timeout",
            ),
            (Kind::WaitSsh, json!({}), ""),
            (
                Kind::Script,
                json!({"command": "cat <<{{ params.x }}\nx\n"}),
                ".command",
            ),
        ];
        for (kind, settings, field) in cases {
            let problems = kind.check_with(&with(settings.clone()), &groups);
            assert!(
                problems.iter().any(|(f, _)| f == field),
                "{kind} {settings}: {problems:?}"
            );
        }
        let good = [
            (Kind::Terraform, json!({"dir": "infra", "vars": {"a": 1}})),
            (
                Kind::Ansible,
                json!({"playbook": "play/site.yml", "hosts": "web", "user": "root"}),
            ),
            (
                Kind::Ansible,
                json!({"playbook": "site.yaml", "hosts": ["127.0.0.1:2222"]}),
            ),
            (
                Kind::Http,
                json!({"url": "http://x", "method": "POST", "expect_status": [200, 201],
                            "headers": {"a": "b"}, "outputs": {"id": "/id"}}),
            ),
            (Kind::WaitSsh, json!({"hosts": "web", "timeout": "2m"})),
        ];
        for (kind, settings) in good {
            assert_eq!(
                kind.check_with(&with(settings.clone()), &groups),
                vec![],
                "{kind} {settings}"
            );
        }
    }

    #[test]
    fn steps_take_the_folder_of_their_files() {
        assert_eq!(
            Kind::Terraform.bundle_dir(&with(json!({"dir": "infra/"}))),
            Some("infra".into())
        );
        assert_eq!(
            Kind::Ansible.bundle_dir(&with(json!({"playbook": "play/site.yml"}))),
            Some("play".into())
        );
        assert_eq!(
            Kind::Ansible.bundle_dir(&with(json!({"playbook": "site.yml"}))),
            Some(String::new())
        );
        assert_eq!(
            Kind::Script.bundle_dir(&with(json!({"command": "true"}))),
            None
        );
    }

    #[test]
    fn a_kind_is_read_from_its_name_and_only_from_it() {
        for kind in Kind::ALL {
            assert_eq!(Kind::parse(kind.name()), Some(kind));
            assert_eq!(kind.to_string(), kind.name());
        }
        assert_eq!(Kind::parse("Script"), None);
        assert_eq!(
            names().join(", "),
            "script, noop, terraform, ansible, http, wait-ssh, servers"
        );
    }
}
