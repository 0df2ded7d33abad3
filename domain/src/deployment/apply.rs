//! The fold: how each event changes the deployment's state. Events that change nothing are
//! named here too, so that the match says so for every event.

use std::collections::BTreeMap;
use std::sync::Arc;

use overture_events::{
    BlueprintSnapshot, CloudAccount, DeploymentEvent, ErrorClass, Timestamp, TriggeredBy,
};

use super::{
    BastionAccess, Deployment, DeploymentState, Destroy, Outcome, Phase, PinnedHost, StepState,
    StepStatus, Steps,
};
use crate::services::{self, ServiceInstance};

impl Deployment {
    /// Folds one event into the state.
    pub fn apply(mut state: DeploymentState, event: DeploymentEvent) -> DeploymentState {
        use DeploymentEvent as E;
        match event {
            E::DeploymentRequested {
                tenant,
                blueprint,
                params,
                cloud,
                triggered_by,
                ..
            } => requested(&mut state, tenant, blueprint, params, cloud, triggered_by),
            E::CredentialsSealed {
                seal,
                ssh_public_key,
                ..
            } => {
                state.seal = Some(seal);
                state.ssh_public_key = ssh_public_key;
            }
            E::BastionAccessGranted {
                rule,
                security_group,
                bastion,
                source,
                port,
            } => {
                state.bastion_access = Some(BastionAccess {
                    rule,
                    security_group,
                    bastion,
                    source,
                    port,
                })
            }
            E::BastionAccessRevoked { .. } => state.bastion_access = None,
            E::HostKeysPinned {
                server,
                host,
                learned,
                keys,
            } => {
                state.host_keys.insert(
                    host.clone(),
                    PinnedHost {
                        server,
                        host,
                        learned,
                        keys,
                    },
                );
            }
            E::StepScheduled {
                step,
                attempt,
                not_before,
            }
            | E::StepRetryScheduled {
                step,
                next_attempt: attempt,
                not_before,
                ..
            } => scheduled(&mut state, &step, attempt, not_before),
            E::StepAwaitingServices { .. }
            | E::ServicesResolved { .. }
            | E::ServiceRegistered { .. }
            | E::ServiceDeregistered { .. } => services_changed(&mut state, event),
            E::StepRerunRequested { step, .. } => rerun(&mut state, &step),
            E::StepStarted { .. } | E::StepSucceeded { .. } => attempt_moved(&mut state, event),
            E::StepAttemptFailed { .. } | E::StepJobDeadLettered { .. } => {}
            E::StepFailed {
                step,
                attempts,
                error_class,
            } => step_failed(&mut state, step, attempts, error_class),
            E::FailureGracePeriodStarted { deadline, .. } => {
                if let Phase::Failing { deadline: slot, .. } = &mut state.phase {
                    *slot = Some(deadline);
                }
            }
            E::StepAbandoned { step, .. } => state.steps.update(&step, |s| {
                s.status = StepStatus::Abandoned;
                s.not_before = None;
                s.awaiting = None;
            }),
            E::SecretsPurged {} => state.secrets_purged = true,
            E::DeploymentSucceeded {} => state.phase = Phase::Finished(Outcome::Succeeded),
            E::DeploymentFailed { .. } => state.phase = Phase::Finished(Outcome::Failed),
            E::CancellationRequested {
                requested_by,
                reason,
            } => {
                state.phase = Phase::Cancelling {
                    requested_by,
                    reason,
                }
            }
            E::DeploymentCancelled { .. } => state.phase = Phase::Finished(Outcome::Cancelled),
            E::DestroyRequested { .. }
            | E::StepDestroyed { .. }
            | E::StepDestroyFailed { .. }
            | E::DeploymentDestroyed {} => destroying(&mut state, event),
            E::DeploymentRedriven { steps, .. } => redriven(&mut state, &steps),
            // For the audit trail only.
            E::StepNetworkPolicyApplied { .. } => {}
        }
        state
    }
}

/// A new deployment: every step pending, the deployment running.
fn requested(
    state: &mut DeploymentState,
    tenant: String,
    blueprint: BlueprintSnapshot,
    params: BTreeMap<String, String>,
    cloud: Option<CloudAccount>,
    triggered_by: Option<TriggeredBy>,
) {
    state.cloud = cloud;
    state.triggered_by = triggered_by;
    let fresh = StepState {
        status: StepStatus::Pending,
        attempt: 0,
        not_before: None,
        outputs: BTreeMap::new(),
        lease_until: None,
        first_attempt: 1,
        awaiting: None,
        services: BTreeMap::new(),
        started_fingerprint: None,
        fingerprint: None,
    };
    state.steps = Steps::new(&blueprint, &fresh);
    state.tenant = tenant;
    state.blueprint = Some(Arc::new(blueprint));
    state.params = params;
    state.phase = Phase::Running;
}

/// An attempt waits to start: the run's first (scheduled) or a later one (retrying).
fn scheduled(state: &mut DeploymentState, step: &str, attempt: u32, not_before: Timestamp) {
    // The run's first attempt is scheduled; any later one is a retry.
    let retry = state
        .steps
        .get(step)
        .is_some_and(|s| attempt > s.first_attempt);
    state.steps.update(step, |s| {
        s.status = if retry {
            StepStatus::Retrying
        } else {
            StepStatus::Scheduled
        };
        s.attempt = attempt;
        s.not_before = Some(not_before);
        s.awaiting = None;
    });
}

/// An attempt started, or succeeded: a success keeps what its attempt ran with as the step's.
fn attempt_moved(state: &mut DeploymentState, event: DeploymentEvent) {
    match event {
        DeploymentEvent::StepStarted {
            step,
            lease_until,
            fingerprint,
            ..
        } => state.steps.update(&step, |s| {
            s.status = StepStatus::Running;
            s.not_before = None;
            s.lease_until = lease_until;
            s.started_fingerprint = fingerprint;
        }),
        DeploymentEvent::StepSucceeded { step, outputs, .. } => state.steps.update(&step, |s| {
            s.status = StepStatus::Succeeded;
            s.outputs = outputs;
            s.fingerprint = s.started_fingerprint.clone();
        }),
        _ => {}
    }
}

/// A watching step runs again as a new run; a deployment that had succeeded runs again.
fn rerun(state: &mut DeploymentState, step: &str) {
    state.steps.update(step, |s| {
        s.status = StepStatus::Pending;
        s.first_attempt = s.attempt.saturating_add(1);
        s.not_before = None;
        s.lease_until = None;
    });
    if state.phase == Phase::Finished(Outcome::Succeeded) {
        state.phase = Phase::Running;
    }
}

/// A step failed for good: the first such failure starts the deployment failing, with its
/// reason.
fn step_failed(state: &mut DeploymentState, step: String, attempts: u32, error_class: ErrorClass) {
    let awaited = state
        .steps
        .get(&step)
        .and_then(|s| s.awaiting.as_ref())
        .map(|(_, waiting_for)| waiting_for.clone());
    state.steps.update(&step, |s| {
        s.status = StepStatus::Failed;
        s.not_before = None;
        s.awaiting = None;
    });
    if state.phase == Phase::Running {
        let reason = match (error_class, awaited) {
            (ErrorClass::ServiceTimeout, Some(waiting_for)) => format!(
                "step `{step}` timed out waiting for {} ({error_class})",
                services::shortfalls_text(&waiting_for)
            ),
            _ => format!("step `{step}` failed after {attempts} attempt(s) ({error_class})"),
        };
        state.phase = Phase::Failing {
            reason,
            deadline: None,
        };
    }
}

/// The services a step waits for or sees, and the instances the deployment registered.
fn services_changed(state: &mut DeploymentState, event: DeploymentEvent) {
    use DeploymentEvent as E;
    match event {
        E::StepAwaitingServices {
            step,
            waiting_for,
            deadline,
        } => state.steps.update(&step, |s| {
            s.status = StepStatus::Awaiting;
            s.awaiting = Some((deadline, waiting_for));
        }),
        E::ServicesResolved { step, services } => {
            state.steps.update(&step, |s| s.services = services)
        }
        E::ServiceRegistered {
            service,
            step,
            host,
            address,
            port,
        } => {
            let instance = ServiceInstance {
                service,
                step,
                host,
                address,
                port,
            };
            if !state.registrations.contains(&instance) {
                state.registrations.push(instance);
            }
        }
        E::ServiceDeregistered {
            service,
            address,
            port,
            ..
        } => state.registrations.retain(|instance| {
            !(instance.service == service && instance.address == address && instance.port == port)
        }),
        _ => {}
    }
}

/// Tearing down: what remains to destroy, and whether the last try failed.
fn destroying(state: &mut DeploymentState, event: DeploymentEvent) {
    match event {
        DeploymentEvent::DestroyRequested { steps } => {
            state.destroy = Some(Destroy {
                remaining: steps,
                failed: false,
            })
        }
        DeploymentEvent::StepDestroyed { step, .. } => {
            if let Some(destroy) = &mut state.destroy {
                destroy.remaining.retain(|s| *s != step);
            }
        }
        DeploymentEvent::StepDestroyFailed { .. } => {
            if let Some(destroy) = &mut state.destroy {
                destroy.failed = true;
            }
        }
        DeploymentEvent::DeploymentDestroyed {} => {
            state.destroy = Some(Destroy::default());
        }
        _ => {}
    }
}

/// A failed deployment carried on: its steps that did not succeed run again, with a new seal.
fn redriven(state: &mut DeploymentState, steps: &[String]) {
    for name in steps {
        state.steps.update(name, |s| {
            s.status = StepStatus::Pending;
            s.first_attempt = s.attempt.saturating_add(1);
            s.not_before = None;
            s.lease_until = None;
            s.outputs.clear();
        });
    }
    // The last run purged its seal; what this run needs is sealed anew, if anything.
    state.seal = None;
    state.ssh_public_key = None;
    state.secrets_purged = false;
    state.phase = Phase::Running;
}
