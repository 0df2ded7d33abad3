//! `overture redrive ID` and `overture redeploy ID`: running a recorded deployment again.
//!
//! A redrive carries a failed deployment on in its own stream from its failed and abandoned
//! steps (the aggregate decides which, and refuses a deployment that did not fail); a redeploy
//! records a new deployment of the same request and blueprint snapshot. Either way the secrets
//! and the cloud token are given again ([`overture_submit::again`] seals them), and the
//! deployment is driven to its end as `deploy` drives it: same progress, same exit codes.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use overture_domain::DeploymentError;
use overture_events::{DeploymentEvent, DeploymentId};
use overture_kit::ReadStream;
use overture_submit::again::{Redeploy, Redrive};
use overture_submit::{CloudSession, SubmitError};

use crate::engine::Engine;
use crate::lock::{DriveLock, EngineLock};
use crate::progress::Progress;
use crate::token::{CheckedToken, TokenArgs};
use crate::{no_such_deployment, parse_id, read_secrets, Backend, Failure};

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
}

/// `overture redrive ID`.
pub async fn redrive(data_dir: &Path, again: Again<'_>) -> Result<(), Failure> {
    let id = parse_id(again.id)?;
    let secrets = read_secrets(again.secrets)?;
    let tokens = again.token.check().await?;
    let engine = Engine::open(data_dir).await?;
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
        .map_err(|error| refused(id, error))?;
    eprintln!("redriving deployment {id}");
    drive_to_end(&engine, data_dir, id, &requested_by, start, &again).await
}

/// `overture redeploy ID`.
pub async fn redeploy(data_dir: &Path, again: Again<'_>) -> Result<(), Failure> {
    let from = parse_id(again.id)?;
    let secrets = read_secrets(again.secrets)?;
    let tokens = again.token.check().await?;
    let engine = Engine::open(data_dir).await?;
    let _lock = EngineLock::take(data_dir, false).map_err(|e| Failure::BadInput(e.to_string()))?;
    let first = engine
        .deployments
        .read_stream(from, 0)
        .await
        .context("reading the deployment's events")?
        .into_iter()
        .next()
        .ok_or_else(|| no_such_deployment(from))?;
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
    let requested_by = requester(session.as_ref());
    let start = engine
        .log
        .head_position()
        .await
        .context("reading the log")?;
    let id = engine
        .redeploy(Redeploy {
            from,
            tenant,
            requested_by: requested_by.clone(),
            blueprint,
            blueprint_hash,
            params,
            recorded_cloud,
            secrets,
            cloud: session,
        })
        .await
        .map_err(|error| refused(from, error))?;
    eprintln!("deployment {id} (a redeploy of {from})");
    drive_to_end(&engine, data_dir, id, &requested_by, start, &again).await
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
    session.map_or_else(crate::cancel::local_user, |s| s.account.user.clone())
}

/// What to tell the user when the redrive or redeploy is not recorded.
fn refused(id: DeploymentId, error: SubmitError) -> Failure {
    let message = match error {
        SubmitError::Refused(DeploymentError::NotRequested) => return no_such_deployment(id),
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
    crate::cancel::drive_cancelling_on_signal(engine, id, requested_by, drive).await?;
    engine.project().await?;
    let view = crate::print_status(
        &engine.queries(),
        Backend::Embedded,
        &id.to_string(),
        again.json,
    )
    .await?;
    match view.status {
        overture_domain::projection::DeploymentStatus::Succeeded => Ok(()),
        _ => Err(Failure::Unsuccessful(String::new())),
    }
}
