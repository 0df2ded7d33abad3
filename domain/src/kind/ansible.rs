//! The `ansible` kind: `ansible-playbook` of a playbook of the blueprint's, against hosts it
//! logs in to (through the bastion, when the blueprint has one).

use std::collections::BTreeMap;

use serde_json::Value;

use super::{host_list, optional, relative_path, required, text, vars_problem, Setting};

/// The name a blueprint's `run:` gives the kind.
pub const NAME: &str = "ansible";

/// The `with` settings it takes.
pub(crate) const SETTINGS: [Setting; 4] = [
    required("playbook"),
    required("hosts"),
    optional("user"),
    optional("vars"),
];

/// What is wrong with one setting's value.
pub(crate) fn setting_problem(
    key: &str,
    value: &Value,
    hosts: &BTreeMap<String, Vec<String>>,
) -> Option<String> {
    match key {
        "playbook" => relative_path(value).err().or_else(|| {
            let path = value.as_str().unwrap_or_default();
            (!(path.ends_with(".yml") || path.ends_with(".yaml")))
                .then(|| format!("`{path}` must be a playbook file ending in .yml or .yaml"))
        }),
        "vars" => vars_problem(value),
        "user" => text(value).err(),
        "hosts" => host_list(value, hosts).err(),
        _ => None,
    }
}

/// The folder whose files the step takes: its playbook's.
pub(crate) fn bundle_dir(with: &BTreeMap<String, Value>) -> Option<String> {
    let playbook = with.get("playbook")?.as_str()?;
    Some(
        playbook
            .rsplit_once('/')
            .map_or(String::new(), |(dir, _)| dir.to_owned()),
    )
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
