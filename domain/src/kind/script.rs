//! The `script` kind: a shell command run in the sandbox. Its references to parameters,
//! outputs and secrets become environment variables ([`crate::shell`]), so where each stands in
//! the command's quoting is checked here.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{required, text, Setting};
use crate::template::Template;

/// The name a blueprint's `run:` gives the kind.
pub const NAME: &str = "script";

/// The `with` settings it takes.
pub(crate) const SETTINGS: [Setting; 1] = [required("command")];

/// What is wrong with one setting's value.
pub(crate) fn setting_problem(key: &str, value: &Value) -> Option<String> {
    match key {
        "command" => text(value).err(),
        _ => None,
    }
}

/// What is wrong with where the command's references stand in its shell quoting, as (field
/// below `with`, problem).
pub(crate) fn command_problems(with: &BTreeMap<String, Value>) -> Vec<(String, String)> {
    let Some(command) = with.get("command").and_then(Value::as_str) else {
        return vec![];
    };
    script_quoting(command)
        .into_iter()
        .map(|p| (".command".to_owned(), p))
        .collect()
}

/// What is wrong with where a `script` command's references stand in its shell quoting (see
/// [`crate::shell`]). A command that is not a template is the reference checks' to report.
fn script_quoting(command: &str) -> Vec<String> {
    let Ok(template) = Template::parse(command) else {
        return vec![];
    };
    match crate::shell::script_command(&template, |n| format!("OVERTURE_REF_{n}")) {
        Ok(_) => vec![],
        Err(errors) => errors.iter().map(ToString::to_string).collect(),
    }
}
