//! `overture cancel`, and Ctrl-C or SIGTERM on `overture deploy`: ending a deployment at a
//! user's request.
//!
//! The cancel is recorded at once: the aggregate abandons every running and waiting attempt
//! (no grace period; the user asked), so no step starts any more. Then whoever drives the
//! deployment carries it out as at any end: its runners see their attempts abandoned and kill
//! their sandboxes within a heartbeat, and the orchestrator closes the bastion, purges the
//! secrets and records `DeploymentCancelled`. When no live engine drives it (the engine died),
//! the cancelling process does that itself, as `resume` would.

use std::future::Future;
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use overture_domain::{DeploymentError, DeploymentState};
use overture_events::DeploymentId;
use overture_orchestrator::Since;
use tokio::signal::unix::{signal, SignalKind};

use crate::backend::embedded::missing as no_such_deployment;
use crate::input::parse_id;
use crate::lock::{DriveLock, EngineLock};
use crate::output::{find_view, print_status};
use crate::token::TokenArgs;
use crate::Failure;
use overture_embedded::{Engine, EngineError, Unwatched};

/// How long `cancel` waits for the engine driving the deployment to carry the cancel out.
const WAIT_FOR_DRIVER: Duration = Duration::from_secs(60);
/// How often it looks while it waits.
const LOOK_EVERY: Duration = Duration::from_millis(100);
/// The exit code of a `deploy` left at once by a second Ctrl-C: 128 + SIGINT, as shells expect.
pub const LEFT_AT_ONCE: i32 = 130;

/// Who carries a recorded cancel out.
enum Carrier {
    /// A live engine drives the deployment (a `deploy`, or `resume`): it will.
    Driver,
    /// No live process drives it: this one does, holding these locks.
    Myself {
        /// No engine at all is alive: what a dead one left may be cleaned up.
        alone: bool,
        _engine: EngineLock,
        _drive: Option<DriveLock>,
    },
}

impl Carrier {
    fn find(data_dir: &Path, deployment: DeploymentId) -> Result<Self, Failure> {
        let drive = || {
            DriveLock::take(data_dir, deployment)
                .with_context(|| format!("taking the drive lock in {}", data_dir.display()))
        };
        if let Ok(engine) = EngineLock::take(data_dir, true) {
            return Ok(Carrier::Myself {
                alone: true,
                _engine: engine,
                _drive: drive()?,
            });
        }
        // Taken exclusively, it is `resume`'s, which drives every unfinished deployment.
        let Ok(engine) = EngineLock::take(data_dir, false) else {
            return Ok(Carrier::Driver);
        };
        Ok(match drive()? {
            Some(drive) => Carrier::Myself {
                alone: false,
                _engine: engine,
                _drive: Some(drive),
            },
            None => Carrier::Driver,
        })
    }
}

/// `overture cancel`.
#[derive(clap::Args)]
pub struct CancelArgs {
    /// The deployment: its id, its name, or TENANT/NAME.
    pub id: String,
    /// Why, recorded in `DeploymentCancelled`.
    #[arg(long)]
    pub reason: Option<String>,
    #[command(flatten)]
    pub token: TokenArgs,
    /// Print the final status as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

/// `overture cancel ID [--reason TEXT]` on the data directory.
pub async fn cancel(
    data_dir: &Path,
    id: &str,
    reason: Option<String>,
    token: &TokenArgs,
    json: bool,
) -> Result<(), Failure> {
    let id = parse_id(id)?;
    let tokens = token.check().await?;
    let engine = Engine::open(data_dir).await?;
    let requested_by = tokens
        .first()
        .map_or_else(local_user, |checked| checked.info.user.clone());
    let reason = reason.unwrap_or_else(|| "cancelled from the command line".into());
    let state = record(&engine, id, &requested_by, &reason).await?;
    eprintln!("deployment {id}: cancel recorded; abandoning its steps");

    match Carrier::find(data_dir, id)? {
        Carrier::Driver => wait_for_driver(&engine, id).await?,
        Carrier::Myself { alone, .. } => {
            if alone {
                // The engine that ran it died: its sandboxes and leased jobs are orphans.
                engine.recover().await?;
            }
            let needs_token = state.bastion_access.is_some();
            let token = state.cloud.as_ref().and_then(|cloud| {
                tokens
                    .into_iter()
                    .find(|t| t.info.project_id == cloud.project_id)
            });
            match (needs_token, token) {
                (true, None) => eprintln!(
                    "deployment {id}: its bastion is still open, and closing it needs a token of \
                     its project: run `overture cancel {id} --token-file FILE` or `overture \
                     resume --token-file FILE` to finish the cancel"
                ),
                (_, token) => {
                    if let Some(token) = token {
                        engine.custody.remember(id, token.token);
                    }
                    let from = engine
                        .log
                        .head_position()
                        .await
                        .context("reading the log")?;
                    engine
                        .orchestrate(id, uuid::Uuid::now_v7(), Since::Unknown)
                        .await?;
                    engine.drive(Some(id), 1, &mut Unwatched, from).await?;
                }
            }
        }
    }

    engine.project().await?;
    print_status(
        &engine.queries(),
        &no_such_deployment,
        &id.to_string(),
        json,
    )
    .await?;
    Ok(())
}

/// Records the cancel, or says why it cannot be (exit code 2, nothing recorded).
async fn record(
    engine: &Engine,
    id: DeploymentId,
    requested_by: &str,
    reason: &str,
) -> Result<DeploymentState, Failure> {
    match engine.cancel(id, requested_by, reason).await? {
        Ok(state) => Ok(state),
        Err(DeploymentError::NotRequested) => Err(no_such_deployment(id)),
        Err(DeploymentError::AlreadyFinished) => {
            engine.project().await?;
            let status = find_view(&engine.queries(), &no_such_deployment, &id.to_string())
                .await?
                .status;
            Err(Failure::BadInput(format!(
                "deployment {id} has already ended ({}); there is nothing to cancel",
                status.as_str()
            )))
        }
        Err(refused) => Err(Failure::BadInput(format!("deployment {id}: {refused}"))),
    }
}

/// Waits for the live engine driving the deployment to carry the cancel out.
async fn wait_for_driver(engine: &Engine, id: DeploymentId) -> Result<(), Failure> {
    let deadline = tokio::time::Instant::now() + WAIT_FOR_DRIVER;
    while !engine.state(id).await?.is_finished() {
        if tokio::time::Instant::now() >= deadline {
            eprintln!(
                "deployment {id}: the engine driving it has not ended it yet; it will, or \
                 `overture resume` will if that engine dies"
            );
            break;
        }
        tokio::time::sleep(LOOK_EVERY).await;
    }
    Ok(())
}

/// Drives a deployment with `drive` until it ends. The first SIGINT (Ctrl-C) or SIGTERM cancels
/// it, and driving goes on until the cancel is carried out; a second one leaves at once.
pub async fn drive_cancelling_on_signal(
    engine: &Engine,
    id: DeploymentId,
    requested_by: &str,
    drive: impl Future<Output = Result<(), EngineError>>,
) -> Result<(), Failure> {
    let mut interrupt = signal(SignalKind::interrupt()).context("listening for Ctrl-C")?;
    let mut terminate = signal(SignalKind::terminate()).context("listening for SIGTERM")?;
    tokio::pin!(drive);
    // The drive goes on while the cancel is recorded: it may be half-way through deciding on
    // the deployment, and the cancel waits for its turn to decide after it.
    let mut cancel = None;
    let mut cancelling = false;
    loop {
        let name = tokio::select! {
            ended = &mut drive => return Ok(ended?),
            cancelled = async { cancel.as_mut().expect("a cancel is under way").await }, if cancel.is_some() => {
                cancel = None;
                match cancelled? {
                    // It ended meanwhile: driving returns at once.
                    Ok(_) | Err(DeploymentError::AlreadyFinished) => continue,
                    Err(refused) => return Err(Failure::Engine(refused.into())),
                }
            }
            _ = interrupt.recv() => "Ctrl-C",
            _ = terminate.recv() => "SIGTERM",
        };
        if cancelling {
            eprintln!(
                "{name} again: leaving at once without cleaning up; `overture resume` will finish \
                 cancelling deployment {id} (closing its bastion and purging its secrets)"
            );
            std::process::exit(LEFT_AT_ONCE);
        }
        cancelling = true;
        eprintln!(
            "{name}: cancelling deployment {id}: killing its running steps, closing its bastion \
             and purging its secrets (press Ctrl-C again to leave at once)"
        );
        let reason = format!("{name} on `overture deploy`");
        cancel = Some(Box::pin(async move {
            engine.cancel(id, requested_by, &reason).await
        }));
    }
}

/// The local user, for a cancel made without a cloud token.
pub fn local_user() -> String {
    std::env::var("USER").unwrap_or_else(|_| "cli".into())
}
