//! The `servers` kind: the security groups and servers a step makes in the tenant's cloud.
//!
//! - Settings ([`ServersSettings`]), read from the step's `with` by [`read`] so that validation
//!   and the runner read them the same way:
//!
//! ```yaml
//! with:
//!   security_groups:            # name -> ingress rules (TCP)
//!     bastion: []
//!     web:
//!       - { port: 22, from: bastion }      # a group of this step, or a CIDR
//!   servers:                    # name -> settings
//!     bastion: { security_groups: [bastion], role: bastion }
//!     web-1: { security_groups: [web], image: "{{ params.image }}", flavor: m1.small }
//!   timeout: 2m                 # how long to wait for every server to be ACTIVE
//! ```
//!
//! - Checks: names a cloud takes as host names, groups and rules that refer to groups of the
//!   step, CIDRs, at most one bastion, a wait that is a duration.
//! - Other half: `functions/runner/src/kind/servers.rs` plans the cloud resources and runs
//!   `overture provision` in the sandbox to make them; the step's outputs are the servers'
//!   addresses and the groups' ids.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use serde_json::Value;

use super::{optional, plain, required, Problems, Reading, Setting};
use crate::duration::{read_duration, DurationError};

/// The name a blueprint's `run:` gives the kind.
pub const NAME: &str = "servers";

/// The `with` settings it takes.
pub(crate) const SETTINGS: [Setting; 3] = [
    required("servers"),
    optional("security_groups"),
    optional("timeout"),
];

/// How long a `servers` step waits for its servers to be `ACTIVE`, unless it says.
pub const DEFAULT_BOOT_WAIT: Duration = Duration::from_secs(300);

/// The `role` that makes a server the bastion (SSH forwarding allowed on it).
pub const BASTION_ROLE: &str = "bastion";

/// What starts the output holding a security group's id: `security-group-<group>`.
pub const GROUP_OUTPUT_PREFIX: &str = "security-group-";

/// The longest name of a server or group: with the deployment's 9-character prefix it stays a
/// valid host name label (63 characters).
pub const MAX_NAME_LEN: usize = 54;

/// What a server takes.
const SERVER_KEYS: [&str; 4] = ["security_groups", "role", "image", "flavor"];
/// What a rule takes.
const RULE_KEYS: [&str; 2] = ["port", "from"];

/// A `servers` step's settings, read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServersSettings {
    /// Security groups by name, with their ingress rules.
    pub security_groups: BTreeMap<String, Vec<IngressRule>>,
    /// Servers by name.
    pub servers: BTreeMap<String, ServerSettings>,
    /// How long to wait for every server to be `ACTIVE`.
    pub boot_wait: Duration,
}

/// One server of a `servers` step.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServerSettings {
    /// The names of its groups, among the step's.
    pub security_groups: Vec<String>,
    /// Whether it is the bastion.
    pub bastion: bool,
    /// The image, as written (templates allowed); the cloud's default when absent.
    pub image: Option<String>,
    /// The flavor, as written (templates allowed); the cloud's default when absent.
    pub flavor: Option<String>,
}

/// A TCP ingress rule of a group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IngressRule {
    /// The port admitted.
    pub port: u16,
    /// Whom it admits.
    pub from: Source,
}

/// Whom a rule admits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// Every server of this group of the step.
    Group(String),
    /// Every address of this CIDR.
    Cidr(String),
}

/// Reads a `servers` step's `with` as every kind's is read: the settings it takes, then
/// [`read`].
pub(crate) fn read_step(with: &BTreeMap<String, Value>) -> Result<ServersSettings, Problems> {
    let mut reading = Reading::start(NAME, &SETTINGS, with);
    // Its settings refer to each other (a server to its groups, a rule to a group), so they
    // are read as a whole.
    let settings = read(with).map_err(|problems| reading.extend(problems)).ok();
    reading.finish(settings)
}

/// Reads a `servers` step's `with`, or says every problem as (field below `with`, problem).
pub fn read(with: &BTreeMap<String, Value>) -> Result<ServersSettings, Vec<(String, String)>> {
    let mut problems = Vec::new();
    let mut problem = |field: String, text: String| problems.push((field, text));

    let mut security_groups = BTreeMap::new();
    match with.get("security_groups") {
        None => {}
        Some(Value::Object(groups)) => {
            for (name, rules) in groups {
                let field = format!(".security_groups.{name}");
                if let Some(text) = name_problem(name, "security group") {
                    problem(field.clone(), text);
                }
                security_groups.insert(name.clone(), read_rules(rules, &field, &mut problem));
            }
        }
        Some(_) => problem(
            ".security_groups".into(),
            "must be a map from group name to its rules, like `web: [{ port: 22, from: bastion }]`"
                .into(),
        ),
    }
    // `from` may name any group of the step, so rules are checked once every group is known.
    for (name, rules) in &security_groups {
        for (index, rule) in rules.iter().enumerate() {
            if let Source::Group(group) = &rule.from {
                if !security_groups.contains_key(group) {
                    problem(
                        format!(".security_groups.{name}[{index}].from"),
                        format!(
                            "`{group}` is neither a security group of this step nor a CIDR; {}",
                            declare_hint(&security_groups)
                        ),
                    );
                }
            }
        }
    }

    let mut servers = BTreeMap::new();
    match with.get("servers") {
        // `check_with` already says a `servers` step needs `with.servers`.
        None => {}
        Some(Value::Object(map)) if !map.is_empty() => {
            for (name, settings) in map {
                let field = format!(".servers.{name}");
                if let Some(text) = name_problem(name, "server") {
                    problem(field.clone(), text);
                } else if name.starts_with(GROUP_OUTPUT_PREFIX) {
                    problem(
                        field.clone(),
                        format!("a server's name must not start with `{GROUP_OUTPUT_PREFIX}`: the step's outputs for its security groups are named so"),
                    );
                }
                let server = read_server(settings, &field, &security_groups, &mut problem);
                servers.insert(name.clone(), server);
            }
            let bastions: Vec<&String> = servers
                .iter()
                .filter(|(_, server)| server.bastion)
                .map(|(name, _)| name)
                .collect();
            if bastions.len() > 1 {
                problem(
                    ".servers".into(),
                    format!(
                        "only one server can have `role: {BASTION_ROLE}`, but {} do: {}",
                        bastions.len(),
                        bastions
                            .iter()
                            .map(|name| format!("`{name}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                );
            }
        }
        Some(_) => problem(
            ".servers".into(),
            "must be a map from server name to its settings, like `web-1: { security_groups: [web] }`"
                .into(),
        ),
    }

    let boot_wait = match with.get("timeout") {
        None => DEFAULT_BOOT_WAIT,
        Some(value) => match value.as_str().map(read_duration) {
            Some(Ok(wait)) if !wait.is_zero() => wait,
            Some(Err(long @ DurationError::TooLong(_))) => {
                problem(".timeout".into(), long.to_string());
                DEFAULT_BOOT_WAIT
            }
            _ => {
                problem(
                    ".timeout".into(),
                    format!(
                        "`{}` is not a duration; write how long to wait for the servers like 2m or 90s",
                        plain(value)
                    ),
                );
                DEFAULT_BOOT_WAIT
            }
        },
    };

    if problems.is_empty() {
        Ok(ServersSettings {
            security_groups,
            servers,
            boot_wait,
        })
    } else {
        Err(problems)
    }
}

fn read_rules(
    value: &Value,
    field: &str,
    problem: &mut impl FnMut(String, String),
) -> Vec<IngressRule> {
    let Value::Array(items) = value else {
        problem(
            field.to_owned(),
            "must be a list of rules like `{ port: 22, from: bastion }`, or `[]` to admit nothing"
                .into(),
        );
        return vec![];
    };
    let mut rules = Vec::new();
    for (index, item) in items.iter().enumerate() {
        let field = format!("{field}[{index}]");
        let Value::Object(map) = item else {
            problem(
                field,
                "must be a rule like `{ port: 22, from: bastion }`".into(),
            );
            continue;
        };
        for key in map.keys().filter(|key| !RULE_KEYS.contains(&key.as_str())) {
            problem(
                format!("{field}.{key}"),
                format!(
                    "unknown setting of a rule; a rule takes: {}",
                    RULE_KEYS.join(", ")
                ),
            );
        }
        let port = map
            .get("port")
            .and_then(Value::as_u64)
            .and_then(|port| u16::try_from(port).ok())
            .filter(|port| *port != 0);
        if port.is_none() {
            problem(
                format!("{field}.port"),
                "give the TCP port it admits, a number from 1 to 65535".into(),
            );
        }
        let from = match map.get("from").and_then(Value::as_str) {
            Some(text) if text.contains('/') => {
                if is_cidr(text) {
                    Some(Source::Cidr(text.to_owned()))
                } else {
                    problem(
                        format!("{field}.from"),
                        format!(
                            "`{text}` is not a CIDR; write one like 10.0.0.0/8 or 203.0.113.7/32"
                        ),
                    );
                    None
                }
            }
            Some(group) => Some(Source::Group(group.to_owned())),
            None => {
                problem(
                    format!("{field}.from"),
                    "say whom it admits: a security group of this step, or a CIDR like 10.0.0.0/8"
                        .into(),
                );
                None
            }
        };
        if let (Some(port), Some(from)) = (port, from) {
            rules.push(IngressRule { port, from });
        }
    }
    rules
}

fn read_server(
    value: &Value,
    field: &str,
    groups: &BTreeMap<String, Vec<IngressRule>>,
    problem: &mut impl FnMut(String, String),
) -> ServerSettings {
    let Value::Object(map) = value else {
        problem(
            field.to_owned(),
            "must be the server's settings, like `{ security_groups: [web] }`".into(),
        );
        return ServerSettings::default();
    };
    let mut server = ServerSettings::default();
    for key in map
        .keys()
        .filter(|key| !SERVER_KEYS.contains(&key.as_str()))
    {
        problem(
            format!("{field}.{key}"),
            format!(
                "unknown setting of a server; a server takes: {}",
                SERVER_KEYS.join(", ")
            ),
        );
    }
    match map.get("security_groups") {
        None => {}
        Some(Value::Array(names)) => {
            for (index, name) in names.iter().enumerate() {
                match name.as_str() {
                    Some(name) if groups.contains_key(name) => {
                        server.security_groups.push(name.to_owned())
                    }
                    _ => problem(
                        format!("{field}.security_groups[{index}]"),
                        format!(
                            "`{}` is not a security group of this step; {}",
                            plain(name),
                            declare_hint(groups)
                        ),
                    ),
                }
            }
        }
        Some(_) => problem(
            format!("{field}.security_groups"),
            "must be a list of the step's security groups, like `[web]`".into(),
        ),
    }
    match map.get("role") {
        None => {}
        Some(Value::String(role)) if role == BASTION_ROLE => server.bastion = true,
        Some(other) => problem(
            format!("{field}.role"),
            format!(
                "`{}` is not a role; the only one is `{BASTION_ROLE}`",
                plain(other)
            ),
        ),
    }
    for (key, slot) in [("image", &mut server.image), ("flavor", &mut server.flavor)] {
        match map.get(key) {
            None => {}
            Some(Value::String(text)) if !text.trim().is_empty() => *slot = Some(text.clone()),
            Some(_) => problem(
                format!("{field}.{key}"),
                format!("must be the {key}'s id or name, as text"),
            ),
        }
    }
    server
}

/// What is wrong with a name of a server or group, if anything.
fn name_problem(name: &str, what: &str) -> Option<String> {
    let slug = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.ends_with('-');
    if !slug {
        Some(format!(
            "`{name}` is not a {what} name; use lowercase letters, digits and '-', like `web-1`"
        ))
    } else if name.len() > MAX_NAME_LEN {
        Some(format!(
            "a {what} name is at most {MAX_NAME_LEN} characters; `{name}` has {}",
            name.len()
        ))
    } else {
        None
    }
}

fn declare_hint(groups: &BTreeMap<String, Vec<IngressRule>>) -> String {
    if groups.is_empty() {
        "declare it under `with.security_groups`".to_owned()
    } else {
        format!(
            "declare it under `with.security_groups`, or use one of: {}",
            groups
                .keys()
                .map(String::as_str)
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}

/// Whether `text` is an IPv4 or IPv6 CIDR.
fn is_cidr(text: &str) -> bool {
    let Some((address, bits)) = text.split_once('/') else {
        return false;
    };
    let Ok(bits) = bits.parse::<u8>() else {
        return false;
    };
    (address.parse::<Ipv4Addr>().is_ok() && bits <= 32)
        || (address.parse::<Ipv6Addr>().is_ok() && bits <= 128)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn with(value: Value) -> BTreeMap<String, Value> {
        serde_json::from_value(value).expect("a map")
    }

    fn problems(value: Value) -> Vec<(String, String)> {
        read(&with(value)).expect_err("refused")
    }

    fn example() -> Value {
        json!({
            "security_groups": {
                "bastion": [],
                "web": [{"port": 22, "from": "bastion"}, {"port": 8000, "from": "10.0.0.0/8"}]
            },
            "servers": {
                "bastion": {"security_groups": ["bastion"], "role": "bastion"},
                "web-1": {"security_groups": ["web"], "image": "{{ params.image }}"}
            },
            "timeout": "2m"
        })
    }

    #[test]
    fn the_documented_shape_reads() {
        let settings = read(&with(example())).expect("valid");
        assert_eq!(settings.boot_wait, Duration::from_secs(120));
        assert_eq!(
            settings.security_groups["web"],
            vec![
                IngressRule {
                    port: 22,
                    from: Source::Group("bastion".into())
                },
                IngressRule {
                    port: 8000,
                    from: Source::Cidr("10.0.0.0/8".into())
                },
            ]
        );
        assert!(settings.servers["bastion"].bastion);
        assert_eq!(
            settings.servers["web-1"],
            ServerSettings {
                security_groups: vec!["web".into()],
                bastion: false,
                image: Some("{{ params.image }}".into()),
                flavor: None,
            }
        );
        let minimal = read(&with(json!({"servers": {"one": {}}}))).expect("valid");
        assert_eq!(minimal.boot_wait, DEFAULT_BOOT_WAIT);
    }

    #[test]
    fn a_group_that_does_not_exist_is_named_with_the_ones_that_do() {
        let mut value = example();
        value["servers"]["web-1"]["security_groups"] = json!(["db"]);
        value["security_groups"]["web"][0]["from"] = json!("proxy");
        let found = problems(value);
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!(found[0].0, ".security_groups.web[0].from");
        assert!(found[0].1.contains("`proxy`") && found[0].1.contains("bastion, web"));
        assert_eq!(found[1].0, ".servers.web-1.security_groups[0]");
        assert!(
            found[1].1.contains("`db`")
                && found[1]
                    .1
                    .contains("declare it under `with.security_groups`"),
            "{found:?}"
        );
    }

    #[test]
    fn names_rules_and_settings_are_checked() {
        let cases = [
            (json!({"servers": {"Web_1": {}}}), ".servers.Web_1"),
            (
                json!({"servers": {"security-group-x": {}}}),
                ".servers.security-group-x",
            ),
            (json!({"servers": {"a": {"size": 2}}}), ".servers.a.size"),
            (
                json!({"servers": {"a": {"role": "jump"}}}),
                ".servers.a.role",
            ),
            (json!({"servers": {"a": {"image": 7}}}), ".servers.a.image"),
            (
                json!({"servers": {"a": {}, "b": {"role": "bastion"}, "c": {"role": "bastion"}}}),
                ".servers",
            ),
            (json!({"servers": {}}), ".servers"),
            (json!({"servers": ["a"]}), ".servers"),
            (json!({"servers": {"a": {}}, "timeout": "soon"}), ".timeout"),
            (
                json!({"servers": {"a": {}}, "security_groups": {"G": []}}),
                ".security_groups.G",
            ),
            (
                json!({"servers": {"a": {}}, "security_groups": {"g": {}}}),
                ".security_groups.g",
            ),
            (
                json!({"servers": {"a": {}}, "security_groups": {"g": [{"port": 0, "from": "g"}]}}),
                ".security_groups.g[0].port",
            ),
            (
                json!({"servers": {"a": {}}, "security_groups": {"g": [{"port": 22}]}}),
                ".security_groups.g[0].from",
            ),
            (
                json!({"servers": {"a": {}}, "security_groups": {"g": [{"port": 22, "from": "10.0.0.0/33"}]}}),
                ".security_groups.g[0].from",
            ),
            (
                json!({"servers": {"a": {}}, "security_groups": {"g": [{"port": 22, "from": "g", "to": 1}]}}),
                ".security_groups.g[0].to",
            ),
        ];
        for (value, field) in cases {
            let found = problems(value.clone());
            assert!(found.iter().any(|(f, _)| f == field), "{value}: {found:?}");
        }
        assert!(is_cidr("fd00::/8") && is_cidr("0.0.0.0/0") && !is_cidr("10.0.0.0"));
    }
}
