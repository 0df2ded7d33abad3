//! Services: registering a providing step's instances, and looking at the tenant's registry
//! (waiting for required services, resolving their members, running a watching step again).

use overture_events::{DeploymentEvent, ErrorClass, Timestamp};

use super::failure::{after_failure, later};
use super::{require_running, DeploymentError, DeploymentState, Phase, StepStatus};
use crate::services::{self, ServiceInstance};

/// The events of a look at the tenant's registry (see [`DeploymentCommand::ObserveServices`]).
/// At most one wait times out per look: its failure abandons the other waits.
pub(super) fn observe_services(
    state: &DeploymentState,
    now: Timestamp,
    others: &[ServiceInstance],
) -> Vec<DeploymentEvent> {
    if !state.looks_at_services() {
        return vec![];
    }
    let members = services::members(state.registrations.iter().chain(others));
    let mut events = Vec::new();
    if state.phase == Phase::Running {
        let deciding = state
            .steps
            .ready(true)
            .chain(state.steps.awaiting())
            .filter_map(|(name, s)| Some((name, s, state.spec(name)?)));
        for (name, s, spec) in deciding {
            let waiting_for = services::shortfalls(&spec.requires, &members);
            if waiting_for.is_empty() {
                events.push(DeploymentEvent::ServicesResolved {
                    step: name.clone(),
                    services: services::resolved(spec, &members),
                });
                events.push(DeploymentEvent::StepScheduled {
                    step: name.clone(),
                    attempt: s.first_attempt,
                    not_before: now,
                });
                continue;
            }
            match &s.awaiting {
                None => {
                    let wait_ms = spec.requires.iter().map(|need| need.timeout_ms).max();
                    events.push(DeploymentEvent::StepAwaitingServices {
                        step: name.clone(),
                        waiting_for,
                        deadline: later(now, wait_ms.unwrap_or(0)),
                    });
                }
                Some((deadline, before)) if now >= *deadline => {
                    // The failure's reason counts what is registered now, not when the wait
                    // began: what it still waits for is recorded again if that changed.
                    if *before != waiting_for {
                        events.push(DeploymentEvent::StepAwaitingServices {
                            step: name.clone(),
                            waiting_for,
                            deadline: *deadline,
                        });
                    }
                    events.extend(after_failure(
                        state,
                        name,
                        s.attempt,
                        ErrorClass::ServiceTimeout,
                        now,
                    ));
                    return events;
                }
                Some(_) => {}
            }
        }
    }
    for (name, s) in state.steps.iter() {
        if s.status != StepStatus::Succeeded {
            continue;
        }
        let Some(spec) = state.spec(name) else {
            continue;
        };
        let changed = spec.watch.iter().find_map(|service| {
            let to = services::members_of(&members, service);
            let from = s.services.get(service).cloned().unwrap_or_default();
            (from != to).then(|| (service.clone(), from, to))
        });
        if let Some((service, from, to)) = changed {
            events.push(DeploymentEvent::StepRerunRequested {
                step: name.clone(),
                service,
                from,
                to,
            });
        }
    }
    events
}

/// The events of a providing step's hosts answering its service's check: one registration per
/// instance not registered yet.
pub(super) fn register_services(
    state: &DeploymentState,
    step: String,
    attempt: u32,
    instances: Vec<ServiceInstance>,
) -> Result<Vec<DeploymentEvent>, DeploymentError> {
    require_running(state, &step, attempt)?;
    let provided = state
        .spec(&step)
        .and_then(|spec| spec.provides.as_ref())
        .map(|provides| provides.service.as_str());
    let mut events = Vec::new();
    let mut seen: Vec<&ServiceInstance> = Vec::new();
    for instance in &instances {
        if provided != Some(instance.service.as_str()) || instance.step != step {
            return Err(DeploymentError::NotProvided {
                step,
                service: instance.service.clone(),
            });
        }
        if state.registrations.contains(instance) || seen.contains(&instance) {
            continue;
        }
        seen.push(instance);
        events.push(DeploymentEvent::ServiceRegistered {
            service: instance.service.clone(),
            step: instance.step.clone(),
            host: instance.host.clone(),
            address: instance.address.clone(),
            port: instance.port,
        });
    }
    Ok(events)
}
