//! `overture destroy`: tearing a finished deployment down.
//!
//! The runner's [`destroy`](overture_runner::destroy::destroy) does the work; this takes the
//! locks, shows the deployment's events as they are recorded, turns a refusal into a message
//! that says what to do (exit code 2, nothing recorded), and prints the status at the end.
//! A destroy deregisters the deployment's service instances: it then drives what that calls
//! for, the purge of a seal the deployment kept while it watched services, and the tenant's
//! deployments that watch those services running their watching steps again.

use std::future::Future;
use std::path::Path;

use anyhow::Context;
use overture_domain::text::escaped;
use overture_domain::DeploymentError;
use overture_events::DeploymentId;
use overture_runner::destroy::{DestroyOutcome, DestroyRefused, DestroyRequest};

use crate::backend::embedded::missing as no_such_deployment;
use crate::input::{parse_id, read_secrets};
use crate::lock::{DestroyLock, EngineLock};
use crate::output::print_status;
use crate::progress::Progress;
use crate::Failure;
use overture_embedded::{Engine, Watch};

/// How many log entries one read for progress takes.
const BATCH: usize = 1_000;
/// How many attempts the drive after a destroy runs at once: the watching steps it re-runs.
const AFTER_DESTROY_PARALLELISM: usize = 4;

/// `overture destroy`.
#[derive(clap::Args)]
pub struct DestroyArgs {
    /// The deployment: its id, its name, or TENANT/NAME.
    pub(crate) id: String,
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
    pub token: crate::token::TokenArgs,
}

impl DestroyArgs {
    /// Tears the deployment down on the data directory.
    pub async fn run(self, data_dir: &Path) -> Result<(), Failure> {
        destroy(data_dir, &self.id, &self.secrets, &self.token, self.json).await
    }
}

/// Destroys what the deployment's Terraform steps made.
async fn destroy(
    data_dir: &Path,
    id: &str,
    secrets: &[String],
    token: &crate::token::TokenArgs,
    json: bool,
) -> Result<(), Failure> {
    let id = parse_id(id)?;
    // Used in memory only: the deployment's own sealed secrets were purged when it ended.
    let secrets = read_secrets(secrets)?;
    let tokens = token.check().await?;
    let engine = Engine::open(data_dir).await?;
    engine.preflight()?;
    // Lent by the drive below to the deployments of its project whose watching steps run again.
    if let Some(checked) = tokens.into_iter().next() {
        engine.custody.remember(id, checked.token);
    }
    // Shared, as `deploy` takes it: `resume` takes it exclusively and kills every sandbox.
    let _engine =
        EngineLock::take(data_dir, false).map_err(|e| Failure::BadInput(e.to_string()))?;
    let _destroying =
        DestroyLock::take(data_dir, id).map_err(|e| Failure::BadInput(e.to_string()))?;

    let requested_by = std::env::var("USER").unwrap_or_else(|_| "cli".into());
    let request = DestroyRequest {
        deployment: id,
        requested_by: &requested_by,
        secrets: &secrets,
        cause: uuid::Uuid::now_v7(),
    };
    let from = engine
        .log
        .head_position()
        .await
        .context("reading the log")?;
    let outcome = showing_progress(&engine, id, from, engine.destroy(&request))
        .await??
        .map_err(|refused| refusal(id, refused))?;
    let shown = engine
        .log
        .head_position()
        .await
        .context("reading the log")?;
    // From before the destroy, so the orchestrator sees its records; shown from after them.
    let mut progress = Later {
        after: shown,
        progress: Progress::new().following(id),
        waiting: Vec::new(),
    };
    engine
        .drive(Some(id), AFTER_DESTROY_PARALLELISM, &mut progress, from)
        .await?;

    engine.project().await?;
    print_status(
        &engine.queries(),
        &no_such_deployment,
        &id.to_string(),
        json,
    )
    .await?;
    for (watcher, project) in &progress.waiting {
        eprintln!("{}", waits_for_a_token(*watcher, project.as_deref()));
    }
    match outcome {
        DestroyOutcome::Destroyed => Ok(()),
        DestroyOutcome::Failed { step } => Err(Failure::Unsuccessful(format!(
            "destroying step `{step}` failed; once its cause is fixed, `overture destroy {id}` carries on from it"
        ))),
    }
}

/// Progress from a position on: what came before was shown already.
struct Later {
    after: u64,
    progress: Progress,
    /// The watching deployments whose re-run waits for their user's token, with the name of
    /// their project.
    waiting: Vec<(DeploymentId, Option<String>)>,
}

impl Watch for Later {
    fn entry(&mut self, entry: &overture_events::LogEntry) {
        if entry.position > self.after {
            self.progress.entry(entry);
        }
    }

    fn tick(&mut self, state: &overture_domain::DeploymentState) {
        self.progress.tick(state);
    }

    fn waits_for_a_token(&mut self, id: DeploymentId, state: &overture_domain::DeploymentState) {
        if !self.waiting.iter().any(|(known, _)| *known == id) {
            let project = state.cloud.as_ref().map(|cloud| cloud.project.clone());
            self.waiting.push((id, project));
        }
    }
}

/// What to tell the user of a watching deployment whose re-run this destroy only queued.
fn waits_for_a_token(watcher: DeploymentId, project: Option<&str>) -> String {
    let project = project
        .map(|project| format!(" (project {})", escaped(project)))
        .unwrap_or_default();
    format!(
        "deployment {watcher}{project} watches a service this destroy changed: its watching step \
         is scheduled to run again, and only the token it was deployed with opens its seal; \
         carry it on with `overture resume --token-file FILE`, FILE holding that token"
    )
}

/// What to tell the user when the destroy is refused.
fn refusal(id: DeploymentId, refused: DestroyRefused) -> Failure {
    let message = match refused {
        DestroyRefused::Deployment(DeploymentError::NotRequested) => {
            return no_such_deployment(id)
        }
        DestroyRefused::Deployment(DeploymentError::StillRunning) => format!(
            "deployment {id} is still running; destroy it once it has ended (`overture status {id}` shows where it stands)"
        ),
        DestroyRefused::Deployment(DeploymentError::AlreadyDestroyed) => format!(
            "deployment {id} has already been destroyed; nothing it made is left"
        ),
        DestroyRefused::MissingSecrets { secrets, steps } => {
            let flags: Vec<String> = secrets
                .iter()
                .map(|name| format!("--secret {name}=ENV_VAR"))
                .collect();
            format!(
                "the Terraform variables of {} use {}, and deployment {id} no longer holds its secrets \
                 (they were purged when it ended); give them again: {}",
                named("step", &steps),
                named("secret", &secrets),
                flags.join(" ")
            )
        }
        DestroyRefused::UnknownSecrets { given, declared } => format!(
            "--secret: the blueprint of deployment {id} declares no {}; {}",
            named("secret", &given),
            if declared.is_empty() {
                "it declares no secrets at all".to_owned()
            } else {
                format!("it declares {}", named("secret", &declared))
            }
        ),
        other => format!("cannot destroy deployment {id}: {other}"),
    };
    Failure::BadInput(message)
}

/// `step `a`` or `steps `a`, `b``.
fn named(noun: &str, names: &[String]) -> String {
    let quoted: Vec<String> = names.iter().map(|name| format!("`{name}`")).collect();
    let plural = if names.len() == 1 { "" } else { "s" };
    format!("{noun}{plural} {}", quoted.join(", "))
}

/// Runs `work`, printing the deployment's events recorded after `position` as they arrive.
async fn showing_progress<T>(
    engine: &Engine,
    id: DeploymentId,
    mut position: u64,
    work: impl Future<Output = T>,
) -> Result<T, Failure> {
    let appended = engine.log.appended();
    let mut progress = Progress::new();
    tokio::pin!(work);
    loop {
        let notified = appended.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        position = show_new(engine, id, position, &mut progress).await?;
        tokio::select! {
            done = &mut work => {
                show_new(engine, id, position, &mut progress).await?;
                return Ok(done);
            }
            () = &mut notified => {}
        }
    }
}

async fn show_new(
    engine: &Engine,
    id: DeploymentId,
    mut position: u64,
    progress: &mut Progress,
) -> Result<u64, Failure> {
    let stream = id.stream();
    loop {
        let entries = engine
            .log
            .read_all(position, BATCH)
            .await
            .context("reading the log")?;
        let Some(last) = entries.last() else {
            return Ok(position);
        };
        position = last.position;
        for entry in entries.iter().filter(|e| e.envelope.stream == stream) {
            progress.entry(entry);
        }
    }
}
