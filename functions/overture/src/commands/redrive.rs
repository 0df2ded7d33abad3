//! `overture redrive ID` and `overture redeploy ID`: running a recorded deployment again.
//!
//! A redrive carries a failed deployment on in its own stream from its failed and abandoned
//! steps (the aggregate decides which, and refuses a deployment that did not fail); a redeploy
//! records a new deployment of the same request and blueprint snapshot. Either way the secrets
//! and the cloud token are given again ([`overture_submit::again`] seals them), and the
//! deployment is driven to its end as `deploy` drives it: same progress, same exit codes.
//!
//! With `--backend aws` they are recorded on the stack as the api function records them
//! ([`crate::backend::aws::recorder`]), and the deployment is followed on the events table while the
//! stack's functions drive it, as `deploy` follows one there.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use overture_api::{RunDeployments, RunError};
use overture_domain::secret::SecretValues;
use overture_domain::DeploymentError;
use overture_events::{DeploymentEvent, DeploymentId, Envelope};
use overture_kit::{DeploymentLog, ReadStream};
use overture_submit::again::{Redeploy, Redrive};
use overture_submit::{CloudSession, SubmitError};

use crate::backend::aws;
use crate::backend::aws::missing as missing_on_aws;
use crate::backend::embedded::{missing as no_such_deployment, print_end};
use crate::input::{parse_id, read_secrets};
use crate::lock::{DriveLock, EngineLock};
use crate::output::{print_view, Missing};
use crate::progress::Progress;
use crate::token::{CheckedToken, TokenArgs};
use crate::Failure;
use overture_embedded::Engine;

/// `overture redrive`.
#[derive(clap::Args)]
pub struct RedriveArgs {
    /// The failed deployment: its id, its name, or TENANT/NAME.
    pub id: String,
    #[command(flatten)]
    pub again: AgainArgs,
}

/// What `redrive` and `redeploy` are given again: the deployment's secrets were purged when it
/// ended, and the token it acted with is not kept.
#[derive(clap::Args)]
pub struct AgainArgs {
    #[command(flatten)]
    pub token: TokenArgs,
    /// A secret, as NAME=ENV_VAR: its value is read from that environment variable.
    #[arg(long = "secret", value_name = "NAME=ENV_VAR")]
    pub secrets: Vec<String>,
    /// How many steps may run at once.
    #[arg(long, default_value_t = 8)]
    pub parallelism: usize,
    /// Print the final status as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

impl AgainArgs {
    /// What is given again, for the deployment `id`.
    pub fn for_deployment<'a>(&'a self, id: &'a str) -> Again<'a> {
        Again {
            id,
            token: &self.token,
            secrets: &self.secrets,
            parallelism: self.parallelism,
            json: self.json,
            name: None,
        }
    }
}

/// What the user gives again: secrets, a token, and how to drive.
pub struct Again<'a> {
    /// The recorded deployment.
    pub id: &'a str,
    /// Its cloud token flags.
    pub token: &'a TokenArgs,
    /// `--secret NAME=ENV_VAR`, as on `deploy`.
    pub secrets: &'a [String],
    /// How many steps may run at once.
    pub parallelism: usize,
    /// Print the final status as JSON.
    pub json: bool,
    /// A redeploy's `--name` for the new deployment.
    pub name: Option<&'a str>,
}

/// `overture redrive ID`.
pub async fn redrive(data_dir: &Path, again: Again<'_>) -> Result<(), Failure> {
    let id = parse_id(again.id)?;
    let secrets = read_secrets(again.secrets)?;
    let tokens = again.token.check().await?;
    let engine = Engine::open(data_dir).await?;
    engine.preflight()?;
    let _lock = EngineLock::take(data_dir, false).map_err(|e| Failure::BadInput(e.to_string()))?;
    let recorded = engine.state(id).await?.cloud;
    let session = session_for(tokens, recorded.as_ref().map(|c| c.project_id.as_str()));
    let requested_by = requester(session.as_ref());
    let start = engine
        .log
        .head_position()
        .await
        .context("reading the log")?;
    engine
        .redrive(Redrive {
            deployment: id,
            requested_by: requested_by.clone(),
            secrets,
            cloud: session,
        })
        .await
        .map_err(|error| refused(&no_such_deployment, id, error))?;
    eprintln!("redriving deployment {id}");
    drive_to_end(&engine, data_dir, id, &requested_by, start, &again).await
}

/// `overture redeploy ID`.
pub async fn redeploy(data_dir: &Path, again: Again<'_>) -> Result<(), Failure> {
    let from = parse_id(again.id)?;
    let secrets = read_secrets(again.secrets)?;
    let tokens = again.token.check().await?;
    let engine = Engine::open(data_dir).await?;
    engine.preflight()?;
    let _lock = EngineLock::take(data_dir, false).map_err(|e| Failure::BadInput(e.to_string()))?;
    let first = engine
        .deployments
        .read_stream(from, 0)
        .await
        .context("reading the deployment's events")?;
    let request = redeploy_request(from, first, tokens, secrets, again.name)?
        .ok_or_else(|| no_such_deployment(from))?;
    let requested_by = request.requested_by.clone();
    let start = engine
        .log
        .head_position()
        .await
        .context("reading the log")?;
    let id = engine
        .redeploy(request)
        .await
        .map_err(|error| refused(&no_such_deployment, from, error))?;
    eprintln!("deployment {id} (a redeploy of {from})");
    drive_to_end(&engine, data_dir, id, &requested_by, start, &again).await
}

/// `overture --backend aws redrive ID`: recorded on the stack, then followed to its end.
pub async fn redrive_on_aws(again: Again<'_>) -> Result<(), Failure> {
    let id = parse_id(again.id)?;
    let secrets = read_secrets(again.secrets)?;
    let tokens = again.token.check().await?;
    let recorder = aws::recorder().await?;
    let loaded = recorder
        .log()
        .load(id)
        .await
        .context("reading the events table")?;
    let session = session_for(
        tokens,
        loaded.state.cloud.as_ref().map(|c| c.project_id.as_str()),
    );
    let redrive = Redrive {
        deployment: id,
        requested_by: requester(session.as_ref()),
        secrets,
        cloud: session,
    };
    match recorder.redrive(redrive).await {
        Ok(()) => {}
        Err(RunError::Submit(error)) => return Err(refused(&missing_on_aws, id, error)),
        Err(other) => return Err(Failure::Engine(other.into())),
    }
    eprintln!("redriving deployment {id}");
    // What it recorded before the redrive was shown when it ran.
    let shown = loaded.revision.map_or(0, |r| r + 1);
    follow_to_end(&recorder, id, shown, again.json).await
}

/// `overture --backend aws redeploy ID`: a new deployment recorded on the stack, then followed
/// to its end.
pub async fn redeploy_on_aws(again: Again<'_>) -> Result<(), Failure> {
    let from = parse_id(again.id)?;
    let secrets = read_secrets(again.secrets)?;
    let tokens = again.token.check().await?;
    let recorder = aws::recorder().await?;
    let first = recorder
        .log()
        .read_stream(from, 0)
        .await
        .context("reading the events table")?;
    if again.name.is_some() {
        return Err(Failure::BadInput(
            "--name: names are kept by the embedded engine (and `overture serve`); the \
             serverless form does not record them yet: leave out --name"
                .into(),
        ));
    }
    let request = redeploy_request(from, first, tokens, secrets, None)?
        .ok_or_else(|| missing_on_aws(from))?;
    let id = overture_submit::again::redeploy(request, &recorder.ports())
        .await
        .map_err(|error| refused(&missing_on_aws, from, error))?;
    eprintln!("deployment {id} (a redeploy of {from})");
    follow_to_end(&recorder, id, 0, again.json).await
}

/// Follows a deployment on the events table to its end, showing what it records from revision
/// `shown` on, and ends as `deploy` ends: 0 when it succeeded, 1 otherwise.
async fn follow_to_end(
    recorder: &aws::Recorder,
    id: DeploymentId,
    shown: u64,
    json: bool,
) -> Result<(), Failure> {
    let mut progress = Progress::new();
    let view = aws::follow(
        recorder.log(),
        id,
        &mut aws::FromRevision::new(shown, &mut progress),
    )
    .await?;
    print_view(&view, json);
    match view.status {
        overture_domain::projection::DeploymentStatus::Succeeded => Ok(()),
        _ => Err(Failure::Unsuccessful(String::new())),
    }
}

/// The redeploy of `from`, whose stream begins with `recorded`: its recorded request, with the
/// secrets and the token given again. `None` when it has no events.
fn redeploy_request(
    from: DeploymentId,
    recorded: Vec<Envelope>,
    tokens: Vec<CheckedToken>,
    secrets: SecretValues,
    name: Option<&str>,
) -> Result<Option<Redeploy>, Failure> {
    let Some(first) = recorded.into_iter().next() else {
        return Ok(None);
    };
    let Ok(DeploymentEvent::DeploymentRequested {
        tenant,
        blueprint,
        blueprint_hash,
        params,
        cloud: recorded_cloud,
        ..
    }) = DeploymentEvent::from_parts(&first.event_type, first.data)
    else {
        return Err(Failure::Engine(anyhow::anyhow!(
            "deployment {from}: its first event is not a readable DeploymentRequested"
        )));
    };
    let session = session_for(
        tokens,
        recorded_cloud.as_ref().map(|c| c.project_id.as_str()),
    );
    Ok(Some(Redeploy {
        from,
        tenant,
        requested_by: requester(session.as_ref()),
        blueprint,
        blueprint_hash,
        params,
        recorded_cloud,
        secrets,
        cloud: session,
        name: name.map(str::to_owned),
    }))
}

/// The token to act with: the one of the recorded project when there is one, else the only one
/// given (which the redrive then checks against the recorded project, or leaves unused).
fn session_for(tokens: Vec<CheckedToken>, project_id: Option<&str>) -> Option<CloudSession> {
    let mut tokens = tokens;
    let index = tokens
        .iter()
        .position(|t| Some(t.info.project_id.as_str()) == project_id)
        .or_else(|| (!tokens.is_empty()).then_some(0))?;
    let checked = tokens.swap_remove(index);
    Some(CloudSession {
        account: checked.info.account(),
        token: checked.token,
    })
}

/// Acting with a token, the requester is whom the cloud says the token belongs to.
fn requester(session: Option<&CloudSession>) -> String {
    session.map_or_else(crate::commands::cancel::local_user, |s| {
        s.account.user.clone()
    })
}

/// What to tell the user when the redrive or redeploy is not recorded.
fn refused(missing: Missing<'_>, id: DeploymentId, error: SubmitError) -> Failure {
    let message = match error {
        SubmitError::Refused(DeploymentError::NotRequested) => return missing(id),
        SubmitError::Refused(DeploymentError::RedriveWhileRunning) => format!(
            "deployment {id} is still running; only a failed deployment is redriven (`overture \
             status {id}` shows where it stands)"
        ),
        SubmitError::Refused(DeploymentError::RedriveSucceeded) => format!(
            "deployment {id} succeeded: nothing is left to redrive; `overture redeploy {id}` runs \
             it again as a new deployment"
        ),
        SubmitError::Refused(DeploymentError::RedriveCancelled) => format!(
            "deployment {id} was cancelled, so it is not redriven; `overture redeploy {id}` runs \
             it again as a new deployment"
        ),
        SubmitError::Refused(DeploymentError::RedriveDestroyed) => format!(
            "deployment {id}'s resources were destroyed, so it is not redriven; `overture \
             redeploy {id}` runs it again as a new deployment"
        ),
        SubmitError::Invalid(problems) => problems.to_string(),
        SubmitError::Log(taken @ overture_kit::LogError::NameTaken { .. }) => {
            return crate::input::name_taken(&taken)
        }
        other => return Failure::Engine(other.into()),
    };
    Failure::BadInput(message)
}

/// Drives the deployment to its end as `deploy` does, showing the events recorded since
/// `start`, and ends as `deploy` ends: 0 when it succeeded, 1 otherwise.
async fn drive_to_end(
    engine: &Arc<Engine>,
    data_dir: &Path,
    id: DeploymentId,
    requested_by: &str,
    start: u64,
    again: &Again<'_>,
) -> Result<(), Failure> {
    let _driving = DriveLock::take(data_dir, id).context("taking the drive lock")?;
    let mut progress = Progress::new();
    let drive = engine.drive(Some(id), again.parallelism, &mut progress, start);
    crate::commands::cancel::drive_cancelling_on_signal(engine, id, requested_by, drive).await?;
    print_end(engine, id, again.json).await
}
