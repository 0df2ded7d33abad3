//! `overture engine`: this data directory served to every `overture deploy` on it (see
//! [`crate::handover`]).

use std::path::Path;

use crate::handover::host;
use crate::Failure;

/// `overture engine`'s options.
#[derive(clap::Args, Debug)]
pub struct EngineArgs {
    /// How many steps may run at once, across every deployment handed over.
    #[arg(long, default_value_t = 64)]
    pub parallelism: usize,
}

impl EngineArgs {
    /// Serves `data_dir` until SIGINT or SIGTERM (see [`host::run`]).
    pub async fn run(self, data_dir: &Path) -> Result<(), Failure> {
        host::run(data_dir, self.parallelism).await
    }
}
