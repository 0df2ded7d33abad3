//! Where deployments run and are recorded, chosen once per command ([`choose`]): the embedded
//! engine on this machine's data directory ([`embedded`]), the serverless form on AWS
//! ([`aws`]), or the HTTP API of an `overture serve` ([`server`]). Each is a [`Backend`]; a
//! command asks the one chosen, never which one it is.

pub mod aws;
pub mod embedded;
pub mod server;

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use clap::ValueEnum;
use overture_events::DeploymentId;
use overture_kit::query::QueryDeployments;

use crate::app::Cli;
use crate::commands::cancel::CancelArgs;
use crate::commands::deploy::Deploy;
use crate::commands::logs::LogsArgs;
use crate::commands::redrive::Again;
use crate::commands::trigger::SendArgs;
use crate::commands::verify;
use crate::{token, Failure};

/// Where deployments run and are recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BackendKind {
    /// One process on this machine, on the data directory.
    Embedded,
    /// The serverless form: Lambda functions on DynamoDB, SQS and KMS.
    Aws,
}

/// What a backend carries out. A backend refuses, with a message saying where the command
/// does run, what it does not carry out.
#[async_trait(?Send)]
pub trait Backend: Send + Sync {
    /// No such deployment, said where it was looked for.
    fn missing(&self, id: DeploymentId) -> Failure;
    /// Refuses `overture {command}` unless this backend carries it out: the commands that work
    /// on a data directory itself (`destroy`, `resume`, `export`, ...) run only embedded.
    fn only_embedded(&self, command: &str) -> Result<(), Failure>;
    /// The query port; embedded, the read models first fold what is new on the log.
    async fn queries(&self) -> Result<Box<dyn QueryDeployments>, Failure>;
    /// Records the deployments of `overture deploy` and follows them to their end.
    async fn deploy(&self, deploy: Deploy<'_>) -> Result<(), Failure>;
    /// Records a user's cancel of a deployment and follows it until it is carried out.
    async fn cancel(&self, args: &CancelArgs) -> Result<(), Failure>;
    /// Carries a failed deployment on from its failed and abandoned steps.
    async fn redrive(&self, again: Again<'_>) -> Result<(), Failure>;
    /// Starts a new deployment of a recorded deployment's request.
    async fn redeploy(&self, again: Again<'_>) -> Result<(), Failure>;
    /// Compares a fresh fold of the log with the stored read models: what differs.
    async fn check_read_models(&self) -> Result<Vec<String>, Failure>;
    /// Checks the hash chain of every stream of the log, or of `stream` alone, up to the first
    /// break.
    async fn verify(&self, stream: Option<String>) -> Result<verify::Report, Failure>;
    /// Delivers an event to the triggers.
    async fn send_event(&self, args: SendArgs) -> Result<(), Failure>;
    /// Prints what triggers decided, and why.
    async fn trigger_log(&self, json: bool) -> Result<(), Failure>;
    /// Stores a trigger file where the triggers read it.
    async fn publish_triggers(&self, file: &Path) -> Result<(), Failure>;

    /// The tenant whose deployment a bare `NAME` names; `None` when the queries answer for the
    /// caller's tenant alone (an HTTP API), or a name is looked up in every tenant.
    fn own_tenant(&self) -> Option<String> {
        None
    }

    /// The deployment a command was given: its id, `NAME` or `TENANT/NAME`
    /// ([`crate::input::resolve_id`]).
    async fn resolve(&self, text: &str) -> Result<DeploymentId, Failure> {
        if let Ok(id) = text.parse::<DeploymentId>() {
            return Ok(id);
        }
        let queries = self.queries().await?;
        crate::input::resolve_id(text, queries.as_ref(), self.own_tenant().as_deref()).await
    }

    /// Prints a step's log: through the query port, the attempt given or the step's last.
    async fn logs(&self, args: &LogsArgs) -> Result<(), Failure> {
        let queries = self.queries().await?;
        crate::commands::logs::show_queried(queries.as_ref(), &|id| self.missing(id), args).await
    }
}

/// The backend the command line chose: `--server URL`, or `--backend`.
pub fn choose(cli: &Cli) -> Result<Box<dyn Backend>, Failure> {
    if let Some(url) = cli.server.as_deref().filter(|url| !url.is_empty()) {
        return through_server(cli, url).map(|server| Box::new(server) as Box<dyn Backend>);
    }
    // Given before the command, or to one that takes no token, it would be silently unused.
    let unused = cli
        .command
        .own_token_files()
        .is_none_or(<[PathBuf]>::is_empty);
    if !cli.token_files.is_empty() && unused {
        return Err(Failure::BadInput(
            "--token-file: without --server, give it after a command that acts with a token \
             (deploy, destroy, cancel, redrive, redeploy, resume)"
                .into(),
        ));
    }
    Ok(match cli.backend {
        BackendKind::Embedded => Box::new(embedded::Embedded::new(&cli.data_dir)),
        BackendKind::Aws => Box::new(aws::AwsBackend),
    })
}

/// With `--server`: checks what goes with it, and sets the server up with the caller's token.
fn through_server(cli: &Cli, url: &str) -> Result<server::Server, Failure> {
    if cli.backend == BackendKind::Aws {
        return Err(Failure::BadInput(
            "--server goes through an `overture serve`, which runs the embedded engine; leave \
             out --backend aws (or --server)"
                .into(),
        ));
    }
    if let Some(command) = cli.command.not_through_server() {
        server::refuse(command)?;
    }
    let own = cli.command.own_token_files().unwrap_or_default();
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
    let remote = server::Remote::new(url, token).map_err(Failure::BadInput)?;
    Ok(server::Server(remote))
}
