//! The `wait-ssh` kind: a wait, inside the attempt, for hosts to answer SSH.
//!
//! - Settings ([`WaitSshSettings`]): `hosts`, required, a host group of the blueprint or a list
//!   of addresses (templates allowed); `timeout`, optional, how long to wait
//!   ([`DEFAULT_SSH_WAIT`] unless given).
//! - Checks: the hosts name a group or list addresses; the timeout is a duration, not zero and
//!   not too long (the blueprint's step checks it ends before the step's own timeout).
//! - Other half: `functions/runner/src/kind/wait_ssh.rs` polls every host (through the bastion
//!   when the blueprint has one) for its SSH banner until the wait is over.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use super::{optional, plain, required, Hosts, Problems, Reading, Setting};
use crate::duration::{read_duration, DurationError};

/// The name a blueprint's `run:` gives the kind.
pub const NAME: &str = "wait-ssh";

/// The `with` settings it takes.
pub(crate) const SETTINGS: [Setting; 2] = [required("hosts"), optional("timeout")];

/// How long a `wait-ssh` step waits, unless it says.
pub const DEFAULT_SSH_WAIT: Duration = Duration::from_secs(120);

/// A `wait-ssh` step's settings, read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WaitSshSettings {
    /// The hosts to wait for.
    pub hosts: Hosts,
    /// How long to wait for them all.
    pub wait: Duration,
}

/// Reads a `wait-ssh` step's `with` against the blueprint's host groups, or says every problem
/// as (field below `with`, problem).
pub fn read(
    with: &BTreeMap<String, Value>,
    groups: &BTreeMap<String, Vec<String>>,
) -> Result<WaitSshSettings, Problems> {
    let mut reading = Reading::start(NAME, &SETTINGS, with);
    let (mut hosts, mut wait) = (None, Some(DEFAULT_SSH_WAIT));
    for (key, value) in with {
        match key.as_str() {
            "hosts" => hosts = reading.value(key, Hosts::read(value, groups)),
            "timeout" => wait = reading.value(key, read_wait(value)),
            _ => {}
        }
    }
    let settings = hosts
        .zip(wait)
        .map(|(hosts, wait)| WaitSshSettings { hosts, wait });
    reading.finish(settings)
}

/// The `timeout` setting: a duration, not zero.
fn read_wait(value: &Value) -> Result<Duration, String> {
    match value.as_str().map(read_duration) {
        Some(Ok(wait)) if !wait.is_zero() => Ok(wait),
        Some(Err(long @ DurationError::TooLong(_))) => Err(long.to_string()),
        _ => Err(format!(
            "`{}` is not a duration; write it like 30s or 2m",
            plain(value)
        )),
    }
}
