//! One file per command, each with its arguments (clap derive) and its `run`; [`Command`] is
//! the list, and says which commands run only embedded or not through `--server`.

pub mod cancel;
pub mod cloud;
pub mod completions;
pub mod deploy;
pub mod destroy;
pub mod engine;
pub mod events;
pub mod export;
pub mod grants;
pub mod graph;
pub mod import;
pub mod key;
pub mod list;
pub mod logs;
pub mod redeploy;
pub mod redrive;
pub mod replay;
pub mod resume;
pub mod serve;
pub mod services;
pub mod status;
pub mod tenants;
pub mod trigger;
pub mod triggers;
pub mod validate;
pub mod verify;

use std::path::{Path, PathBuf};

use clap::Subcommand;

use crate::backend::Backend;
use crate::sandboxed::SandboxedCommand;
use crate::Failure;

/// The commands.
#[derive(Subcommand)]
pub enum Command {
    /// Record a deployment of a blueprint and drive it to its end, showing progress.
    Deploy(deploy::DeployArgs),
    /// Show a deployment's status.
    Status(status::StatusArgs),
    /// List deployments, newest first.
    List(list::ListArgs),
    /// Summarise deployments per tenant.
    Tenants(tenants::TenantsArgs),
    /// List the service registry: per tenant, each service's registered instances.
    Services(services::ServicesArgs),
    /// Show a deployment's audit trail as a timeline: when, who, what and why, event by event.
    Events(events::EventsArgs),
    /// Write the log as JSON lines, one event per line with its position, oldest first.
    Export(export::ExportArgs),
    /// Add the events of an export to this data directory's log, as they were recorded.
    Import(import::ImportArgs),
    /// Check the hash chains of the log (or of one deployment); exit 1 naming the first break.
    Verify(verify::VerifyArgs),
    /// Print the engine's public key, which signs its exports, and its fingerprint.
    Key(key::KeyArgs),
    /// Check a blueprint without running anything.
    Validate(validate::ValidateArgs),
    /// Draw a blueprint's steps, or a deployment's with their states.
    Graph(graph::GraphArgs),
    /// Rebuild every read model from the log.
    Replay(replay::ReplayArgs),
    /// Show the output of a step's attempt (the last one unless --attempt says).
    Logs(logs::LogsArgs),
    /// Tear a finished deployment down: destroy what its Terraform steps made, with their state.
    Destroy(destroy::DestroyArgs),
    /// Cancel a running deployment: kill its running steps, start no other, close its bastion,
    /// purge its secrets. Works from any process, and also when no engine runs it any more.
    Cancel(cancel::CancelArgs),
    /// Deliver an event to a trigger file (see `overture trigger send --help`).
    #[command(subcommand)]
    Trigger(trigger::TriggerCommand),
    /// What triggers decided, and why (see `overture triggers log --help`).
    #[command(subcommand)]
    Triggers(triggers::TriggersCommand),
    /// Carry a failed deployment on from its failed and abandoned steps, in the same deployment:
    /// steps that succeeded are not run again and their outputs are reused.
    Redrive(redrive::RedriveArgs),
    /// Start a new deployment of a recorded deployment's blueprint and parameters.
    Redeploy(redeploy::RedeployArgs),
    /// Carry on every unfinished deployment after a crash. A deployment made with a cloud token
    /// needs a token of its project again: its seal opens with nothing else.
    Resume(resume::ResumeArgs),
    // The programs that run inside a step's sandbox or task (hidden).
    #[command(flatten)]
    Sandboxed(SandboxedCommand),
    /// Show the temporary grants of access deployments held: bastion rules, forwarding,
    /// deployment keys, sealed tokens; when each was opened and closed.
    Grants(grants::GrantsArgs),
    /// Runs the local cloud (development and tests).
    #[command(subcommand)]
    Cloud(cloud::CloudCommand),
    /// Serve the HTTP API: deployments started, followed and cancelled per tenant, each caller
    /// authenticated by its cloud token.
    Serve(serve::ServeArgs),
    /// Serve this data directory to `overture deploy`: each one on it hands its deployment to
    /// this engine and follows it from here, and concurrent deployments share its commits.
    Engine(engine::EngineArgs),
    /// Print a shell's completion script for overture (bash, zsh or fish).
    Completions(completions::CompletionsArgs),
}

impl Command {
    /// The deployment the command is given, as the user wrote it (an id or a name), if any.
    fn deployment_mut(&mut self) -> Option<&mut String> {
        match self {
            Command::Status(args) => Some(&mut args.id),
            Command::Events(args) => Some(&mut args.id),
            Command::Logs(args) => Some(&mut args.id),
            Command::Destroy(args) => Some(&mut args.id),
            Command::Cancel(args) => Some(&mut args.id),
            Command::Redrive(args) => Some(&mut args.id),
            Command::Redeploy(args) => Some(&mut args.id),
            Command::Verify(args) => args.id.as_mut(),
            // A blueprint file is drawn as it is.
            Command::Graph(args) if !Path::new(&args.target).exists() => Some(&mut args.target),
            _ => None,
        }
    }

    /// Runs the command on the backend chosen (`data_dir` for those that work on it itself),
    /// with a deployment given by name first resolved to its id.
    pub async fn run(mut self, backend: &dyn Backend, data_dir: &Path) -> Result<(), Failure> {
        if let Some(given) = self.deployment_mut() {
            *given = backend.resolve(given).await?.to_string();
        }
        match self {
            Command::Deploy(args) => args.run(backend).await,
            Command::Status(args) => args.run(backend).await,
            Command::List(args) => args.run(backend).await,
            Command::Tenants(args) => args.run(backend).await,
            Command::Services(args) => args.run(backend).await,
            Command::Events(args) => args.run(backend).await,
            Command::Export(args) => args.run(data_dir).await,
            Command::Import(args) => args.run(data_dir).await,
            Command::Verify(args) => args.run(backend).await,
            Command::Key(args) => args.run(data_dir).await,
            Command::Validate(args) => args.run(),
            Command::Graph(args) => args.run(backend).await,
            Command::Replay(args) => args.run(backend, data_dir).await,
            Command::Logs(args) => backend.logs(&args).await,
            Command::Destroy(args) => args.run(data_dir).await,
            Command::Cancel(args) => backend.cancel(&args).await,
            Command::Trigger(command) => command.run(backend).await,
            Command::Triggers(command) => command.run(backend).await,
            Command::Redrive(args) => backend.redrive(args.again.for_deployment(&args.id)).await,
            Command::Redeploy(args) => {
                crate::input::check_name_flag(args.name.as_deref())?;
                let mut again = args.again.for_deployment(&args.id);
                again.name = args.name.as_deref();
                backend.redeploy(again).await
            }
            Command::Resume(args) => args.run(backend, data_dir).await,
            Command::Grants(args) => args.run(backend).await,
            Command::Cloud(command) => cloud::run(command).await,
            Command::Serve(args) => serve::run(data_dir, args).await,
            Command::Engine(args) => args.run(data_dir).await,
            Command::Completions(args) => {
                args.run();
                Ok(())
            }
            // `main` runs them before any backend is chosen: their exit codes are their own.
            Command::Sandboxed(_) => Err(Failure::BadInput(
                "`overture provision`, `host-keys` and `step-run` run only inside a step's \
                 sandbox or task"
                    .into(),
            )),
        }
    }

    /// The command as named in a refusal, when it runs only on this machine's data directory.
    pub fn only_embedded(&self) -> Option<&'static str> {
        match self {
            Command::Cloud(_) => Some("cloud"),
            Command::Serve(_) => Some("serve"),
            Command::Engine(_) => Some("engine"),
            Command::Destroy(_) => Some("destroy"),
            Command::Resume(_) => Some("resume"),
            Command::Replay(replay::ReplayArgs { check: false }) => Some("replay"),
            Command::Export(_) => Some("export"),
            Command::Import(_) => Some("import"),
            Command::Key(_) => Some("key"),
            Command::Logs(logs::LogsArgs { follow: true, .. }) => Some("logs --follow"),
            _ => None,
        }
    }

    /// The command as named in a refusal, when it does not go through the HTTP API.
    pub fn not_through_server(&self) -> Option<&'static str> {
        match self {
            Command::Status(_)
            | Command::List(_)
            | Command::Events(_)
            | Command::Grants(_)
            | Command::Tenants(_)
            | Command::Graph(_)
            | Command::Validate(_)
            | Command::Services(_)
            | Command::Completions(_)
            | Command::Redrive(_) => None,
            Command::Logs(logs::LogsArgs { follow: true, .. }) => Some("logs --follow"),
            Command::Logs(_) => None,
            Command::Cancel(cancel::CancelArgs {
                reason: Some(_), ..
            }) => Some("cancel --reason"),
            Command::Cancel(_) => None,
            Command::Deploy(_) => Some("deploy"),
            Command::Export(_) => Some("export"),
            Command::Import(_) => Some("import"),
            Command::Verify(_) => Some("verify"),
            Command::Key(_) => Some("key"),
            Command::Replay(_) => Some("replay"),
            Command::Destroy(_) => Some("destroy"),
            Command::Redeploy(_) => Some("redeploy"),
            Command::Resume(_) => Some("resume"),
            Command::Sandboxed(_) => Some("step-run"),
            Command::Cloud(_) => Some("cloud"),
            Command::Serve(_) => Some("serve"),
            Command::Engine(_) => Some("engine"),
            Command::Trigger(_) => Some("trigger send"),
            Command::Triggers(_) => Some("triggers log"),
        }
    }

    /// The `--token-file`s a command takes itself (the same flag as the global one of
    /// `--server`).
    pub fn own_token_files(&self) -> Option<&[PathBuf]> {
        match self {
            Command::Deploy(deploy::DeployArgs { token, .. })
            | Command::Destroy(destroy::DestroyArgs { token, .. })
            | Command::Cancel(cancel::CancelArgs { token, .. })
            | Command::Resume(resume::ResumeArgs { token, .. }) => Some(&token.token_files),
            Command::Redrive(redrive::RedriveArgs { again, .. })
            | Command::Redeploy(redeploy::RedeployArgs { again, .. }) => {
                Some(&again.token.token_files)
            }
            _ => None,
        }
    }
}
