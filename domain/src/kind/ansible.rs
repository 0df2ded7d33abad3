//! The `ansible` kind: `ansible-playbook` of a playbook of the blueprint's, against hosts it
//! logs in to (through the bastion, when the blueprint has one).
//!
//! - Settings ([`AnsibleSettings`]): `playbook`, required; `hosts`, required, a host group of
//!   the blueprint or a list of addresses; `user`, optional (root unless given); `vars`,
//!   optional, a map of extra variables. Texts other than the playbook may be templates.
//! - Checks: the playbook is a plain path inside the blueprint's folder ending in `.yml` or
//!   `.yaml`, and a file of it ([`missing_files`]); the hosts name a group or list addresses;
//!   `user` is text; `vars` is a map.
//! - Other half: `functions/runner/src/kind/ansible.rs` writes the inventory, the settings and
//!   the rendered variables, runs the playbook, and reads the PLAY RECAP.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{optional, relative_path, required, text, vars, Hosts, Problems, Reading, Setting};

/// The name a blueprint's `run:` gives the kind.
pub const NAME: &str = "ansible";

/// The `with` settings it takes.
pub(crate) const SETTINGS: [Setting; 4] = [
    required("playbook"),
    required("hosts"),
    optional("user"),
    optional("vars"),
];

/// An `ansible` step's settings, read.
#[derive(Clone, Debug, PartialEq)]
pub struct AnsibleSettings {
    /// The playbook, relative to the blueprint's folder.
    pub playbook: String,
    /// The hosts it runs against.
    pub hosts: Hosts,
    /// The user it logs in as, as written; `None`: the runner's default.
    pub user: Option<String>,
    /// The extra variables, their texts as written; empty when the step gives none.
    pub vars: serde_json::Map<String, Value>,
}

impl AnsibleSettings {
    /// The folder whose files the step takes: its playbook's (`""`: the blueprint's own).
    pub fn folder(&self) -> String {
        folder_of(&self.playbook)
    }
}

/// Reads an `ansible` step's `with` against the blueprint's host groups, or says every problem
/// as (field below `with`, problem).
pub fn read(
    with: &BTreeMap<String, Value>,
    groups: &BTreeMap<String, Vec<String>>,
) -> Result<AnsibleSettings, Problems> {
    let mut reading = Reading::start(NAME, &SETTINGS, with);
    let (mut playbook, mut hosts, mut user, mut variables) =
        (None, None, Some(None), Some(serde_json::Map::new()));
    for (key, value) in with {
        match key.as_str() {
            "playbook" => playbook = reading.value(key, read_playbook(value)),
            "vars" => variables = reading.value(key, vars(value)),
            "user" => user = reading.value(key, text(value).map(|u| Some(u.to_owned()))),
            "hosts" => hosts = reading.value(key, Hosts::read(value, groups)),
            _ => {}
        }
    }
    let settings = match (playbook, hosts, user, variables) {
        (Some(playbook), Some(hosts), Some(user), Some(vars)) => Some(AnsibleSettings {
            playbook,
            hosts,
            user,
            vars,
        }),
        _ => None,
    };
    reading.finish(settings)
}

/// A playbook's path: plain, inside the blueprint's folder, a YAML file.
fn read_playbook(value: &Value) -> Result<String, String> {
    let path = relative_path(value)?;
    if !(path.ends_with(".yml") || path.ends_with(".yaml")) {
        return Err(format!(
            "`{path}` must be a playbook file ending in .yml or .yaml"
        ));
    }
    Ok(path.to_owned())
}

/// The folder of a playbook's path.
fn folder_of(playbook: &str) -> String {
    playbook
        .rsplit_once('/')
        .map_or(String::new(), |(dir, _)| dir.to_owned())
}

/// The folder whose files the step takes: its playbook's.
pub(crate) fn bundle_dir(with: &BTreeMap<String, Value>) -> Option<String> {
    Some(folder_of(with.get("playbook")?.as_str()?))
}

/// The setting that names the playbook, whose folder the step takes.
pub(crate) const BUNDLE_SETTING: &str = "playbook";

/// The playbook, when it is not a file of the blueprint's folder.
pub(crate) fn missing_files(
    with: &BTreeMap<String, Value>,
    files: &BTreeMap<String, String>,
) -> Option<(&'static str, String)> {
    let playbook = with
        .get("playbook")
        .and_then(|v| v.as_str())
        .unwrap_or_default();
    (!files.contains_key(playbook)).then(|| {
        (
            BUNDLE_SETTING,
            format!("`{playbook}` is not a file in the blueprint's folder"),
        )
    })
}
