//! `overture import FILE`: an export's events added to this data directory's log.

use std::path::{Path, PathBuf};

use overture_embedded::Engine;

use crate::lock::EngineLock;
use crate::{engine_key, json_lines, Failure};

/// `overture import`.
#[derive(clap::Args)]
pub struct ImportArgs {
    /// The export (JSON lines, ending with its signed trailer).
    file: PathBuf,
    /// Also accept exports signed by this key: a file holding an OpenSSH public key, or the key
    /// itself (`ssh-ed25519 AAAA...`, as `overture key` prints it on the engine that exported).
    /// Exports signed by this engine's own key are always accepted. Repeatable.
    #[arg(long, value_name = "KEY")]
    trust: Vec<String>,
}

impl ImportArgs {
    /// Adds the export's events, as they were recorded.
    pub async fn run(self, data_dir: &Path) -> Result<(), Failure> {
        let file = self.file;
        let trusted = self
            .trust
            .iter()
            .map(|given| engine_key::parse_trusted(given))
            .collect::<Result<Vec<_>, _>>()?;
        let own = engine_key::load_or_create(data_dir)?.public_key().clone();
        let engine = Engine::open(data_dir).await?;
        // Like a rebuild, an import stores its folds over the views (and its checkpoint).
        let _lock =
            EngineLock::take(data_dir, true).map_err(|e| Failure::BadInput(e.to_string()))?;
        let imported = json_lines::import(&engine, own, trusted, &file).await?;
        outln!(
            "imported {} event(s) from {} ({} already in the log)",
            imported.added,
            file.display(),
            imported.already
        );
        Ok(())
    }
}
