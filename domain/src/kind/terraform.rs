//! The `terraform` kind: `terraform apply` of a folder of the blueprint's, whose state the engine
//! keeps between attempts and destroys with the deployment.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{optional, relative_path, required, vars_problem, Setting};

/// The name a blueprint's `run:` gives the kind.
pub const NAME: &str = "terraform";

/// The `with` settings it takes.
pub(crate) const SETTINGS: [Setting; 2] = [required("dir"), optional("vars")];

/// What is wrong with one setting's value.
pub(crate) fn setting_problem(key: &str, value: &Value) -> Option<String> {
    match key {
        "dir" => relative_path(value).err(),
        "vars" => vars_problem(value),
        _ => None,
    }
}

/// The folder whose files the step takes: its `dir`.
pub(crate) fn bundle_dir(with: &BTreeMap<String, Value>) -> Option<String> {
    let path = with.get("dir")?.as_str()?;
    Some(path.trim_end_matches('/').to_owned())
}

/// The setting that names the folder the step takes.
pub(crate) const BUNDLE_SETTING: &str = "dir";

/// The step's folder when it holds no Terraform configuration.
pub(crate) fn missing_files(
    with: &BTreeMap<String, Value>,
    files: &BTreeMap<String, String>,
) -> Option<(&'static str, String)> {
    let dir = bundle_dir(with).unwrap_or_default();
    let prefix = format!("{dir}/");
    (!files.keys().any(|path| {
        path.strip_prefix(&prefix).is_some_and(|name| {
            !name.contains('/') && (name.ends_with(".tf") || name.ends_with(".tf.json"))
        })
    }))
    .then(|| {
        (
            BUNDLE_SETTING,
            format!("`{dir}` holds no Terraform configuration (*.tf files)"),
        )
    })
}
