//! The `overture` program: deploy blueprints with the embedded engine and read what happened.
//!
//! - `main.rs`: parses the command line, sets up logging and the runtime, and turns how the
//!   command ended into the exit code (0 success, 1 the deployment failed or a check found
//!   differences, 2 bad input, 3 the engine itself failed).
//! - [`app`]: the command line ([`app::Cli`]): the global options, the backend chosen once.
//! - [`commands`]: one file per command, each with its arguments and its `run`.
//! - [`backend`]: where deployments run and are recorded, behind one trait: the embedded engine
//!   ([`overture_embedded`]), `--backend aws`, or `--server URL`.
//! - [`sandboxed`]: the hidden programs that run inside a step's sandbox or task.
//! - [`handover`]: `overture engine`, one engine serving a data directory to every `deploy`.
//! - [`failure`], [`output`], [`input`]: how commands end, print, and read what users give.
//! - [`progress`], [`render`], [`timeline`], [`history`]: what is shown, live and afterwards.
//! - [`lock`], [`bundle`], [`token`], [`triggers`], [`json_lines`]: the data directory's locks,
//!   a blueprint's files, the user's cloud token, trigger files, the log as JSON lines.
//!
//! The reading commands (`status`, `list`, `tenants`, `services`, `events`, `grants`, `graph ID`,
//! and `logs` but on the embedded backend) go through the query port
//! ([`overture_kit::query::QueryDeployments`]), so one code path prints for every backend and
//! for the HTTP API.

/// `print!` for the program's results on stdout; see [`output::write_out`].
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::write_out(format_args!($($arg)*))
    };
}

/// `println!` for the program's results on stdout; see [`output::write_out`].
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::output::write_out(format_args!("{}\n", format_args!($($arg)*)))
    };
}

mod app;
mod backend;
mod bundle;
mod commands;
mod failure;
mod handover;
mod history;
mod input;
mod engine_key;
mod json_lines;
mod lock;
#[cfg(test)]
mod man_pages;
mod output;
mod progress;
mod render;
mod sandboxed;
mod timeline;
mod token;
mod triggers;

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::fmt::format::FmtSpan;

pub(crate) use failure::Failure;
/// The embedded engine, by the name the modules that show its progress know it by.
pub(crate) use overture_embedded as engine;

/// mimalloc instead of the C library's allocator: rebuilding the read models and driving
/// deployments allocate many small, short-lived values (decoded events, views, SQL rows), and
/// the C library's allocator spent a sixth of a rebuild's CPU in `malloc` and `free`.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // At `OVERTURE_LOG=info` each handler's run (submit, orchestrate, run_attempt, project,
    // triggers, api) prints one line as it ends, with what it worked on and how long it took.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("OVERTURE_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .with_span_events(FmtSpan::CLOSE)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
    let cli = app::Cli::parse();
    // Their exit codes are their step kinds', not the ones below, and they need no data
    // directory.
    let cli = match cli.sandboxed() {
        Ok(command) => return command.main(),
        Err(cli) => *cli,
    };
    let runtime = if cli.on_one_thread() {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Runtime::new()
    };
    let runtime = match runtime {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the runtime: {error}");
            return ExitCode::from(3);
        }
    };
    match runtime.block_on(app::run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Unsuccessful(message)) => {
            if !message.is_empty() {
                eprintln!("{message}");
            }
            ExitCode::from(1)
        }
        Err(Failure::BadInput(message)) => {
            eprintln!("error: {message}");
            ExitCode::from(2)
        }
        Err(Failure::Engine(error)) => {
            eprintln!("error: {error:#}");
            ExitCode::from(3)
        }
    }
}
