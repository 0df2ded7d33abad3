//! The `noop` kind: a step that does nothing and succeeds, to join or order other steps.

use super::Setting;

/// The name a blueprint's `run:` gives the kind.
pub const NAME: &str = "noop";

/// The `with` settings it takes: none.
pub(crate) const SETTINGS: [Setting; 0] = [];
