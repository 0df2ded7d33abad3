//! `overture import FILE`: an export's events added to this data directory's log.

use std::path::{Path, PathBuf};

use overture_embedded::Engine;

use crate::lock::EngineLock;
use crate::{json_lines, Failure};

/// `overture import`.
#[derive(clap::Args)]
pub struct ImportArgs {
    /// The export (JSON lines).
    file: PathBuf,
}

impl ImportArgs {
    /// Adds the export's events, as they were recorded.
    pub async fn run(self, data_dir: &Path) -> Result<(), Failure> {
        let file = self.file;
        let engine = Engine::open(data_dir).await?;
        // Like a rebuild, an import stores its folds over the views (and its checkpoint).
        let _lock =
            EngineLock::take(data_dir, true).map_err(|e| Failure::BadInput(e.to_string()))?;
        let imported = json_lines::import(&engine, &file).await?;
        outln!(
            "imported {} event(s) from {} ({} already in the log)",
            imported.added,
            file.display(),
            imported.already
        );
        Ok(())
    }
}
