//! Tearing a finished deployment's resources down, step by step, dependents first.

use overture_events::DeploymentEvent;

use super::{DeploymentError, DeploymentState};

/// Starts tearing a finished deployment down, or carries on after a failure.
pub(super) fn request_destroy(
    state: &DeploymentState,
) -> Result<Vec<DeploymentEvent>, DeploymentError> {
    match &state.destroy {
        Some(destroy) if destroy.is_done() => Err(DeploymentError::AlreadyDestroyed),
        // Under way and not stopped: carrying on needs no new event.
        Some(destroy) if !destroy.failed => Ok(vec![]),
        Some(destroy) => Ok(vec![DeploymentEvent::DestroyRequested {
            steps: destroy.remaining.clone(),
        }]),
        None => {
            let steps = destroyable_steps(state);
            let nothing_to_destroy = steps.is_empty();
            // Its instances leave the registry before anything is torn down, so that whoever
            // watches them stops sending them work first.
            let mut events: Vec<DeploymentEvent> = state
                .registrations
                .iter()
                .map(|instance| DeploymentEvent::ServiceDeregistered {
                    service: instance.service.clone(),
                    step: instance.step.clone(),
                    host: instance.host.clone(),
                    address: instance.address.clone(),
                    port: instance.port,
                    reason: "its deployment is being destroyed".into(),
                })
                .collect();
            events.push(DeploymentEvent::DestroyRequested { steps });
            if nothing_to_destroy {
                events.push(DeploymentEvent::DeploymentDestroyed {});
            }
            Ok(events)
        }
    }
}

/// The steps whose resources may exist: destroyable steps that started at least once, the
/// steps that depend on others first.
pub(super) fn destroyable_steps(state: &DeploymentState) -> Vec<String> {
    let Some(blueprint) = &state.blueprint else {
        return vec![];
    };
    let mut order = crate::graph::topological_order(&blueprint.steps);
    order.reverse();
    order.retain(|name| {
        state
            .spec(name)
            .and_then(crate::kind::Kind::of)
            .is_some_and(crate::kind::Kind::is_destroyable)
            && state.steps.get(name).is_some_and(|s| s.attempt > 0)
    });
    order
}

/// The steps still to destroy, if `step` is the one to destroy now.
pub(super) fn next_to_destroy<'a>(
    state: &'a DeploymentState,
    step: &str,
) -> Result<&'a [String], DeploymentError> {
    match &state.destroy {
        Some(destroy) if destroy.is_done() => Err(DeploymentError::AlreadyDestroyed),
        Some(destroy)
            if !destroy.failed && destroy.remaining.first().is_some_and(|s| s == step) =>
        {
            Ok(&destroy.remaining)
        }
        _ => Err(DeploymentError::NotNextToDestroy(step.to_owned())),
    }
}

/// A step's resources were destroyed; the last one destroys the deployment.
pub(super) fn step_destroyed(
    state: &DeploymentState,
    step: String,
    duration_ms: u64,
) -> Result<Vec<DeploymentEvent>, DeploymentError> {
    let remaining = next_to_destroy(state, &step)?;
    let mut events = vec![DeploymentEvent::StepDestroyed { step, duration_ms }];
    if remaining.len() == 1 {
        events.push(DeploymentEvent::DeploymentDestroyed {});
    }
    Ok(events)
}

/// Destroying a step's resources failed; asking again carries on from it.
pub(super) fn destroy_failed(
    state: &DeploymentState,
    step: String,
    exit_code: Option<i32>,
    message: String,
    duration_ms: u64,
) -> Result<Vec<DeploymentEvent>, DeploymentError> {
    next_to_destroy(state, &step)?;
    Ok(vec![DeploymentEvent::StepDestroyFailed {
        step,
        exit_code,
        message,
        duration_ms,
    }])
}
