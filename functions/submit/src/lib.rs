//! The submit function: turns a user's request into a recorded deployment.
//!
//! [`submit`] validates the blueprint and the parameters, checks every declared secret was given
//! (and nothing else), seals the secret values through [`SealSecrets`], and appends
//! `DeploymentRequested` (and `CredentialsSealed`). Nothing is recorded for a request it refuses.

use std::collections::BTreeMap;

use async_trait::async_trait;
use overture_domain::blueprint::{self, BlueprintError, BlueprintProblem};
use overture_domain::secret::SecretValues;
use overture_domain::{DeploymentCommand, DeploymentError};
use overture_events::DeploymentId;
use overture_kit::{execute, Cause, DeploymentLog, LogError};
use uuid::Uuid;

/// A user's request for a deployment.
#[derive(Debug)]
pub struct Submission {
    /// Where the blueprint came from (a file name), for messages and the record.
    pub source: String,
    /// The blueprint's YAML text.
    pub text: String,
    /// The tenant deploying.
    pub tenant: String,
    /// The user asking.
    pub requested_by: String,
    /// What asked: `cli`, `http`, ...
    pub trigger: String,
    /// Parameter values given.
    pub params: BTreeMap<String, String>,
    /// Secret values given, by name.
    pub secrets: SecretValues,
}

/// Keeps a deployment's secret values sealed until it ends.
#[async_trait]
pub trait SealSecrets: Send + Sync {
    /// Seals the values for this deployment and returns a reference to them.
    async fn seal(
        &self,
        deployment: DeploymentId,
        tenant: &str,
        secrets: &SecretValues,
    ) -> Result<String, SealError>;
}

/// Sealing failed.
#[derive(Debug, thiserror::Error)]
#[error("could not seal the deployment's secrets: {0}")]
pub struct SealError(pub String);

/// The ports [`submit`] uses.
pub struct SubmitPorts<'a> {
    /// Where the deployment is recorded.
    pub log: &'a dyn DeploymentLog,
    /// Where its secrets are sealed.
    pub seals: &'a dyn SealSecrets,
}

/// Why a submission was not recorded.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    /// The blueprint, its parameters or its secrets are wrong; nothing was recorded.
    #[error("{0}")]
    Invalid(#[from] BlueprintError),
    /// The secrets could not be sealed; nothing was recorded.
    #[error(transparent)]
    Seal(#[from] SealError),
    /// The log could not record the request.
    #[error(transparent)]
    Log(#[from] LogError),
    /// The aggregate refused the request (an id collision).
    #[error("the deployment could not be requested: {0}")]
    Refused(#[from] DeploymentError),
}

/// Validates, seals and records a deployment; returns its id.
pub async fn submit(
    submission: Submission,
    ports: &SubmitPorts<'_>,
) -> Result<DeploymentId, SubmitError> {
    let parsed = blueprint::parse(&submission.text)?;
    let params = blueprint::resolve_params(&parsed.snapshot, &submission.params)?;
    check_secrets(&parsed.snapshot.secrets, &submission.secrets)?;

    let deployment = DeploymentId::from_uuid(Uuid::now_v7());
    let sealed = if parsed.snapshot.secrets.is_empty() {
        None
    } else {
        let seal = ports
            .seals
            .seal(deployment, &submission.tenant, &submission.secrets)
            .await?;
        Some((seal, parsed.snapshot.secrets.clone()))
    };
    let cause = Cause::new(
        submission.requested_by.clone(),
        deployment,
        deployment.uuid(),
    );
    let command = DeploymentCommand::Request {
        tenant: submission.tenant.clone(),
        requested_by: submission.requested_by,
        trigger: submission.trigger,
        source: submission.source,
        blueprint: parsed.snapshot,
        blueprint_hash: parsed.hash,
        params,
        sealed,
    };
    execute(ports.log, deployment, &submission.tenant, &cause, |_| {
        command.clone()
    })
    .await??;
    Ok(deployment)
}

fn check_secrets(declared: &[String], given: &SecretValues) -> Result<(), BlueprintError> {
    let mut problems = Vec::new();
    for name in declared.iter().filter(|name| !given.contains_key(*name)) {
        problems.push(BlueprintProblem {
            field: format!("secrets.{name}"),
            problem: format!("no value given; pass --secret {name}=ENV_VAR with the value in that environment variable"),
        });
    }
    for name in given.keys().filter(|name| !declared.contains(name)) {
        problems.push(BlueprintProblem {
            field: format!("--secret {name}"),
            problem: "the blueprint declares no such secret; list it under `secrets`".into(),
        });
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(BlueprintError(problems))
    }
}
