//! Fixtures the step kinds' unit tests share: a requested deployment, one attempt's
//! [`StepInput`], the deployment's SSH key and a bastion, and what a sandboxed command did.

use std::path::PathBuf;
use std::time::Duration;

use overture_domain::secret::{SecretString, SecretValues, SSH_KEY_SECRET};
use overture_domain::{Deployment, DeploymentState};
use overture_events::{BlueprintSnapshot, DeploymentEvent, DeploymentId};

use crate::step::StepInput;
use crate::{SandboxExit, SandboxResult};

/// A private key's text, as the deployment's sealed secrets hold it (its last line not ended).
pub const SSH_KEY: &str = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----";

/// Secrets holding the deployment's SSH key, [`SSH_KEY`], and nothing else.
pub fn key_secrets() -> SecretValues {
    [(SSH_KEY_SECRET.to_owned(), SecretString::from(SSH_KEY))].into()
}

/// A blueprint's `bastion:`, its host given by the parameter `bastion`, so a test chooses what
/// it renders to; the parameter goes in the blueprint's `params`.
pub const BASTION: &str =
    "bastion: { host: '{{ params.bastion }}', security_group: sg-1, user: jumper }\n";

/// `DeploymentRequested` of `blueprint` with `params`, by user "u" of tenant "t".
pub fn requested_event(blueprint: &BlueprintSnapshot, params: &[(&str, &str)]) -> DeploymentEvent {
    DeploymentEvent::DeploymentRequested {
        triggered_by: None,
        tenant: "t".into(),
        requested_by: "u".into(),
        trigger: "cli".into(),
        source: "s".into(),
        blueprint: blueprint.clone(),
        blueprint_hash: "h".into(),
        params: pairs(params),
        cloud: None,
        name: None,
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
        // The fixtures record their files inline, as deployments did before the payload store.
        files: &state
            .blueprint
            .as_ref()
            .expect("a requested deployment")
            .files,
    }
}

/// A sandboxed command that exited with `code` at once, printed `output` and left the text
/// files `collected`.
pub fn sandbox_result(code: i32, output: &str, collected: &[(&str, &str)]) -> SandboxResult {
    SandboxResult {
        exit: SandboxExit::Code(code),
        output: output.as_bytes().to_vec(),
        outputs_file: crate::OutputsFile::default(),
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

/// The text of a file a kind's `prepare` put in the sandbox.
pub fn prepared_file(prepared: &crate::step::Prepared, name: &str) -> String {
    let (_, content) = prepared
        .files
        .iter()
        .find(|(path, _)| path.as_os_str() == name)
        .unwrap_or_else(|| panic!("no {name} among the prepared files"));
    String::from_utf8_lossy(content).into_owned()
}
