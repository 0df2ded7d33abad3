//! `overture trigger send EVENT.json`: an event delivered to the triggers (see
//! [`crate::triggers`]).

use std::path::PathBuf;

use clap::{Args, Subcommand};

use crate::backend::Backend;
use crate::Failure;

/// `overture trigger ...`
#[derive(Debug, Subcommand)]
pub enum TriggerCommand {
    /// Deliver one event (CloudEvents 1.0 or EventBridge JSON) to a trigger file: every matching
    /// trigger deploys, once per event however often it is sent; chains are followed. With
    /// --backend aws, the event is put on the trigger events queue, for the published file.
    Send(SendArgs),
}

/// `overture trigger send`.
#[derive(Debug, Args)]
pub struct SendArgs {
    /// The event, as a JSON file (`-` for standard input).
    pub event: PathBuf,
    /// The trigger file (YAML); not with --backend aws, whose file is the published one.
    #[arg(long)]
    pub triggers: Option<PathBuf>,
    /// How many steps may run at once.
    #[arg(long, default_value_t = 8)]
    pub parallelism: usize,
    /// Print the started deployments' final statuses as a JSON array.
    #[arg(long)]
    pub json: bool,
}

impl TriggerCommand {
    /// Delivers the event through the backend chosen.
    pub async fn run(self, backend: &dyn Backend) -> Result<(), Failure> {
        match self {
            TriggerCommand::Send(args) => backend.send_event(args).await,
        }
    }
}
