//! The `noop` kind: a step that does nothing and succeeds, to join or order other steps.
//!
//! - Settings: none; any `with` setting is refused ("unknown setting for a `noop` step; it
//!   takes none").
//! - Other half: none. Nothing runs, so the runner has no file for it: `run_attempt` in
//!   `functions/runner/src/attempt.rs` records its start and success together.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{Problems, Reading, Setting};

/// The name a blueprint's `run:` gives the kind.
pub const NAME: &str = "noop";

/// The `with` settings it takes: none.
pub(crate) const SETTINGS: [Setting; 0] = [];

/// Reads a `noop` step's `with`, which must be empty.
pub(crate) fn read(with: &BTreeMap<String, Value>) -> Result<(), Problems> {
    Reading::start(NAME, &SETTINGS, with).finish(Some(()))
}
