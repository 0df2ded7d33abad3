//! The `wait-ssh` kind: a wait, inside the attempt, for hosts to answer SSH.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use super::{host_list, optional, plain, required, Setting};
use crate::duration::{read_duration, DurationError};

/// The name a blueprint's `run:` gives the kind.
pub const NAME: &str = "wait-ssh";

/// The `with` settings it takes.
pub(crate) const SETTINGS: [Setting; 2] = [required("hosts"), optional("timeout")];

/// How long a `wait-ssh` step waits, unless it says.
pub const DEFAULT_SSH_WAIT: Duration = Duration::from_secs(120);

/// What is wrong with one setting's value.
pub(crate) fn setting_problem(
    key: &str,
    value: &Value,
    hosts: &BTreeMap<String, Vec<String>>,
) -> Option<String> {
    match key {
        "hosts" => host_list(value, hosts).err(),
        "timeout" => match value.as_str().map(read_duration) {
            Some(Ok(wait)) if !wait.is_zero() => None,
            Some(Err(long @ DurationError::TooLong(_))) => Some(long.to_string()),
            _ => Some(format!(
                "`{}` is not a duration; write it like 30s or 2m",
                plain(value)
            )),
        },
        _ => None,
    }
}
