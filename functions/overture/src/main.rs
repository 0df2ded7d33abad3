//! The `overture` program: deploy blueprints with the embedded engine and read what happened.
//!
//! - `main.rs`: the commands and their exit codes (0 success, 1 the deployment failed or a check
//!   found differences, 2 bad input, 3 the engine itself failed).
//! - [`engine`]: every function wired in one process on one data directory.
//! - [`progress`]: live progress while a deployment runs.
//! - [`render`]: status and lists for people, JSON for scripts.
//! - [`timeline`]: `overture events`, the audit trail as a timeline, and its filters.
//! - [`lock`]: the data directory's engine lock.
//! - [`logs`]: `overture logs`, an attempt's output.
//! - [`teardown`]: `overture destroy`.
//! - [`cancel`]: `overture cancel`, and Ctrl-C on `overture deploy`.
//! - [`redrive`]: `overture redrive` and `overture redeploy`, a recorded deployment run again.
//! - [`history`]: `status --at` and `graph ID [--at]`, folded from the log alone.
//! - [`bundle`]: reading the files a blueprint's steps take from its folder.
//! - [`token`]: the user's cloud token, read and checked.
//! - [`provision`]: `overture provision`, which a `servers` step runs inside its sandbox.
//! - [`first_contact`]: `overture host-keys`, which a `wait-ssh` step runs inside its sandbox
//!   to read from the cloud the host keys of servers it contacts first.
//! - [`step_run`]: `overture step-run`, the entrypoint of a step's Fargate task on AWS (exit
//!   code: the step command's, or 125 when the entrypoint itself failed).
//! - [`cloud`]: `overture cloud`, the local cloud for development and tests.
//! - [`serve`]: `overture serve`, the HTTP API: each tenant sees only its own deployments.
//! - [`shared`]: `overture engine`, one engine serving a data directory to every `deploy` on it.
//! - [`aws`]: `--backend aws`, the same commands on the serverless form (DynamoDB, the submit
//!   function).
//! - [`client`]: `--server URL`, the commands through the HTTP API of an `overture serve`.
//!
//! The reading commands (`status`, `list`, `tenants`, `services`, `events`, `grants`, `graph ID`, and `logs`
//! but on the embedded backend) go through the query port ([`QueryDeployments`]), so one code
//! path prints for every backend and for the HTTP API.

/// `print!` for the program's results on stdout; see [`write_out`].
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::write_out(format_args!($($arg)*))
    };
}

/// `println!` for the program's results on stdout; see [`write_out`].
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::write_out(format_args!("{}\n", format_args!($($arg)*)))
    };
}

mod aws;
mod bundle;
mod cancel;
mod client;
mod cloud;
mod engine;
mod first_contact;
mod history;
mod lock;
mod logs;
mod portable;
mod progress;
mod provision;
mod redrive;
mod render;
mod sandboxed;
mod serve;
mod shared;
mod step_run;
mod teardown;
mod timeline;
mod together;
mod token;
mod triggers;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use overture_domain::blueprint;
use overture_domain::deployment::{Outcome, Phase};
use overture_domain::graph::{self, GraphFormat};
use overture_domain::history::Moment;
use overture_domain::projection::DeploymentStatus;
use overture_domain::secret::{SecretString, SecretValues};
use overture_domain::text::escaped;
use overture_events::DeploymentId;
use overture_kit::query::{AttemptLog, DeploymentFilter, QueryDeployments, QueryError};
use overture_orchestrator::Since;
use overture_submit::{Submission, SubmitError};

use crate::engine::{Engine, Unwatched};
use crate::lock::EngineLock;
use crate::progress::Progress;

/// mimalloc instead of the C library's allocator: rebuilding the read models and driving
/// deployments allocate many small, short-lived values (decoded events, views, SQL rows), and
/// the C library's allocator spent a sixth of a rebuild's CPU in `malloc` and `free`.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Deploy applications as event-sourced workflows, and audit every step.
#[derive(Parser)]
#[command(name = "overture", version, about)]
struct Cli {
    /// Where the log, the queue, the read models and the sealed secrets are kept.
    #[arg(
        long,
        global = true,
        env = "OVERTURE_DATA_DIR",
        default_value = ".overture"
    )]
    data_dir: PathBuf,
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
    backend: Backend,
    /// Go through the HTTP API of an `overture serve` at this URL, as the tenant of your cloud
    /// token (OS_TOKEN or --token-file): status, list, events, logs, grants, tenants, services,
    /// graph, cancel and redrive; the server's tenant boundary applies. Given before the command
    /// (`overture --server URL status ID`), apart from `cloud fault`'s own `--server NAME`.
    #[arg(long, env = "OVERTURE_SERVER", value_name = "URL")]
    server: Option<String>,
    /// With --server: a file holding your cloud token (otherwise the OS_TOKEN variable).
    #[arg(long = "token-file", global = true, value_name = "FILE")]
    token_files: Vec<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

/// Where deployments run and are recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Backend {
    /// One process on this machine, on the data directory.
    Embedded,
    /// The serverless form: Lambda functions on DynamoDB, SQS and KMS.
    Aws,
    /// The HTTP API of an `overture serve` (`--server URL`), as one tenant.
    #[value(skip)]
    Server,
}

/// The server given with `--server`, with the caller's token: set once, before any command
/// runs, so that the query port of every read command is chosen in one place ([`queries`]).
static SERVER: std::sync::OnceLock<client::Remote> = std::sync::OnceLock::new();

#[derive(Subcommand)]
enum Command {
    /// Record a deployment of a blueprint and drive it to its end, showing progress.
    Deploy {
        /// The blueprint file (YAML); several deploy each, driven by this one process.
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
        /// The tenant deploying; with a cloud token, the token's project id is the tenant.
        #[arg(long, env = "OVERTURE_TENANT")]
        tenant: Option<String>,
        #[command(flatten)]
        token: token::TokenArgs,
        /// A parameter value, as NAME=VALUE (repeatable).
        #[arg(long = "param", value_name = "NAME=VALUE")]
        params: Vec<String>,
        /// A secret, as NAME=ENV_VAR: its value is read from that environment variable.
        #[arg(long = "secret", value_name = "NAME=ENV_VAR")]
        secrets: Vec<String>,
        /// How many steps of a deployment may run at once.
        #[arg(long, default_value_t = 8)]
        parallelism: usize,
        /// With several blueprints: how many deployments may run at once.
        #[arg(long, default_value_t = 16)]
        at_once: usize,
        /// Print the final status as JSON on stdout (an array of them with several blueprints).
        #[arg(long)]
        json: bool,
    },
    /// Show a deployment's status.
    Status {
        /// The deployment id.
        id: String,
        #[arg(long)]
        json: bool,
        /// Show it as it stood then, folded from the log alone: after the event at this revision
        /// (0-based), or after every event recorded at or before this RFC 3339 time.
        #[arg(long, value_name = "REVISION|TIME")]
        at: Option<Moment>,
    },
    /// List deployments, newest first.
    List {
        #[arg(long)]
        tenant: Option<String>,
        /// Only deployments with this status.
        #[arg(long, value_enum)]
        status: Option<StatusFilter>,
        #[arg(long)]
        json: bool,
    },
    /// Summarise deployments per tenant.
    Tenants {
        #[arg(long)]
        json: bool,
    },
    /// List the service registry: per tenant, each service's registered instances.
    Services {
        /// Only this tenant's services.
        #[arg(long)]
        tenant: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Show a deployment's audit trail as a timeline: when, who, what and why, event by event.
    Events {
        /// The deployment id.
        id: String,
        /// Only the events of this step.
        #[arg(long)]
        step: Option<String>,
        /// Only events of this type, such as StepAttemptFailed (repeatable, or comma-separated;
        /// case does not matter).
        #[arg(long = "type", value_name = "TYPE")]
        types: Vec<String>,
        /// Only events at or after this revision, or this time (RFC 3339, or as the timeline
        /// shows it, in UTC).
        #[arg(long, value_name = "REVISION|TIME")]
        since: Option<String>,
        /// One JSON envelope per line (the events the filters keep).
        #[arg(long)]
        json: bool,
    },
    /// Write the log as JSON lines, one event per line with its position, oldest first.
    Export {
        /// Only this tenant's deployments.
        #[arg(long)]
        tenant: Option<String>,
        /// Only events after this position (the last line of an earlier export has it).
        #[arg(long, value_name = "POSITION", default_value_t = 0)]
        since: u64,
    },
    /// Add the events of an export to this data directory's log, as they were recorded.
    Import {
        /// The export (JSON lines).
        file: PathBuf,
    },
    /// Check a blueprint without running anything.
    Validate {
        /// The blueprint file (YAML).
        file: PathBuf,
    },
    /// Draw a blueprint's steps, or a deployment's with their states.
    Graph {
        /// A blueprint file or a deployment id.
        target: String,
        #[arg(long, value_enum, default_value = "mermaid")]
        format: Format,
        /// For a deployment: its steps' states as they stood then (a revision, 0-based, or an
        /// RFC 3339 time), folded from the log alone.
        #[arg(long, value_name = "REVISION|TIME")]
        at: Option<Moment>,
    },
    /// Rebuild every read model from the log.
    Replay {
        /// Only compare a fresh fold of the log with the stored read models; exit 1 on a difference.
        #[arg(long)]
        check: bool,
    },
    /// Show the output of a step's attempt (the last one unless --attempt says).
    Logs {
        /// The deployment id.
        id: String,
        /// The step.
        step: String,
        /// Which attempt (1-based).
        #[arg(long, conflicts_with = "destroy")]
        attempt: Option<u32>,
        /// The output of `overture destroy` for this step instead.
        #[arg(long)]
        destroy: bool,
        /// Keep printing what the attempt writes until it ends.
        #[arg(long, short)]
        follow: bool,
    },
    /// Tear a finished deployment down: destroy what its Terraform steps made, with their state.
    Destroy {
        /// The deployment id.
        id: String,
        /// A secret its Terraform variables use, as NAME=ENV_VAR (repeatable): the deployment's
        /// sealed secrets were purged when it ended.
        #[arg(long = "secret", value_name = "NAME=ENV_VAR")]
        secrets: Vec<String>,
        /// Print the final status as JSON on stdout.
        #[arg(long)]
        json: bool,
        /// The user's token: with it, the deployments of its project that watch the services
        /// this one deregisters run their watching steps again now, in this process.
        #[command(flatten)]
        token: token::TokenArgs,
    },
    /// Cancel a running deployment: kill its running steps, start no other, close its bastion,
    /// purge its secrets. Works from any process, and also when no engine runs it any more.
    Cancel {
        /// The deployment id.
        id: String,
        /// Why, recorded in `DeploymentCancelled`.
        #[arg(long)]
        reason: Option<String>,
        #[command(flatten)]
        token: token::TokenArgs,
        /// Print the final status as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Deliver an event to a trigger file (see `overture trigger send --help`).
    #[command(subcommand)]
    Trigger(triggers::TriggerCommand),
    /// What triggers decided, and why (see `overture triggers log --help`).
    #[command(subcommand)]
    Triggers(triggers::TriggersCommand),
    /// Carry a failed deployment on from its failed and abandoned steps, in the same deployment:
    /// steps that succeeded are not run again and their outputs are reused.
    Redrive {
        /// The failed deployment's id.
        id: String,
        #[command(flatten)]
        again: AgainArgs,
    },
    /// Start a new deployment of a recorded deployment's blueprint and parameters.
    Redeploy {
        /// The recorded deployment's id.
        id: String,
        #[command(flatten)]
        again: AgainArgs,
    },
    /// Carry on every unfinished deployment after a crash. A deployment made with a cloud token
    /// needs a token of its project again: its seal opens with nothing else.
    Resume {
        /// How many steps may run at once.
        #[arg(long, default_value_t = 8)]
        parallelism: usize,
        #[command(flatten)]
        token: token::TokenArgs,
    },
    /// Carry out a `servers` step's plan: run by the step inside its sandbox, not by users.
    #[command(hide = true)]
    Provision {
        /// The plan (JSON).
        #[arg(long)]
        spec: PathBuf,
    },
    /// Read the SSH host keys of the hosts a `wait-ssh` step contacts first from the cloud's
    /// consoles: run by the step inside its sandbox, not by users.
    #[command(hide = true)]
    HostKeys {
        /// The hosts (`host<TAB>port` a line).
        #[arg(long)]
        hosts: PathBuf,
        /// How long, in all, consoles still booting are waited for, in milliseconds.
        #[arg(long)]
        wait_ms: u64,
    },
    /// Run a step attempt's sealed job: the entrypoint of a step's Fargate task on AWS, started
    /// by the runner, not by users. Exits with the command's code, 125 if it could not run it.
    #[command(hide = true)]
    StepRun(step_run::StepRunArgs),
    /// Show the temporary grants of access deployments held: bastion rules, forwarding,
    /// deployment keys, sealed tokens; when each was opened and closed.
    Grants {
        /// Only grants still open.
        #[arg(long)]
        open: bool,
        /// Only this tenant's deployments.
        #[arg(long)]
        tenant: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Runs the local cloud (development and tests).
    #[command(subcommand)]
    Cloud(cloud::CloudCommand),
    /// Serve the HTTP API: deployments started, followed and cancelled per tenant, each caller
    /// authenticated by its cloud token.
    Serve(serve::ServeArgs),
    /// Serve this data directory to `overture deploy`: each one on it hands its deployment to
    /// this engine and follows it from here, and concurrent deployments share its commits.
    Engine(shared::host::EngineArgs),
}

/// What `redrive` and `redeploy` are given again: the deployment's secrets were purged when it
/// ended, and the token it acted with is not kept.
#[derive(clap::Args)]
struct AgainArgs {
    #[command(flatten)]
    token: token::TokenArgs,
    /// A secret, as NAME=ENV_VAR: its value is read from that environment variable.
    #[arg(long = "secret", value_name = "NAME=ENV_VAR")]
    secrets: Vec<String>,
    /// How many steps may run at once.
    #[arg(long, default_value_t = 8)]
    parallelism: usize,
    /// Print the final status as JSON on stdout.
    #[arg(long)]
    json: bool,
}

impl AgainArgs {
    fn for_deployment<'a>(&'a self, id: &'a str) -> redrive::Again<'a> {
        redrive::Again {
            id,
            token: &self.token,
            secrets: &self.secrets,
            parallelism: self.parallelism,
            json: self.json,
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum StatusFilter {
    Running,
    Succeeded,
    Failed,
    Cancelled,
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    Mermaid,
    Dot,
}

/// How a command ended, when not in success.
#[derive(Debug, thiserror::Error)]
enum Failure {
    /// The user's input is wrong; nothing was recorded.
    #[error("{0}")]
    BadInput(String),
    /// The deployment failed, or a check found a difference (already reported).
    #[error("{0}")]
    Unsuccessful(String),
    /// The engine itself failed.
    #[error(transparent)]
    Engine(#[from] anyhow::Error),
}

impl From<QueryError> for Failure {
    fn from(error: QueryError) -> Self {
        match error {
            QueryError::NotAvailable(message) => Failure::BadInput(message.into()),
            QueryError::Refused(message) => Failure::BadInput(message),
            other => Failure::Engine(other.into()),
        }
    }
}

impl From<engine::EngineError> for Failure {
    fn from(error: engine::EngineError) -> Self {
        Failure::Engine(error.into())
    }
}

/// Writes to stdout. A reader that has gone away (`overture events ID | head -1`) ends the
/// program as it ends every Unix tool, by SIGPIPE, quietly; Rust ignores SIGPIPE, so `print!`
/// would panic instead.
fn write_out(text: std::fmt::Arguments<'_>) {
    use std::io::Write;
    if let Err(error) = std::io::stdout().lock().write_fmt(text) {
        end_on_write_error(&error);
    }
}

/// Ends the program after stdout could not be written: by SIGPIPE when its reader went away.
fn end_on_write_error(error: &std::io::Error) -> ! {
    if error.kind() == std::io::ErrorKind::BrokenPipe {
        // SAFETY: restores one signal's default action and raises it; no memory is involved.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
            libc::raise(libc::SIGPIPE);
        }
    }
    eprintln!("error: cannot write to standard output: {error}");
    std::process::exit(3)
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("OVERTURE_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    // Its exit codes are the `servers` step's, not the ones below, and it needs no data directory.
    if let Command::Provision { spec } = &cli.command {
        return provision::main(spec);
    }
    if let Command::HostKeys { hosts, wait_ms } = &cli.command {
        return first_contact::main(hosts, std::time::Duration::from_millis(*wait_ms));
    }
    // Likewise: its exit code is the step command's.
    if let Command::StepRun(args) = cli.command {
        return step_run::main(args);
    }
    let runtime = if on_one_thread(&cli) {
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
    match runtime.block_on(run(cli)) {
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

/// Whether the command runs on one thread: an embedded `deploy`, or `overture engine`. A drive
/// hands each attempt to a task of its own: on a pool of workers that task waits for another
/// thread to wake, on every step of a chain, while one thread runs it as soon as the drive
/// awaits (a chain of 1,000 noop steps: 0.45 → 0.43 ms per step; 34 sandboxed script steps: no
/// change). An engine serving `deploy` processes spent its time switching between its workers
/// (200 processes of 5 steps, 16 at once: 2,093 → 2,215 steps per second). A `deploy` handing
/// its deployment to an engine only waits on a socket. The AWS backend's log writer needs a
/// pool of workers.
fn on_one_thread(cli: &Cli) -> bool {
    matches!(cli.command, Command::Deploy { .. } | Command::Engine(_))
        && cli.server.as_deref().is_none_or(str::is_empty)
        && cli.backend == Backend::Embedded
}

/// The query port of the backend chosen; embedded, the read models first fold what is new on
/// the log.
async fn queries(backend: Backend, data_dir: &Path) -> Result<Box<dyn QueryDeployments>, Failure> {
    match backend {
        Backend::Embedded => {
            let engine = Engine::open(data_dir).await?;
            engine.project().await?;
            Ok(Box::new(engine.queries()))
        }
        Backend::Aws => Ok(Box::new(aws::Aws::from_env().await?.queries)),
        Backend::Server => Ok(Box::new(server()?.clone())),
    }
}

/// The server of `--server`.
fn server() -> Result<&'static client::Remote, Failure> {
    SERVER
        .get()
        .ok_or_else(|| Failure::Engine(anyhow::anyhow!("--server was not set up")))
}

/// Refuses a command the aws backend, or the HTTP API, does not carry out.
fn embedded_only(backend: Backend, command: &str) -> Result<(), Failure> {
    match backend {
        Backend::Embedded => Ok(()),
        Backend::Aws => Err(Failure::BadInput(format!(
            "`overture {command}` works only with the embedded backend; leave out --backend aws \
             (and unset OVERTURE_BACKEND)"
        ))),
        Backend::Server => Err(Failure::BadInput(format!(
            "`overture {command}` does not go through the HTTP API; leave out --server (and \
             unset OVERTURE_SERVER) to run it on this machine's data directory"
        ))),
    }
}

/// With `--server`: checks what goes with it, and sets the server up ([`SERVER`]).
fn through_server(cli: &Cli, url: &str) -> Result<Backend, Failure> {
    if cli.backend == Backend::Aws {
        return Err(Failure::BadInput(
            "--server goes through an `overture serve`, which runs the embedded engine; leave \
             out --backend aws (or --server)"
                .into(),
        ));
    }
    let refused = match &cli.command {
        Command::Status { .. }
        | Command::List { .. }
        | Command::Events { .. }
        | Command::Grants { .. }
        | Command::Tenants { .. }
        | Command::Graph { .. }
        | Command::Validate { .. }
        | Command::Services { .. }
        | Command::Redrive { .. } => None,
        Command::Logs { follow: true, .. } => Some("logs --follow"),
        Command::Logs { .. } => None,
        Command::Cancel {
            reason: Some(_), ..
        } => Some("cancel --reason"),
        Command::Cancel { .. } => None,
        Command::Deploy { .. } => Some("deploy"),
        Command::Export { .. } => Some("export"),
        Command::Import { .. } => Some("import"),
        Command::Replay { .. } => Some("replay"),
        Command::Destroy { .. } => Some("destroy"),
        Command::Redeploy { .. } => Some("redeploy"),
        Command::Resume { .. } => Some("resume"),
        Command::Provision { .. } => Some("provision"),
        Command::HostKeys { .. } => Some("host-keys"),
        Command::StepRun(_) => Some("step-run"),
        Command::Cloud(_) => Some("cloud"),
        Command::Serve(_) => Some("serve"),
        Command::Engine(_) => Some("engine"),
        Command::Trigger(_) => Some("trigger send"),
        Command::Triggers(_) => Some("triggers log"),
    };
    if let Some(command) = refused {
        embedded_only(Backend::Server, command)?;
    }
    let own = own_token_files(&cli.command).unwrap_or_default();
    let given = token::TokenArgs {
        token_files: if own.is_empty() {
            cli.token_files.clone()
        } else {
            own.to_vec()
        },
        auth_url: None,
    }
    .given()?;
    let token = match <[_; 1]>::try_from(given) {
        Ok([token]) => token,
        Err(given) if given.is_empty() => {
            return Err(Failure::BadInput(
                "--server: the API answers for your cloud token's tenant; give the token with \
                 --token-file FILE or OS_TOKEN"
                    .into(),
            ))
        }
        Err(_) => {
            return Err(Failure::BadInput(
                "--token-file: the API is called with one token; give it once".into(),
            ))
        }
    };
    let remote = client::Remote::new(url, token).map_err(Failure::BadInput)?;
    // Set once per process, here; a second call finds it set and keeps the first.
    let _ = SERVER.set(remote);
    Ok(Backend::Server)
}

/// The `--token-file`s a command takes itself (the same flag as the global one of `--server`).
fn own_token_files(command: &Command) -> Option<&[PathBuf]> {
    match command {
        Command::Deploy { token, .. }
        | Command::Destroy { token, .. }
        | Command::Cancel { token, .. }
        | Command::Resume { token, .. } => Some(&token.token_files),
        Command::Redrive { again, .. } | Command::Redeploy { again, .. } => {
            Some(&again.token.token_files)
        }
        _ => None,
    }
}

async fn run(cli: Cli) -> Result<(), Failure> {
    let backend = match cli.server.as_deref().filter(|url| !url.is_empty()) {
        Some(url) => through_server(&cli, url)?,
        None => cli.backend,
    };
    // Given before the command, or to one that takes no token, it would be silently unused.
    let unused = own_token_files(&cli.command).is_none_or(<[PathBuf]>::is_empty);
    if backend != Backend::Server && !cli.token_files.is_empty() && unused {
        return Err(Failure::BadInput(
            "--token-file: without --server, give it after a command that acts with a token \
             (deploy, destroy, cancel, redrive, redeploy, resume)"
                .into(),
        ));
    }
    let data_dir = cli.data_dir;
    let refused = match &cli.command {
        Command::Cloud(_) => Some("cloud"),
        Command::Serve(_) => Some("serve"),
        Command::Engine(_) => Some("engine"),
        Command::Destroy { .. } => Some("destroy"),
        Command::Resume { .. } => Some("resume"),
        Command::Replay { check: false } => Some("replay"),
        Command::Export { .. } => Some("export"),
        Command::Import { .. } => Some("import"),
        Command::Logs { follow: true, .. } => Some("logs --follow"),
        _ => None,
    };
    if let Some(command) = refused {
        embedded_only(backend, command)?;
    }
    match cli.command {
        Command::Cloud(command) => cloud::run(command).await,
        Command::Serve(args) => serve::run(&data_dir, args).await,
        Command::Engine(args) => shared::host::run(&data_dir, args).await,
        Command::Deploy {
            files,
            tenant,
            token,
            params,
            secrets,
            parallelism,
            at_once,
            json,
        } => {
            deploy(
                backend,
                &data_dir,
                &files,
                tenant,
                &token,
                &params,
                &secrets,
                together::Pace {
                    at_once,
                    parallelism,
                },
                json,
            )
            .await
        }
        Command::Grants { open, tenant, json } => {
            let queries = queries(backend, &data_dir).await?;
            let views = queries
                .list(&DeploymentFilter {
                    tenant,
                    status: None,
                })
                .await?;
            let grants = render::grant_rows(&views, open);
            if json {
                outln!("{}", render::grants_json(&grants));
            } else {
                out!("{}", render::grants(&grants));
            }
            Ok(())
        }
        Command::Status {
            id,
            json,
            at: Some(moment),
        } => history::status(backend, &data_dir, &id, moment, json).await,
        Command::Status { id, json, at: None } => {
            let queries = queries(backend, &data_dir).await?;
            print_status(queries.as_ref(), backend, &id, json).await?;
            Ok(())
        }
        Command::List {
            tenant,
            status,
            json,
        } => {
            let queries = queries(backend, &data_dir).await?;
            let status = status.map(|s| match s {
                StatusFilter::Running => DeploymentStatus::Running,
                StatusFilter::Succeeded => DeploymentStatus::Succeeded,
                StatusFilter::Failed => DeploymentStatus::Failed,
                StatusFilter::Cancelled => DeploymentStatus::Cancelled,
            });
            let views = queries.list(&DeploymentFilter { tenant, status }).await?;
            if json {
                outln!("{}", render::list_json(&views));
            } else {
                out!("{}", render::list(&views));
            }
            Ok(())
        }
        Command::Tenants { json } => {
            let tenants = queries(backend, &data_dir).await?.tenants().await?;
            if json {
                outln!("{}", render::json(&tenants));
            } else {
                out!("{}", render::tenants(&tenants));
            }
            Ok(())
        }
        Command::Services { tenant, json } => {
            let queries = queries(backend, &data_dir).await?;
            let tenants = match &tenant {
                Some(tenant) => vec![tenant.clone()],
                None => queries
                    .tenants()
                    .await?
                    .into_iter()
                    .map(|view| view.tenant)
                    .collect(),
            };
            let mut registry = Vec::with_capacity(tenants.len());
            for name in tenants {
                let instances = queries.service_instances(&name).await?;
                // The tenant asked for is listed whatever it holds; of all, those with some.
                if tenant.is_some() || !instances.is_empty() {
                    registry.push((name, instances));
                }
            }
            if json {
                outln!("{}", render::services_json(&registry));
            } else {
                out!("{}", render::services(&registry, tenant.as_deref()));
            }
            Ok(())
        }
        Command::Events {
            id,
            step,
            types,
            since,
            json,
        } => {
            let id = parse_id(&id)?;
            let bad = |error: timeline::FilterError| Failure::BadInput(error.to_string());
            let filter = timeline::Filter::parse(step, &types, since.as_deref()).map_err(bad)?;
            let envelopes = queries(backend, &data_dir).await?.events(id).await?;
            if envelopes.is_empty() {
                return Err(missing(backend, id));
            }
            filter.check_step(&envelopes).map_err(bad)?;
            if json {
                for envelope in envelopes.iter().filter(|e| filter.keeps(e)) {
                    outln!("{}", render::json_line(envelope));
                }
            } else {
                for line in timeline::lines(&envelopes, &filter) {
                    outln!("{line}");
                }
            }
            Ok(())
        }
        Command::Logs {
            id,
            step,
            attempt,
            destroy,
            follow,
        } => {
            if backend != Backend::Embedded {
                let queries = queries(backend, &data_dir).await?;
                return show_log(queries.as_ref(), backend, &id, &step, attempt, destroy).await;
            }
            let which = match (destroy, attempt) {
                (true, _) => logs::Which::Destroy,
                (false, Some(attempt)) => logs::Which::Attempt(attempt),
                (false, None) => logs::Which::Latest,
            };
            logs::show(&data_dir, &id, &step, which, follow).await
        }
        Command::Cancel {
            id,
            reason,
            token,
            json,
        } => match backend {
            Backend::Server => client::cancel(server()?, &id, json).await,
            Backend::Aws => aws::cancel(&id, reason, &token, json).await,
            Backend::Embedded => cancel::cancel(&data_dir, &id, reason, &token, json).await,
        },
        Command::Trigger(triggers::TriggerCommand::Send(args)) => match backend {
            Backend::Aws => triggers::send_to_aws(args).await,
            _ => triggers::send(&data_dir, args).await,
        },
        Command::Triggers(triggers::TriggersCommand::Log { json }) => match backend {
            Backend::Aws => triggers::log_on_aws(json).await,
            _ => triggers::log(&data_dir, json).await,
        },
        Command::Triggers(triggers::TriggersCommand::Publish { file }) => match backend {
            Backend::Aws => triggers::publish(&file).await,
            _ => Err(Failure::BadInput(
                "`overture triggers publish` stores a trigger file for the serverless form; give                  --backend aws (the embedded engine reads the file given with                  `trigger send --triggers FILE` or `serve --triggers FILE`)"
                    .into(),
            )),
        },
        Command::Redrive { id, again } => match backend {
            Backend::Server => client::redrive(server()?, &id, &again.secrets, again.json).await,
            Backend::Aws => redrive::redrive_on_aws(again.for_deployment(&id)).await,
            Backend::Embedded => redrive::redrive(&data_dir, again.for_deployment(&id)).await,
        },
        Command::Redeploy { id, again } => match backend {
            Backend::Aws => redrive::redeploy_on_aws(again.for_deployment(&id)).await,
            _ => redrive::redeploy(&data_dir, again.for_deployment(&id)).await,
        },
        Command::Destroy {
            id,
            secrets,
            json,
            token,
        } => teardown::destroy(&data_dir, &id, &secrets, &token, json).await,
        Command::Export { tenant, since } => {
            let engine = Engine::open(&data_dir).await?;
            portable::export(&engine.log, tenant.as_deref(), since).await?;
            Ok(())
        }
        Command::Import { file } => {
            let engine = Engine::open(&data_dir).await?;
            // Like a rebuild, an import stores its folds over the views (and its checkpoint).
            let _lock =
                EngineLock::take(&data_dir, true).map_err(|e| Failure::BadInput(e.to_string()))?;
            let imported = portable::import(&engine, &file).await?;
            outln!(
                "imported {} event(s) from {} ({} already in the log)",
                imported.added,
                file.display(),
                imported.already
            );
            Ok(())
        }
        Command::Validate { file } => {
            let (_, parsed) = read_blueprint(&file)?;
            outln!(
                "{}: valid blueprint `{}` with {} step(s)",
                file.display(),
                parsed.snapshot.name,
                parsed.snapshot.steps.len()
            );
            Ok(())
        }
        Command::Graph { target, format, at } => {
            let format = match format {
                Format::Mermaid => GraphFormat::Mermaid,
                Format::Dot => GraphFormat::Dot,
            };
            let path = Path::new(&target);
            if !path.exists() {
                return history::graph(backend, &data_dir, &target, at, format).await;
            }
            if at.is_some() {
                return Err(Failure::BadInput(format!(
                    "--at: `{}` is a blueprint file, which has no history; give a deployment id \
                     instead (see `overture list`)",
                    shown(path)
                )));
            }
            let (_, parsed) = read_blueprint(path)?;
            out!(
                "{}",
                graph::render(&parsed.snapshot.steps, format, |_| None)
            );
            Ok(())
        }
        Command::Replay { check } => {
            if backend == Backend::Aws {
                let differences = aws::check(&aws::Aws::from_env().await?.queries).await?;
                return checked(&differences);
            }
            let engine = Engine::open(&data_dir).await?;
            if check {
                let differences = overture_projector::check(
                    &engine.log,
                    &engine.read_models,
                    overture_projector::BATCH,
                )
                .await
                .map_err(anyhow::Error::from)?;
                checked(&differences)
            } else {
                // A rebuild clears the views and stores its own folds over them: a process
                // deploying meanwhile would find its view gone or behind its stream.
                let _lock = EngineLock::take(&data_dir, true)
                    .map_err(|e| Failure::BadInput(e.to_string()))?;
                // Read through a handle of its own that decodes only what the views need.
                let changes = overture_infra::sqlite::read_models::LogChanges::new(
                    overture_infra::sqlite::Database::open(data_dir.join("overture.db"))
                        .await
                        .context("opening the log to read")?,
                );
                let folded = overture_projector::rebuild(
                    &changes,
                    &engine.read_models,
                    overture_projector::BATCH,
                )
                .await
                .map_err(anyhow::Error::from)?;
                outln!("rebuilt the read models from {folded} events");
                Ok(())
            }
        }
        Command::Provision { .. } => Err(Failure::BadInput(
            "`overture provision` runs only inside a `servers` step's sandbox".into(),
        )),
        Command::HostKeys { .. } => Err(Failure::BadInput(
            "`overture host-keys` runs only inside a `wait-ssh` step's sandbox".into(),
        )),
        Command::StepRun(_) => Err(Failure::BadInput(
            "`overture step-run` runs only as a step task's entrypoint".into(),
        )),
        Command::Resume { parallelism, token } => {
            let tokens = token.check().await?;
            let engine = Engine::open(&data_dir).await?;
            let _lock =
                EngineLock::take(&data_dir, true).map_err(|e| Failure::BadInput(e.to_string()))?;
            let unfinished = engine.unfinished().await?;
            hand_over_tokens(&engine, &unfinished, tokens).await?;
            let released = engine.recover().await?;
            for id in &unfinished {
                engine.interrupt_running(*id).await?;
            }
            eprintln!("resuming {} unfinished deployment(s); {released} job(s) were held by a stopped engine", unfinished.len());
            for id in &unfinished {
                engine
                    .orchestrate(*id, uuid::Uuid::now_v7(), Since::Unknown)
                    .await?;
            }
            engine
                .drive(
                    None,
                    parallelism,
                    &mut Unwatched,
                    engine
                        .log
                        .head_position()
                        .await
                        .context("reading the log")?,
                )
                .await?;
            let mut unsuccessful = 0;
            engine.project().await?;
            let queries = engine.queries();
            for id in unfinished {
                let view = find_view(&queries, backend, &id.to_string()).await?;
                outln!("{id} {}", view.status.as_str());
                unsuccessful += usize::from(view.status != DeploymentStatus::Succeeded);
            }
            if unsuccessful == 0 {
                Ok(())
            } else {
                Err(Failure::Unsuccessful(format!(
                    "{unsuccessful} of the deployments resumed did not succeed"
                )))
            }
        }
    }
}

/// Gives each unfinished deployment made with a cloud token a token of its project, or refuses
/// to resume at all: without it, its seal cannot be opened nor its bastion closed.
async fn hand_over_tokens(
    engine: &Engine,
    unfinished: &[DeploymentId],
    tokens: Vec<token::CheckedToken>,
) -> Result<(), Failure> {
    let mut missing = Vec::new();
    for id in unfinished {
        let Some(cloud) = engine.state(*id).await?.cloud else {
            continue;
        };
        match tokens
            .iter()
            .find(|t| t.info.project_id == cloud.project_id)
        {
            Some(checked) => engine.custody.remember(*id, checked.token.clone()),
            None => missing.push(format!("{id} (project {})", cloud.project)),
        }
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(Failure::BadInput(format!(
            "--token-file: these deployments act with a cloud token, and only a token of their \
             project can open their seal and close their bastion: {}; give one with --token-file \
             FILE (repeatable) or OS_TOKEN",
            missing.join(", ")
        )))
    }
}

#[allow(clippy::too_many_arguments)]
async fn deploy(
    backend: Backend,
    data_dir: &Path,
    files: &[PathBuf],
    tenant: Option<String>,
    token: &token::TokenArgs,
    params: &[String],
    secrets: &[String],
    pace: together::Pace,
    json: bool,
) -> Result<(), Failure> {
    // Every blueprint is read and checked before anything is recorded.
    let mut blueprints = Vec::with_capacity(files.len());
    for file in files {
        blueprints.push((file, read_blueprint(file)?));
    }
    let params = parse_pairs(params, "--param", "NAME=VALUE")?;
    let secret_values = read_secrets(secrets)?;
    if blueprints.len() > 1 && backend == Backend::Aws {
        return Err(Failure::BadInput(
            "deploy: with --backend aws, give one blueprint at a time".into(),
        ));
    }
    let several = blueprints.len() > 1;
    let (file, (text, parsed)) = blueprints.remove(0);
    let files = parsed.snapshot.files.clone();
    if backend == Backend::Aws {
        let aws = aws::Aws::from_env().await?;
        let mut given = token.given()?;
        if given.len() > 1 {
            return Err(Failure::BadInput(
                "--token-file: a deployment acts with one token; give it once".into(),
            ));
        }
        if let Some(tenant) = tenant {
            return Err(Failure::BadInput(format!(
                "--tenant {}: with --backend aws the tenant is not chosen: it is the AWS account \
                 that signs the request, or the project of the cloud token given; leave out \
                 --tenant",
                escaped(&tenant)
            )));
        }
        let id = aws::submit(aws::Request {
            file,
            text,
            files,
            params,
            secrets: secret_values,
            token: given.pop(),
        })
        .await?;
        eprintln!("deployment {id}");
        let view = aws::follow(&aws.log, id, &mut Progress::new()).await?;
        print_view(&view, json);
        return match view.status {
            DeploymentStatus::Succeeded => Ok(()),
            _ => Err(Failure::Unsuccessful(String::new())),
        };
    }
    let mut tokens = token.check().await?;
    if tokens.len() > 1 {
        return Err(Failure::BadInput(
            "--token-file: a deployment acts with one token; give it once".into(),
        ));
    }
    let checked = tokens.pop();
    // With a token the tenant is its project's id: names repeat across domains and come back
    // when a project is made again. The id is what --tenant must then say, if anything.
    let tenant = match (&checked, tenant) {
        // The project's name is taken too: it says the same project as the token.
        (Some(checked), Some(tenant))
            if tenant != checked.info.project_id && tenant != checked.info.project =>
        {
            return Err(Failure::BadInput(format!(
                "--tenant {}: the token is for project `{}` (id {}), and a deployment's tenant \
                 is its token's project; leave out --tenant",
                escaped(&tenant),
                escaped(&checked.info.project),
                escaped(&checked.info.project_id)
            )))
        }
        (Some(checked), _) => checked.info.project_id.clone(),
        (None, tenant) => tenant.unwrap_or_else(|| "default".into()),
    };
    // Acting with a token, the requester is whom the cloud says the token belongs to.
    let requested_by = checked
        .as_ref()
        .map_or_else(cancel::local_user, |checked| checked.info.user.clone());
    let cloud = checked.map(|checked| overture_submit::CloudSession {
        account: checked.info.account(),
        token: checked.token,
    });
    let submission_of = |file: &Path, text: String, files| Submission {
        triggered_by: None,
        cloud: cloud.as_ref().map(|cloud| overture_submit::CloudSession {
            account: cloud.account.clone(),
            token: cloud.token.clone(),
        }),
        source: file.display().to_string(),
        text,
        tenant: tenant.clone(),
        requested_by: requested_by.clone(),
        trigger: "cli".into(),
        params: params.clone(),
        secrets: secret_values.clone(),
        files,
    };
    let submission = (!several).then(|| submission_of(file, text.clone(), files));
    if let Some(submission) = &submission {
        if let Some(followed) = shared::guest::hand_over(data_dir, file, submission, json).await {
            return followed;
        }
    }
    let engine = Engine::open(data_dir).await?;
    let _lock = EngineLock::take(data_dir, false).map_err(|e| Failure::BadInput(e.to_string()))?;
    let start = engine
        .log
        .head_position()
        .await
        .context("reading the log")?;
    let Some(submission) = submission else {
        blueprints.insert(0, (file, (text, parsed)));
        let submissions = blueprints
            .into_iter()
            .map(|(file, (text, parsed))| {
                let submission = submission_of(file, text, parsed.snapshot.files.clone());
                (file.to_path_buf(), submission)
            })
            .collect();
        return together::deploy_all(&engine, data_dir, submissions, pace, json).await;
    };
    let id = engine
        .submit(submission)
        .await
        .map_err(|error| not_submitted(file, error))?;
    eprintln!("deployment {id}");
    // Only a `cancel` racing this very line could find it free, and it would then drive the
    // deployment beside this process: harmless, as every action is idempotent.
    let _driving = lock::DriveLock::take(data_dir, id).context("taking the drive lock")?;
    let mut progress = Progress::new();
    let drive = engine.drive(Some(id), pace.parallelism, &mut progress, start);
    cancel::drive_cancelling_on_signal(&engine, id, &requested_by, drive).await?;
    print_end(&engine, id, json).await
}

/// Prints a deployment this process drove to its end, as `status` prints it, and ends by the
/// outcome its log recorded: 0 when it succeeded, 1 otherwise. The view printed holds every
/// record up to that outcome, however far the other processes on the data directory have fed
/// the read models.
async fn print_end(engine: &Engine, id: DeploymentId, json: bool) -> Result<(), Failure> {
    let (state, view) = engine.settled(id).await?;
    print_view(&view, json);
    match state.phase {
        Phase::Finished(Outcome::Succeeded) => Ok(()),
        _ => Err(Failure::Unsuccessful(String::new())),
    }
}

/// Why a blueprint read from `file` was not recorded: its problems, named in the file, or the
/// engine's failure.
fn not_submitted(file: &Path, error: SubmitError) -> Failure {
    match error {
        SubmitError::Invalid(problems) => Failure::BadInput(problems_in(file, &problems)),
        other => Failure::Engine(other.into()),
    }
}

fn read_blueprint(file: &Path) -> Result<(String, blueprint::ParsedBlueprint), Failure> {
    use std::io::Read;
    let unreadable = |e: std::io::Error| {
        Failure::BadInput(format!("{}: cannot read the blueprint: {e}", shown(file)))
    };
    // One byte past the limit is enough to refuse it: a huge file is never read whole.
    let limit = u64::try_from(overture_domain::shape::MAX_BLUEPRINT_BYTES + 1).unwrap_or(u64::MAX);
    let mut bytes = Vec::new();
    std::fs::File::open(file)
        .and_then(|f| f.take(limit).read_to_end(&mut bytes))
        .map_err(unreadable)?;
    let text = String::from_utf8(bytes)
        .map_err(|e| unreadable(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))?;
    let bad = |problems| Failure::BadInput(problems_in(file, &problems));
    let mut parsed = blueprint::parse(&text).map_err(bad)?;
    // Allowed, and shown: the user may have meant otherwise.
    for warning in &parsed.warnings {
        eprintln!("warning: {}: {warning}", shown(file));
    }
    let files = bundle::read_files(file, &parsed.snapshot).map_err(bad)?;
    blueprint::attach_files(&mut parsed, files).map_err(bad)?;
    Ok((text, parsed))
}

fn problems_in(file: &Path, problems: &blueprint::BlueprintError) -> String {
    problems
        .0
        .iter()
        .map(|p| format!("{}: {p}", shown(file)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A path as shown in messages: control characters escaped, like every user text.
fn shown(file: &Path) -> String {
    escaped(&file.display().to_string()).into_owned()
}

fn parse_pairs(
    pairs: &[String],
    option: &str,
    shape: &str,
) -> Result<BTreeMap<String, String>, Failure> {
    pairs
        .iter()
        .map(|pair| match pair.split_once('=') {
            Some((name, value)) if !name.is_empty() => Ok((name.to_owned(), value.to_owned())),
            _ => Err(Failure::BadInput(format!(
                "{option} `{}`: expected {shape}",
                escaped(pair)
            ))),
        })
        .collect()
}

fn read_secrets(secrets: &[String]) -> Result<SecretValues, Failure> {
    let mut values = SecretValues::new();
    for pair in secrets {
        let Some((name, variable)) = pair
            .split_once('=')
            .filter(|(n, v)| !n.is_empty() && !v.is_empty())
        else {
            return Err(Failure::BadInput(format!(
                "--secret `{}`: expected NAME=ENV_VAR, naming the environment variable that holds \
                 the value",
                escaped(pair)
            )));
        };
        let value = std::env::var(variable).map_err(|_| {
            let (name, variable) = (escaped(name), escaped(variable));
            Failure::BadInput(format!(
                "--secret {name}={variable}: the environment variable {variable} is not set; \
                     export it first"
            ))
        })?;
        values.insert(name.to_owned(), SecretString::from(value));
    }
    Ok(values)
}

fn parse_id(text: &str) -> Result<DeploymentId, Failure> {
    text.parse()
        .map_err(|e: overture_events::ParseIdError| Failure::BadInput(e.to_string()))
}

fn no_such_deployment(id: DeploymentId) -> Failure {
    Failure::BadInput(format!(
        "no deployment {id} in this data directory (see `overture list`)"
    ))
}

/// How `replay --check` ends: 0 when the read models match the log, 1 naming what differs.
fn checked(differences: &[String]) -> Result<(), Failure> {
    if differences.is_empty() {
        outln!("read models match the log");
        Ok(())
    } else {
        Err(Failure::Unsuccessful(format!(
            "read models differ from the log for: {}",
            differences.join(", ")
        )))
    }
}

/// No such deployment, said where it was looked for.
fn missing(backend: Backend, id: DeploymentId) -> Failure {
    match backend {
        Backend::Embedded => no_such_deployment(id),
        Backend::Aws => Failure::BadInput(format!(
            "no deployment {id} on the aws backend (see `overture --backend aws list`)"
        )),
        // Also another tenant's: the server answers as if it did not exist.
        Backend::Server => Failure::BadInput(format!(
            "no deployment {id} on the server for your tenant (see `overture --server URL list`)"
        )),
    }
}

/// Prints a deployment's status (`--json`: the status object) and returns it.
async fn print_status(
    queries: &dyn QueryDeployments,
    backend: Backend,
    id: &str,
    json: bool,
) -> Result<overture_domain::projection::DeploymentView, Failure> {
    let view = find_view(queries, backend, id).await?;
    print_view(&view, json);
    Ok(view)
}

/// Prints a deployment's view (`--json`: the status object).
fn print_view(view: &overture_domain::projection::DeploymentView, json: bool) {
    if json {
        outln!("{}", render::status_json(view));
    } else {
        out!("{}", render::status(view));
    }
}

async fn find_view(
    queries: &dyn QueryDeployments,
    backend: Backend,
    id: &str,
) -> Result<overture_domain::projection::DeploymentView, Failure> {
    let id = parse_id(id)?;
    queries
        .deployment(id)
        .await?
        .ok_or_else(|| missing(backend, id))
}

/// Prints a step's log through the query port (the aws backend's `logs`): the attempt given,
/// or the step's last.
async fn show_log(
    queries: &dyn QueryDeployments,
    backend: Backend,
    id: &str,
    step: &str,
    attempt: Option<u32>,
    destroy: bool,
) -> Result<(), Failure> {
    let view = find_view(queries, backend, id).await?;
    let Some(step_view) = view.steps.get(step) else {
        let steps: Vec<&str> = view.steps.keys().map(String::as_str).collect();
        return Err(Failure::BadInput(format!(
            "deployment {} has no step `{step}`; its steps are: {}",
            view.id,
            steps.join(", ")
        )));
    };
    let log = match (
        destroy,
        attempt.or((step_view.attempts > 0).then_some(step_view.attempts)),
    ) {
        (true, _) => AttemptLog::Destroy,
        (false, Some(attempt)) => AttemptLog::Attempt(attempt),
        (false, None) => {
            return Err(Failure::BadInput(format!(
                "step `{step}` has no output yet: no attempt has run"
            )))
        }
    };
    match queries.attempt_log(view.id, step, log).await? {
        Some(bytes) => {
            out!("{}", String::from_utf8_lossy(&bytes));
            Ok(())
        }
        None => Err(Failure::BadInput(match log {
            AttemptLog::Destroy => format!("step `{step}` has not been destroyed yet"),
            AttemptLog::Attempt(attempt) => {
                format!("step `{step}` has no output for attempt {attempt}")
            }
        })),
    }
}
