//! The bastion around an attempt: opened for the engine before the first step that goes
//! through it, and blamed after a step that could not connect when its rule was deleted.

use std::time::Duration;

use overture_domain::deployment::BastionAccess;
use overture_domain::secret::Masker;
use overture_domain::{DeploymentCommand, DeploymentError, DeploymentState};
use overture_events::{DeploymentId, ErrorClass};
use overture_kit::{execute, Cause};

use crate::record::Outcome;
use crate::step::StepInput;
use crate::{GrantError, RunnerError, RunnerPorts, ACTOR};

/// Opens the bastion for the engine before the first attempt that goes through it, and records
/// it (`BastionAccessGranted`); later steps share the open rule. The grant opens the
/// deployment's own lease on the rule, even when another deployment made it. Returns the access
/// the step goes through (`None` when it goes through no bastion), or the attempt's failure
/// when it cannot be opened: the retry policy then decides, as for any failed attempt.
pub(crate) async fn open(
    input: &StepInput<'_>,
    ports: &RunnerPorts<'_>,
    masker: &Masker,
) -> Result<Result<Option<BastionAccess>, Outcome>, RunnerError> {
    let state = input.state;
    let failure = |class, message: String| {
        Err(Outcome::Failure {
            class,
            exit_code: None,
            message: masker.mask(&format!("could not open the bastion: {message}")),
            duration: Duration::ZERO,
        })
    };
    let jump = match input.bastion() {
        Ok(Some(jump)) => jump,
        Ok(None) => return Ok(Ok(None)),
        Err(problem) => return Ok(failure(ErrorClass::StepFailed, problem)),
    };
    if let Some(open) = &state.bastion_access {
        return Ok(Ok(Some(open.clone())));
    }
    let Some(cloud) = &state.cloud else {
        return Ok(failure(
            ErrorClass::StepFailed,
            "the deployment was given no cloud token to act with".into(),
        ));
    };
    let group = state
        .blueprint
        .as_ref()
        .and_then(|b| b.bastion.as_ref())
        .map_or(Ok(String::new()), |bastion| {
            input.render(&bastion.security_group)
        });
    let group = match group {
        Ok(group) => group,
        Err(problem) => {
            return Ok(failure(
                ErrorClass::StepFailed,
                format!("its security group: {problem}"),
            ))
        }
    };
    let access = match ports
        .access
        .grant(input.deployment, cloud, &jump.address, &group)
        .await
    {
        Ok(access) => access,
        Err(GrantError::Backend(message)) => {
            return Ok(failure(ErrorClass::BackendUnreachable, message))
        }
        Err(GrantError::Refused(message)) => return Ok(failure(ErrorClass::StepFailed, message)),
    };
    let cause = Cause::new(ACTOR, input.deployment, uuid::Uuid::now_v7());
    let command = DeploymentCommand::RecordAccessGranted(access.clone());
    match execute(ports.log, input.deployment, "", &cause, |_| command.clone()).await? {
        // A step running beside this one opened it first, with the same rule.
        Ok(_) | Err(DeploymentError::AccessAlreadyGranted(_)) => Ok(Ok(Some(access))),
        Err(refused) => Ok(failure(ErrorClass::StepFailed, refused.to_string())),
    }
}

/// A step through the bastion that could not connect fails as `bastion-access-lost` when the
/// engine's rule is gone although the deployment still holds its lease on it: someone deleted
/// the rule, and blaming the servers (`bootstrap-timeout`, `host-unreachable`) would mislead.
pub(crate) async fn blame_a_lost_one(
    outcome: Outcome,
    state: &DeploymentState,
    deployment: DeploymentId,
    access: &BastionAccess,
    ports: &RunnerPorts<'_>,
) -> Outcome {
    let Outcome::Failure {
        class,
        exit_code,
        message,
        duration,
    } = outcome
    else {
        return outcome;
    };
    let connection_failed = matches!(
        class,
        ErrorClass::BootstrapTimeout | ErrorClass::HostUnreachable | ErrorClass::StepFailed
    );
    let still_granted = match &state.cloud {
        Some(cloud) if connection_failed => {
            ports.access.still_granted(deployment, cloud, access).await
        }
        _ => Ok(true),
    };
    match still_granted {
        Ok(false) => Outcome::Failure {
            class: ErrorClass::BastionAccessLost,
            exit_code,
            message: format!(
                "lost access to bastion {}: the engine's rule {} in security group {} was deleted \
                 while this deployment still held its lease on it (someone removed it outside \
                 Overture); the servers are not at fault. The step said: {message}",
                access.bastion, access.rule, access.security_group
            ),
            duration,
        },
        Ok(true) => Outcome::Failure {
            class,
            exit_code,
            message,
            duration,
        },
        Err(error) => {
            tracing::warn!(%deployment, rule = access.rule, %error, "could not check the bastion's rule; keeping the step's own failure");
            Outcome::Failure {
                class,
                exit_code,
                message,
                duration,
            }
        }
    }
}
