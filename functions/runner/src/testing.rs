//! Fixtures the step kinds' unit tests share: a requested deployment, one attempt's
//! [`StepInput`], and what a sandboxed command did.

use std::path::PathBuf;
use std::time::Duration;

use overture_domain::secret::SecretValues;
use overture_domain::{Deployment, DeploymentState};
use overture_events::{BlueprintSnapshot, DeploymentEvent, DeploymentId};

use crate::step::StepInput;
use crate::{SandboxExit, SandboxResult};

/// `DeploymentRequested` of `blueprint` with `params`, by user "u" of tenant "t".
pub fn requested_event(blueprint: &BlueprintSnapshot, params: &[(&str, &str)]) -> DeploymentEvent {
    DeploymentEvent::DeploymentRequested {
        tenant: "t".into(),
        requested_by: "u".into(),
        trigger: "cli".into(),
        source: "s".into(),
        blueprint: blueprint.clone(),
        blueprint_hash: "h".into(),
        params: pairs(params),
    }
}

/// The deployment once [`requested_event`] is all that happened to it.
pub fn requested(blueprint: &BlueprintSnapshot, params: &[(&str, &str)]) -> DeploymentState {
    Deployment::apply(
        DeploymentState::default(),
        requested_event(blueprint, params),
    )
}

/// `StepSucceeded` of `step`'s first attempt, with `outputs`.
pub fn succeeded(step: &str, outputs: &[(&str, &str)]) -> DeploymentEvent {
    DeploymentEvent::StepSucceeded {
        step: step.into(),
        attempt: 1,
        outputs: pairs(outputs),
        duration_ms: 0,
    }
}

/// The first attempt of `step` of the deployment's blueprint, with nothing kept from before.
pub fn input<'a>(
    state: &'a DeploymentState,
    step: &str,
    secrets: &'a SecretValues,
) -> StepInput<'a> {
    StepInput {
        state,
        spec: state
            .blueprint
            .as_ref()
            .and_then(|blueprint| blueprint.step(step))
            .expect(step),
        secrets,
        deployment: DeploymentId::from_uuid(uuid::Uuid::nil()),
        attempt: 1,
        kept: None,
    }
}

/// A sandboxed command that exited with `code` at once, printed `output` and left the text
/// files `collected`.
pub fn sandbox_result(code: i32, output: &str, collected: &[(&str, &str)]) -> SandboxResult {
    SandboxResult {
        exit: SandboxExit::Code(code),
        output: output.as_bytes().to_vec(),
        outputs_file: vec![],
        duration: Duration::ZERO,
        collected: collected
            .iter()
            .map(|(path, content)| (PathBuf::from(path), content.as_bytes().to_vec()))
            .collect(),
    }
}

fn pairs<T: FromIterator<(String, String)>>(pairs: &[(&str, &str)]) -> T {
    pairs
        .iter()
        .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
        .collect()
}
