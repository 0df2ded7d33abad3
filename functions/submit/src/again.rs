//! Running a recorded deployment again: [`redrive`] carries a failed deployment on in its own
//! stream; [`redeploy`] records a new deployment of the same request.
//!
//! Both seal anew what the user gives again: the deployment's secrets were purged when it
//! ended, so they are given again, and so is the cloud token of a deployment that acts with one
//! (it must be a token of the same project: the tenant does not change).

use std::collections::BTreeMap;

use overture_domain::blueprint::{BlueprintError, BlueprintProblem};
use overture_domain::kind::{self, Kind};
use overture_domain::secret::SecretValues;
use overture_domain::{
    Deployment, DeploymentCommand, DeploymentError, DeploymentState, StepStatus,
};
use overture_events::{BlueprintSnapshot, CloudAccount, DeploymentId};
use overture_kit::Cause;
use uuid::Uuid;

use crate::{
    check_secrets, needs_cloud, record_and_advance, seal_for, CloudSession, SubmitError,
    SubmitPorts,
};

/// What a redeploy's `DeploymentRequested` names as its trigger.
pub const REDEPLOY_TRIGGER: &str = "redeploy";

/// A user's request to carry a failed deployment on.
#[derive(Debug)]
pub struct Redrive {
    /// The failed deployment.
    pub deployment: DeploymentId,
    /// The user asking.
    pub requested_by: String,
    /// The blueprint's secrets, given again.
    pub secrets: SecretValues,
    /// A cloud token of the deployment's project, when it acts with one.
    pub cloud: Option<CloudSession>,
}

/// Checks, seals and records a redrive (`DeploymentRedriven`, and `CredentialsSealed` when
/// anything was sealed), with the steps it makes ready scheduled in the same append. A refused
/// redrive seals and records nothing.
pub async fn redrive(request: Redrive, ports: &SubmitPorts<'_>) -> Result<(), SubmitError> {
    let deployment = request.deployment;
    let state = ports.log.load(deployment).await?.state;
    // Asked first with nothing sealed, so that a refusal leaves no seal behind.
    Deployment::handle(
        &state,
        DeploymentCommand::Redrive {
            requested_by: request.requested_by.clone(),
            sealed: None,
        },
    )?;
    let blueprint = state
        .blueprint
        .as_ref()
        .ok_or(SubmitError::Refused(DeploymentError::NotRequested))?;
    check_secrets(&blueprint.secrets, &request.secrets)?;
    keys_still_trusted(&state)?;
    let cloud = same_project(state.cloud.as_ref(), request.cloud)?;
    let (_, sealed) = seal_for(
        deployment,
        &state.tenant,
        blueprint,
        request.secrets,
        cloud,
        ports.seals,
    )
    .await?;
    let cause = Cause::new(request.requested_by.clone(), deployment, Uuid::now_v7());
    let command = DeploymentCommand::Redrive {
        requested_by: request.requested_by,
        sealed,
    };
    record_and_advance(ports, deployment, &state.tenant, &cause, command).await
}

/// A user's request to run a recorded deployment's request again, as a new deployment.
#[derive(Debug)]
pub struct Redeploy {
    /// The deployment whose request is run again.
    pub from: DeploymentId,
    /// Its tenant.
    pub tenant: String,
    /// The user asking.
    pub requested_by: String,
    /// Its blueprint as recorded; its files are in the payload store, by hash.
    pub blueprint: BlueprintSnapshot,
    /// Its blueprint's hash as recorded.
    pub blueprint_hash: String,
    /// Its parameters as recorded (defaults filled in).
    pub params: BTreeMap<String, String>,
    /// The cloud account it acted for, if any.
    pub recorded_cloud: Option<CloudAccount>,
    /// The blueprint's secrets, given again.
    pub secrets: SecretValues,
    /// A cloud token of the same project, when it acted with one.
    pub cloud: Option<CloudSession>,
    /// The new deployment's name, when the user gave one (it never inherits the old one's,
    /// which that one holds until it is destroyed).
    pub name: Option<String>,
}

/// Seals and records a new deployment of a recorded request, with its first steps scheduled in
/// the same append, as [`crate::submit`] does; its `DeploymentRequested` says
/// `trigger: redeploy` and `source: deployment:ID`. Returns the new deployment's id.
pub async fn redeploy(
    request: Redeploy,
    ports: &SubmitPorts<'_>,
) -> Result<DeploymentId, SubmitError> {
    // Recorded before every door checked what the engine needs, it may hold what no step can
    // run: refused before anything is sealed.
    let unrunnable = overture_domain::blueprint::recorded_problems(&request.blueprint);
    if !unrunnable.is_empty() {
        return Err(SubmitError::Invalid(BlueprintError(unrunnable)));
    }
    check_secrets(&request.blueprint.secrets, &request.secrets)?;
    let cloud = same_project(request.recorded_cloud.as_ref(), request.cloud)?;
    if needs_cloud(&request.blueprint) && cloud.is_none() {
        return Err(token_problem("this blueprint acts in a cloud; give a cloud token of its project with --token-file FILE or OS_TOKEN".into()));
    }
    let deployment = DeploymentId::from_uuid(Uuid::now_v7());
    let (account, sealed) = seal_for(
        deployment,
        &request.tenant,
        &request.blueprint,
        request.secrets,
        cloud,
        ports.seals,
    )
    .await?;
    let cause = Cause::new(request.requested_by.clone(), deployment, deployment.uuid());
    let command = DeploymentCommand::Request {
        triggered_by: None,
        tenant: request.tenant.clone(),
        requested_by: request.requested_by,
        trigger: REDEPLOY_TRIGGER.into(),
        source: format!("deployment:{}", request.from),
        blueprint: request.blueprint,
        blueprint_hash: request.blueprint_hash,
        params: request.params,
        cloud: account,
        sealed,
        name: request.name,
    };
    record_and_advance(ports, deployment, &request.tenant, &cause, command).await?;
    Ok(deployment)
}

/// The token to act with: one of the recorded account's project when the deployment acted with
/// a token, none otherwise (a deployment without a cloud account never needs one).
fn same_project(
    recorded: Option<&CloudAccount>,
    given: Option<CloudSession>,
) -> Result<Option<CloudSession>, SubmitError> {
    let Some(recorded) = recorded else {
        return Ok(None);
    };
    match given {
        Some(session) if session.account.project_id == recorded.project_id => Ok(Some(session)),
        Some(session) => Err(token_problem(format!(
            "the token is for project `{}`, and the deployment acts for project `{}`; give a \
             token of that project",
            session.account.project, recorded.project
        ))),
        None => Err(token_problem(format!(
            "the deployment acts with a cloud token of project `{}`, and its seal was purged when \
             it ended; give a token of that project with --token-file FILE or OS_TOKEN",
            recorded.project
        ))),
    }
}

/// Refuses a redrive whose servers would not let it in: a run seals a new SSH key of the
/// deployment's (the old private half was purged with the secrets), and servers that a
/// succeeded `servers` step made trust only the old one.
fn keys_still_trusted(state: &DeploymentState) -> Result<(), SubmitError> {
    let Some(blueprint) = &state.blueprint else {
        return Ok(());
    };
    let made_servers = blueprint.steps.iter().any(|spec| {
        kind::is(spec, Kind::Servers)
            && state
                .steps
                .get(&spec.name)
                .is_some_and(|s| s.status == StepStatus::Succeeded)
    });
    if made_servers {
        return Err(SubmitError::Invalid(BlueprintError(vec![BlueprintProblem {
            field: "redrive".into(),
            problem: "its servers were made for the deployment's SSH key, which was purged when                       it ended, and a redrive would come with a new one; redeploy it instead"
                .into(),
        }])));
    }
    Ok(())
}

fn token_problem(problem: String) -> SubmitError {
    SubmitError::Invalid(BlueprintError(vec![BlueprintProblem {
        field: "--token-file".into(),
        problem,
    }]))
}
