//! `overture export`: the log as JSON lines, ending with the heads of its chains signed with
//! the engine's key (see [`crate::json_lines`]).

use std::path::Path;

use overture_embedded::Engine;

use crate::{engine_key, json_lines, Failure};

/// `overture export`.
#[derive(clap::Args)]
pub struct ExportArgs {
    /// Only this tenant's deployments.
    #[arg(long)]
    tenant: Option<String>,
    /// Only events after this position (the last line of an earlier export has it).
    #[arg(long, value_name = "POSITION", default_value_t = 0)]
    since: u64,
}

impl ExportArgs {
    /// Writes the log on stdout.
    pub async fn run(self, data_dir: &Path) -> Result<(), Failure> {
        let engine = Engine::open(data_dir).await?;
        let key = engine_key::load_or_create(data_dir)?;
        json_lines::export(&engine.log, &key, self.tenant.as_deref(), self.since).await?;
        Ok(())
    }
}
