//! The `script` kind: a shell command run in the sandbox.
//!
//! - Settings ([`ScriptSettings`]): `command`, required, text; a template.
//! - Checks: the command is text, and each of its references to parameters, outputs and
//!   secrets stands where the shell can take it from an environment variable
//!   ([`crate::shell`]): its place in the command's quoting is checked here.
//! - Other half: `functions/runner/src/kind/script.rs` turns the references into variables and
//!   runs the command; its outputs are the `key=value` lines it writes to `$OVERTURE_OUTPUTS`.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{required, text, Problems, Reading, Setting};
use crate::template::Template;

/// The name a blueprint's `run:` gives the kind.
pub const NAME: &str = "script";

/// The `with` settings it takes.
pub(crate) const SETTINGS: [Setting; 1] = [required("command")];

/// A `script` step's settings, read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScriptSettings {
    /// The command, as written (its references rendered by the runner).
    pub command: String,
}

/// Reads a `script` step's `with`, or says every problem as (field below `with`, problem).
pub fn read(with: &BTreeMap<String, Value>) -> Result<ScriptSettings, Problems> {
    let mut reading = Reading::start(NAME, &SETTINGS, with);
    let mut command = None;
    for (key, value) in with {
        if key == "command" {
            command = reading.value(key, text(value).map(str::to_owned));
        }
    }
    if let Some(command) = &command {
        reading.extend(
            script_quoting(command)
                .into_iter()
                .map(|p| (".command".to_owned(), p)),
        );
    }
    reading.finish(command.map(|command| ScriptSettings { command }))
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
