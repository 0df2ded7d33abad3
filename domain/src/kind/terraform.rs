//! The `terraform` kind: `terraform apply` of a folder of the blueprint's, whose state the engine
//! keeps between attempts and destroys with the deployment.
//!
//! - Settings ([`TerraformSettings`]): `dir`, required, the folder; `vars`, optional, a map of
//!   variables whose texts may be templates.
//! - Checks: `dir` is a plain path inside the blueprint's folder and holds `*.tf` files
//!   ([`missing_files`]); `vars` is a map.
//! - Other half: `functions/runner/src/kind/terraform.rs` lays out the folder, the kept state and
//!   the rendered variables, runs `init` and `apply` (or `destroy`), and reads the outputs.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{optional, relative_path, required, vars, Problems, Reading, Setting};

/// The name a blueprint's `run:` gives the kind.
pub const NAME: &str = "terraform";

/// The `with` settings it takes.
pub(crate) const SETTINGS: [Setting; 2] = [required("dir"), optional("vars")];

/// A `terraform` step's settings, read.
#[derive(Clone, Debug, PartialEq)]
pub struct TerraformSettings {
    /// The configuration's folder, relative to the blueprint's, as written (it may end in `/`).
    pub dir: String,
    /// The variables, their texts as written (templates rendered by the runner); empty when
    /// the step gives none.
    pub vars: serde_json::Map<String, Value>,
}

impl TerraformSettings {
    /// The folder whose files the step takes: its `dir`, without a trailing `/`.
    pub fn folder(&self) -> &str {
        self.dir.trim_end_matches('/')
    }
}

/// Reads a `terraform` step's `with`, or says every problem as (field below `with`, problem).
pub fn read(with: &BTreeMap<String, Value>) -> Result<TerraformSettings, Problems> {
    let mut reading = Reading::start(NAME, &SETTINGS, with);
    let (mut dir, mut variables) = (None, Some(serde_json::Map::new()));
    for (key, value) in with {
        match key.as_str() {
            "dir" => dir = reading.value(key, relative_path(value).map(str::to_owned)),
            "vars" => variables = reading.value(key, vars(value)),
            _ => {}
        }
    }
    let settings = dir
        .zip(variables)
        .map(|(dir, vars)| TerraformSettings { dir, vars });
    reading.finish(settings)
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
