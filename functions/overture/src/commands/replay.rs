//! `overture replay [--check]`: every read model rebuilt from the log, or compared with it.

use std::path::Path;

use anyhow::Context;
use overture_embedded::Engine;

use crate::backend::Backend;
use crate::lock::EngineLock;
use crate::output::checked;
use crate::Failure;

/// `overture replay`.
#[derive(clap::Args)]
pub struct ReplayArgs {
    /// Only compare a fresh fold of the log with the stored read models; exit 1 on a difference.
    #[arg(long)]
    pub check: bool,
}

impl ReplayArgs {
    /// Checks the read models through the backend, or rebuilds them on the data directory.
    pub async fn run(self, backend: &dyn Backend, data_dir: &Path) -> Result<(), Failure> {
        if self.check {
            return checked(&backend.check_read_models().await?);
        }
        let engine = Engine::open(data_dir).await?;
        // A rebuild clears the views and stores its own folds over them: a process
        // deploying meanwhile would find its view gone or behind its stream.
        let _lock =
            EngineLock::take(data_dir, true).map_err(|e| Failure::BadInput(e.to_string()))?;
        // Read through a handle of its own that decodes only what the views need.
        let changes = overture_infra::sqlite::read_models::LogChanges::new(
            overture_infra::sqlite::Database::open(data_dir.join("overture.db"))
                .await
                .context("opening the log to read")?,
        );
        let folded =
            overture_projector::rebuild(&changes, &engine.read_models, overture_projector::BATCH)
                .await
                .map_err(anyhow::Error::from)?;
        outln!("rebuilt the read models from {folded} events");
        Ok(())
    }
}
