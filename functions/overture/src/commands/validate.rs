//! `overture validate FILE`: a blueprint checked without running anything.

use std::path::PathBuf;

use crate::input::read_blueprint;
use crate::Failure;

/// `overture validate`.
#[derive(clap::Args)]
pub struct ValidateArgs {
    /// The blueprint file (YAML).
    file: PathBuf,
}

impl ValidateArgs {
    /// Checks the blueprint.
    pub fn run(self) -> Result<(), Failure> {
        let file = self.file;
        let (_, parsed) = read_blueprint(&file)?;
        outln!(
            "{}: valid blueprint `{}` with {} step(s)",
            file.display(),
            parsed.snapshot.name,
            parsed.snapshot.steps.len()
        );
        Ok(())
    }
}
