//! `overture key`: the engine's public key, which signs its exports.

use std::path::Path;

use crate::{engine_key, Failure};

/// `overture key`.
#[derive(clap::Args)]
pub struct KeyArgs {}

impl KeyArgs {
    /// Prints the public key (OpenSSH form) and its fingerprint; makes the key on first use.
    pub async fn run(self, data_dir: &Path) -> Result<(), Failure> {
        let key = engine_key::load_or_create(data_dir)?;
        let (openssh, fingerprint) = engine_key::describe(key.public_key());
        outln!("{openssh}");
        outln!("{fingerprint}");
        Ok(())
    }
}
