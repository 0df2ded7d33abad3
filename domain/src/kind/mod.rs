//! The step kinds. [`Kind`] is the one place a step's `run:` is read into a kind; each kind's
//! module owns its name, the `with` settings it takes, the typed struct they are read into and
//! the checks on them:
//!
//! - [`script`], [`noop`], [`terraform`], [`ansible`], [`http`], [`wait_ssh`], [`servers`].
//!
//! [`Kind::read`] reads a step's `with` into a [`StepKind`], the kind with its settings typed,
//! or says every problem; validation reports those problems ([`Kind::check_with`]) and the
//! runner reads the recorded `with` through the same function, so the two never read a
//! setting differently. Templates stay as written in the typed settings: the runner renders
//! them when the attempt starts.
//!
//! The runner's half of each kind (preparing the sandbox command, judging the exit) is the file
//! of the same name in `functions/runner/src/kind/`. What several kinds share (host lists, plain
//! paths, text settings, the frame of every reading) is below.

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

pub use ansible::AnsibleSettings;
pub use http::HttpSettings;
pub use script::ScriptSettings;
pub use servers::ServersSettings;
pub use terraform::TerraformSettings;
pub use wait_ssh::WaitSshSettings;

/// What is wrong with a step's `with`, as (field below `with`, problem), in the order messages
/// give them.
pub type Problems = Vec<(String, String)>;

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

/// A kind's `with` as it is read: the problems found so far, in the order messages give them:
/// the settings missing, the settings the kind does not take, then each value's problems in
/// the map's order, then what is wrong with the values read together.
pub(crate) struct Reading {
    problems: Problems,
}

impl Reading {
    /// Starts reading `with` for the kind `kind`, which takes `settings`: notes the required
    /// settings missing and those it does not take.
    pub(crate) fn start(kind: &str, settings: &[Setting], with: &BTreeMap<String, Value>) -> Self {
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
        Reading { problems }
    }

    /// The value of the setting `key`, read, or its problem noted.
    pub(crate) fn value<T>(&mut self, key: &str, read: Result<T, String>) -> Option<T> {
        read.map_err(|problem| self.problems.push((format!(".{key}"), problem)))
            .ok()
    }

    /// Notes problems found in the settings read together.
    pub(crate) fn extend(&mut self, problems: impl IntoIterator<Item = (String, String)>) {
        self.problems.extend(problems);
    }

    /// The settings, when nothing was wrong; `settings` is `None` only when a required setting
    /// is missing, which [`start`](Self::start) noted.
    pub(crate) fn finish<T>(self, settings: Option<T>) -> Result<T, Problems> {
        match settings {
            Some(settings) if self.problems.is_empty() => Ok(settings),
            _ => Err(self.problems),
        }
    }
}

/// A step's kind with its settings read ([`Kind::read`]).
#[derive(Clone, Debug, PartialEq)]
pub enum StepKind {
    /// A shell command.
    Script(ScriptSettings),
    /// Nothing at all.
    Noop,
    /// `terraform apply` of a folder.
    Terraform(TerraformSettings),
    /// `ansible-playbook` against hosts.
    Ansible(AnsibleSettings),
    /// One HTTP request.
    Http(HttpSettings),
    /// A wait for hosts to answer SSH.
    WaitSsh(WaitSshSettings),
    /// Servers and security groups made in the tenant's cloud.
    Servers(ServersSettings),
}

impl StepKind {
    /// The kind, without its settings.
    pub fn kind(&self) -> Kind {
        match self {
            StepKind::Script(_) => Kind::Script,
            StepKind::Noop => Kind::Noop,
            StepKind::Terraform(_) => Kind::Terraform,
            StepKind::Ansible(_) => Kind::Ansible,
            StepKind::Http(_) => Kind::Http,
            StepKind::WaitSsh(_) => Kind::WaitSsh,
            StepKind::Servers(_) => Kind::Servers,
        }
    }

    /// The hosts the step logs in to, for the kinds that take `hosts`.
    pub fn hosts(&self) -> Option<&Hosts> {
        match self {
            StepKind::Ansible(settings) => Some(&settings.hosts),
            StepKind::WaitSsh(settings) => Some(&settings.hosts),
            _ => None,
        }
    }
}

/// The hosts a `hosts` setting names, as written (their addresses may be templates).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hosts {
    /// The blueprint's host group it names, if it names one rather than a list.
    pub group: Option<String>,
    /// The addresses, as written.
    pub addresses: Vec<String>,
}

impl Hosts {
    /// Reads a `hosts` setting: a host group of the blueprint, or a list ([`host_list`]).
    pub(crate) fn read(
        value: &Value,
        groups: &BTreeMap<String, Vec<String>>,
    ) -> Result<Hosts, String> {
        Ok(Hosts {
            group: value.as_str().map(str::to_owned),
            addresses: host_list(value, groups)?
                .into_iter()
                .map(str::to_owned)
                .collect(),
        })
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

    /// Reads a step's `with` into the kind's typed settings, or says every problem with them,
    /// as (field below `with`, problem). `hosts` are the blueprint's host groups.
    pub fn read(
        self,
        with: &BTreeMap<String, Value>,
        hosts: &BTreeMap<String, Vec<String>>,
    ) -> Result<StepKind, Problems> {
        Ok(match self {
            Kind::Script => StepKind::Script(script::read(with)?),
            Kind::Noop => {
                noop::read(with)?;
                StepKind::Noop
            }
            Kind::Terraform => StepKind::Terraform(terraform::read(with)?),
            Kind::Ansible => StepKind::Ansible(ansible::read(with, hosts)?),
            Kind::Http => StepKind::Http(http::read(with)?),
            Kind::WaitSsh => StepKind::WaitSsh(wait_ssh::read(with, hosts)?),
            Kind::Servers => StepKind::Servers(servers::read_step(with)?),
        })
    }

    /// Every problem with a step's `with` settings, as (field below `with`, problem).
    pub fn check_with(
        self,
        with: &BTreeMap<String, Value>,
        hosts: &BTreeMap<String, Vec<String>>,
    ) -> Problems {
        self.read(with, hosts).err().unwrap_or_default()
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

/// A `vars` setting (`terraform`, `ansible`): variable names to values, templates as written.
pub(crate) fn vars(value: &Value) -> Result<serde_json::Map<String, Value>, String> {
    value
        .as_object()
        .cloned()
        .ok_or_else(|| "must be a map of variable names to values".to_owned())
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
    fn a_step_s_settings_are_read_into_its_kind_s_own_with_their_defaults() {
        let groups = BTreeMap::from([("web".to_owned(), vec!["10.0.0.1:22".to_owned()])]);
        let read = |kind: Kind, settings: Value| kind.read(&with(settings), &groups);
        assert_eq!(
            read(Kind::WaitSsh, json!({"hosts": "web"})),
            Ok(StepKind::WaitSsh(WaitSshSettings {
                hosts: Hosts {
                    group: Some("web".into()),
                    addresses: vec!["10.0.0.1:22".into()],
                },
                wait: wait_ssh::DEFAULT_SSH_WAIT,
            }))
        );
        let Ok(StepKind::Http(http)) = read(
            Kind::Http,
            json!({"url": "https://{{ params.host }}/x", "method": "HEAD",
                   "headers": {"a": "{{ secrets.token }}", "b": "2"}, "via": "bastion"}),
        ) else {
            panic!("an http step's settings read");
        };
        assert_eq!(http.url, "https://{{ params.host }}/x", "kept as written");
        assert_eq!(http.method, "HEAD");
        assert_eq!(
            http.headers,
            vec![
                ("a".to_owned(), "{{ secrets.token }}".to_owned()),
                ("b".to_owned(), "2".to_owned())
            ]
        );
        assert!(http.via_bastion && http.expect_status.is_none() && http.body.is_none());
        let Ok(StepKind::Terraform(terraform)) = read(Kind::Terraform, json!({"dir": "infra/"}))
        else {
            panic!("a terraform step's settings read");
        };
        assert_eq!((terraform.folder(), terraform.vars.len()), ("infra", 0));
        assert_eq!(read(Kind::Noop, json!({})), Ok(StepKind::Noop));
        assert_eq!(
            read(Kind::Noop, json!({"x": 1})),
            Err(vec![(
                ".x".to_owned(),
                "unknown setting for a `noop` step; it takes none".to_owned()
            )])
        );
        assert_eq!(
            read(
                Kind::Ansible,
                json!({"playbook": "site.yml", "hosts": ["a:22"]})
            )
            .map(|kind| kind.hosts().cloned()),
            Ok(Some(Hosts {
                group: None,
                addresses: vec!["a:22".into()]
            }))
        );
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
