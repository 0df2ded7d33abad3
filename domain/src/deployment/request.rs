//! Requesting a deployment: a blueprint the engine can run is recorded, with what was sealed.

use std::collections::BTreeMap;

use overture_events::{BlueprintSnapshot, CloudAccount, DeploymentEvent, TriggeredBy};

use super::seal::credentials_sealed;
use super::{DeploymentError, SealedCredentials};

/// What a request carries, as [`super::DeploymentCommand::Request`] has it.
pub(super) struct Request {
    pub tenant: String,
    pub requested_by: String,
    pub trigger: String,
    pub source: String,
    pub blueprint: BlueprintSnapshot,
    pub blueprint_hash: String,
    pub params: BTreeMap<String, String>,
    pub cloud: Option<CloudAccount>,
    pub sealed: Option<SealedCredentials>,
    pub triggered_by: Option<TriggeredBy>,
    pub name: Option<String>,
}

/// The request's events, or the problems that keep the engine from running it.
pub(super) fn request(request: Request) -> Result<Vec<DeploymentEvent>, DeploymentError> {
    let Request {
        tenant,
        requested_by,
        trigger,
        source,
        blueprint,
        blueprint_hash,
        params,
        cloud,
        sealed,
        triggered_by,
        name,
    } = request;
    let mut problems = crate::blueprint::recorded_problems(&blueprint);
    problems.extend(params.iter().filter_map(|(name, value)| {
        Some(crate::blueprint::BlueprintProblem {
            field: format!("params.{name}"),
            problem: format!("the value {}", crate::inputs::nul_problem(value)?),
        })
    }));
    if let Some(Err(error)) = name.as_deref().map(crate::text::check_deployment_name) {
        problems.push(crate::blueprint::BlueprintProblem {
            field: "name".into(),
            problem: error.to_string(),
        });
    }
    if !problems.is_empty() {
        return Err(DeploymentError::Unrunnable(
            crate::blueprint::BlueprintError(problems),
        ));
    }
    let requested = DeploymentEvent::DeploymentRequested {
        tenant,
        requested_by,
        trigger,
        source,
        blueprint,
        blueprint_hash,
        params,
        cloud,
        triggered_by,
        name,
    };
    let sealed = sealed.map(credentials_sealed);
    Ok(std::iter::once(requested).chain(sealed).collect())
}
