//! The command line: the global options, and the one place the backend is chosen before the
//! command runs.

use std::path::PathBuf;

use clap::Parser;

use crate::backend::{self, BackendKind};
use crate::commands::Command;
use crate::sandboxed::SandboxedCommand;
use crate::Failure;

/// Deploy applications as event-sourced workflows, and audit every step.
#[derive(Parser)]
#[command(name = "overture", version, about)]
pub struct Cli {
    /// Where the log, the queue, the read models and the sealed secrets are kept.
    #[arg(
        long,
        global = true,
        env = "OVERTURE_DATA_DIR",
        default_value = ".overture"
    )]
    pub data_dir: PathBuf,
    /// Where deployments run and are recorded: this machine (`embedded`), or the serverless
    /// form on AWS or its local emulator (`aws`, configured by the environment that
    /// `make local-aws` writes to .overture/local-aws.env).
    #[arg(
        long,
        global = true,
        env = "OVERTURE_BACKEND",
        value_enum,
        default_value = "embedded"
    )]
    pub backend: BackendKind,
    /// Go through the HTTP API of an `overture serve` at this URL, as the tenant of your cloud
    /// token (OS_TOKEN or --token-file): status, list, events, logs, grants, tenants, services,
    /// graph, cancel and redrive; the server's tenant boundary applies. Given before the command
    /// (`overture --server URL status ID`), apart from `cloud fault`'s own `--server NAME`.
    #[arg(long, env = "OVERTURE_SERVER", value_name = "URL")]
    pub server: Option<String>,
    /// With --server: a file holding your cloud token (otherwise the OS_TOKEN variable).
    #[arg(long = "token-file", global = true, value_name = "FILE")]
    pub token_files: Vec<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// The program to run inside a sandbox, if that is the command; otherwise the command line.
    pub fn sandboxed(self) -> Result<SandboxedCommand, Box<Self>> {
        match self.command {
            Command::Sandboxed(command) => Ok(command),
            command => Err(Box::new(Self { command, ..self })),
        }
    }

    /// Whether the command runs on one thread: an embedded `deploy`, or `overture engine`. A
    /// drive hands each attempt to a task of its own: on a pool of workers that task waits for
    /// another thread to wake, on every step of a chain, while one thread runs it as soon as the
    /// drive awaits (a chain of 1,000 noop steps: 0.45 → 0.43 ms per step; 34 sandboxed script
    /// steps: no change). An engine serving `deploy` processes spent its time switching between
    /// its workers (200 processes of 5 steps, 16 at once: 2,093 → 2,215 steps per second). A
    /// `deploy` handing its deployment to an engine only waits on a socket. The AWS backend's
    /// log writer needs a pool of workers.
    pub fn on_one_thread(&self) -> bool {
        matches!(self.command, Command::Deploy(_) | Command::Engine(_))
            && self.server.as_deref().is_none_or(str::is_empty)
            && self.backend == BackendKind::Embedded
    }
}

/// Chooses the backend, refuses what it does not carry out, and runs the command.
pub async fn run(cli: Cli) -> Result<(), Failure> {
    let backend = backend::choose(&cli)?;
    if let Some(command) = cli.command.only_embedded() {
        backend.only_embedded(command)?;
    }
    cli.command.run(backend.as_ref(), &cli.data_dir).await
}
