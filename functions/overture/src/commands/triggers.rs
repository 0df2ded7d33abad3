//! `overture triggers log` and `overture triggers publish`: what triggers decided, and the
//! trigger file of the serverless form.

use std::path::PathBuf;

use clap::Subcommand;

use crate::backend::Backend;
use crate::Failure;

/// `overture triggers ...`
#[derive(Debug, Subcommand)]
pub enum TriggersCommand {
    /// Every trigger decision, oldest first: deployed, duplicate, not matched, refused, and why.
    Log {
        #[arg(long)]
        json: bool,
    },
    /// With --backend aws: check a trigger file and the blueprints it deploys, and store them
    /// for the triggers function, replacing the file published before.
    Publish {
        /// The trigger file (YAML); its `deploy` paths are relative to it.
        file: PathBuf,
    },
}

impl TriggersCommand {
    /// Runs the subcommand through the backend chosen.
    pub async fn run(self, backend: &dyn Backend) -> Result<(), Failure> {
        match self {
            TriggersCommand::Log { json } => backend.trigger_log(json).await,
            TriggersCommand::Publish { file } => backend.publish_triggers(&file).await,
        }
    }
}
