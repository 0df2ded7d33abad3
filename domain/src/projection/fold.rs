//! Applying one [`Change`] to a deployment's view: one match from change to what it sets.

use std::collections::BTreeSet;

use overture_events::Timestamp;

use super::grants;
use super::{Change, DeploymentStatus, DeploymentView, DestroyStatus, DestroyView, StepView};
use crate::deployment::StepStatus;

/// Folds `change` into `view`, adding the steps it changes to `touched` (`None`: they are
/// written anyway).
pub(super) fn fold(
    view: &mut DeploymentView,
    change: Change,
    at: Timestamp,
    touched: Option<&mut BTreeSet<String>>,
) {
    let mut steps = Steps { touched };
    match change {
        Change::StepScheduled { step } => {
            steps.change(view, step, |s| s.status = StepStatus::Scheduled)
        }
        Change::StepRetryScheduled { step } => {
            steps.change(view, step, |s| s.status = StepStatus::Retrying)
        }
        Change::StepAwaitingServices { step } => {
            steps.change(view, step, |s| s.status = StepStatus::Awaiting)
        }
        // Its outputs stay until the new attempt replaces them: nothing else runs again.
        Change::StepRerun { step } => {
            steps.change(view, step, |s| {
                s.status = StepStatus::Pending;
                s.finished_at = None;
            });
            run_again(view);
        }
        Change::StepStarted { step, attempt } => steps.change(view, step, |s| {
            s.status = StepStatus::Running;
            s.attempts = s.attempts.max(attempt);
            s.started_at.get_or_insert(at);
        }),
        Change::StepSucceeded { step, outputs } => steps.change(view, step, |s| {
            s.status = StepStatus::Succeeded;
            s.outputs = outputs;
            s.finished_at = Some(at);
        }),
        Change::StepAttemptFailed { step, error_class } => {
            steps.change(view, step, |s| s.error_class = Some(error_class))
        }
        Change::StepFailed { step } => steps.change(view, step, |s| {
            s.status = StepStatus::Failed;
            s.finished_at = Some(at);
        }),
        Change::StepAbandoned { step } => steps.change(view, step, |s| {
            s.status = StepStatus::Abandoned;
            s.finished_at = Some(at);
        }),
        Change::Succeeded => finish(view, DeploymentStatus::Succeeded, None, at),
        Change::Failed { reason } => finish(view, DeploymentStatus::Failed, Some(reason), at),
        Change::Cancelled { reason } => finish(view, DeploymentStatus::Cancelled, Some(reason), at),
        Change::DestroyRequested => set_destroy(view, DestroyStatus::Destroying, None, at),
        Change::StepDestroyFailed { step, exit_code } => {
            let reason = destroy_failure(&step, exit_code);
            set_destroy(view, DestroyStatus::Failed, Some(reason), at)
        }
        Change::Destroyed => set_destroy(view, DestroyStatus::Destroyed, None, at),
        Change::Redriven { steps: names } => {
            for step in names {
                steps.change(view, step, |s| {
                    s.status = StepStatus::Pending;
                    s.finished_at = None;
                    s.outputs.clear();
                });
            }
            run_again(view);
        }
        Change::CredentialsSealed {
            seal,
            ssh_public_key,
            token,
        } => grants::sealed(view, seal, ssh_public_key, token, at),
        Change::BastionAccessGranted {
            rule,
            security_group,
            bastion,
            source,
            port,
        } => grants::bastion_granted(view, rule, security_group, bastion, source, port, at),
        Change::BastionAccessRevoked { kept_for } => grants::bastion_revoked(view, kept_for, at),
        Change::SecretsPurged => grants::purged(view, at),
        Change::Requested { .. }
        | Change::ServiceRegistered { .. }
        | Change::ServiceDeregistered { .. }
        | Change::Nothing => {}
    }
}

/// The steps a fold changed, when they are counted.
struct Steps<'t> {
    touched: Option<&'t mut BTreeSet<String>>,
}

impl Steps<'_> {
    /// Changes the step named `name`, if the view has it, and counts it as changed.
    fn change(
        &mut self,
        view: &mut DeploymentView,
        name: String,
        change: impl FnOnce(&mut StepView),
    ) {
        if let Some(s) = view.steps.get_mut(&name) {
            change(s);
            if let Some(touched) = self.touched.as_mut() {
                touched.insert(name);
            }
        }
    }
}

/// A step runs again: the deployment is running once more, its end forgotten.
fn run_again(view: &mut DeploymentView) {
    view.status = DeploymentStatus::Running;
    view.reason = None;
    view.finished_at = None;
}

/// Why tearing the deployment down failed, for people.
fn destroy_failure(step: &str, exit_code: Option<i32>) -> String {
    let how = exit_code.map_or_else(String::new, |code| format!(" (exit code {code})"));
    format!("destroying step `{step}` failed{how}")
}

fn set_destroy(
    view: &mut DeploymentView,
    status: DestroyStatus,
    reason: Option<String>,
    at: Timestamp,
) {
    view.destroy = Some(DestroyView { status, at, reason });
}

fn finish(
    view: &mut DeploymentView,
    status: DeploymentStatus,
    reason: Option<String>,
    at: Timestamp,
) {
    view.status = status;
    view.reason = reason;
    view.finished_at = Some(at);
}
