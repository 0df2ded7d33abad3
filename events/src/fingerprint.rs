//! The fingerprint of a step attempt's inputs, as `StepStarted` records it.
//!
//! Each part names one input (`settings`, `files.infra/main.tf`, `params.region`,
//! `inputs.build.url`, `services.db`, `secrets.api_key`, ...) and holds a digest of it, so that
//! two fingerprints can say which input differs, not only that one does. How the parts are
//! computed is a rule, in `overture-domain`'s `fingerprint` module; this is the recorded shape.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// What a step attempt ran with, one digest per named input, and one over them all.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputFingerprint {
    /// SHA-256 over every part (`NAME=DIGEST\n`, by name), lowercase hex.
    pub hash: String,
    /// Each input's digest, by the input's name.
    pub parts: BTreeMap<String, String>,
}
