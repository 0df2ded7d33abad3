//! Whether a stream is a history the Deployment aggregate could have recorded.
//!
//! The fold ([`Deployment::apply`]) accepts any event, because the log only ever holds what the
//! aggregate decided. A history from outside (an import) is not so vouched for: [`check`] folds
//! it and refuses the first event the state before it could not have led to. The hash chain
//! shows whether a history was changed after it was recorded; this shows whether it could have
//! been recorded at all (an export made up, or rewritten and re-chained, by someone else).

use overture_events::{DeploymentEvent, Envelope};

use crate::deployment::{Deployment, DeploymentState, Phase};

/// The first event of a stream that its history could not have led to.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("revision {revision}: {reason}")]
pub struct Unrecordable {
    /// The event's revision.
    pub revision: u64,
    /// Why the aggregate could not have recorded it.
    pub reason: String,
}

/// Folds the stream (from its first event, in revision order) and refuses the first event the
/// aggregate could not have recorded.
pub fn check(stream: &[Envelope]) -> Result<(), Unrecordable> {
    let mut state = DeploymentState::default();
    let mut tenant: Option<&str> = None;
    for (expected, envelope) in (0u64..).zip(stream) {
        let refuse = |reason: String| Unrecordable {
            revision: envelope.revision,
            reason,
        };
        if envelope.revision != expected {
            return Err(refuse(format!("revision {expected} is missing")));
        }
        let event = DeploymentEvent::from_parts(&envelope.event_type, envelope.data.clone())
            .map_err(|e| refuse(format!("not a `{}` event: {e}", envelope.event_type)))?;
        match tenant {
            None => tenant = Some(&envelope.metadata.tenant),
            Some(first) if first != envelope.metadata.tenant => return Err(refuse(format!(
                "it is recorded for tenant `{}`, the deployment's events before it for `{first}`",
                envelope.metadata.tenant
            ))),
            Some(_) => {}
        }
        follows(&state, &event).map_err(refuse)?;
        state = Deployment::apply(state, event);
    }
    Ok(())
}

/// Whether `event` can follow the state: `Err` says why not.
fn follows(state: &DeploymentState, event: &DeploymentEvent) -> Result<(), String> {
    use DeploymentEvent as E;
    let requested = state.phase != Phase::NotRequested;
    match event {
        E::DeploymentRequested { .. } if requested => {
            Err("the deployment was requested already".into())
        }
        E::DeploymentRequested { .. } => Ok(()),
        _ if !requested => Err(format!(
            "`{}` before the deployment was requested",
            event.event_type()
        )),
        E::DeploymentSucceeded {} => {
            let unfinished: Vec<&str> = state
                .steps
                .iter()
                .filter(|(_, s)| s.status != crate::deployment::StepStatus::Succeeded)
                .map(|(name, _)| name.as_str())
                .collect();
            if state.phase != Phase::Running {
                Err(format!(
                    "the deployment succeeded while it was {}",
                    phase_name(&state.phase)
                ))
            } else if !unfinished.is_empty() {
                Err(format!(
                    "the deployment succeeded before step(s) {} did",
                    unfinished.join(", ")
                ))
            } else {
                Ok(())
            }
        }
        E::DeploymentFailed { .. } if !matches!(state.phase, Phase::Failing { .. }) => {
            Err(format!(
                "the deployment failed while it was {} (it fails only once a step has failed)",
                phase_name(&state.phase)
            ))
        }
        _ => match step_of(event) {
            Some(step) if !state.steps.contains_key(step) => Err(format!(
                "`{}` names step `{step}`, which the blueprint does not have",
                event.event_type()
            )),
            _ => Ok(()),
        },
    }
}

/// The step an attempt's event is about.
fn step_of(event: &DeploymentEvent) -> Option<&str> {
    use DeploymentEvent as E;
    match event {
        E::StepScheduled { step, .. }
        | E::StepStarted { step, .. }
        | E::StepSucceeded { step, .. }
        | E::StepAttemptFailed { step, .. }
        | E::StepFailed { step, .. }
        | E::StepAbandoned { step, .. } => Some(step),
        _ => None,
    }
}

fn phase_name(phase: &Phase) -> &'static str {
    match phase {
        Phase::NotRequested => "not requested",
        Phase::Running => "running",
        Phase::Failing { .. } => "failing",
        Phase::Cancelling { .. } => "being cancelled",
        Phase::Finished(_) => "finished",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::events::{self as e, envelopes};
    use crate::testing::t;
    use overture_events::{DeploymentId, ErrorClass};

    fn given(events: Vec<DeploymentEvent>) -> Vec<Envelope> {
        let id = DeploymentId::from_uuid(uuid::Uuid::from_u128(42));
        let timed: Vec<_> = events.into_iter().map(|event| (event, t(0))).collect();
        envelopes(id, &timed)
    }

    fn two_steps() -> DeploymentEvent {
        e::requested(
            "b.yaml",
            e::blueprint(
                "name: b\nsteps:\n  build: { run: noop }\n  ship: { run: noop, needs: [build] }\n",
            ),
        )
    }

    #[test]
    fn a_history_the_aggregate_recorded_passes() {
        let stream = given(vec![
            two_steps(),
            e::scheduled("build", 1, 0),
            e::started("build", 1),
            e::succeeded("build", 1),
            e::scheduled("ship", 1, 0),
            e::started("ship", 1),
            e::succeeded("ship", 1),
            DeploymentEvent::DeploymentSucceeded {},
        ]);
        assert_eq!(check(&stream), Ok(()));
    }

    #[test]
    fn a_failed_deployment_rewritten_as_succeeded_is_refused_at_that_event() {
        let stream = given(vec![
            two_steps(),
            e::scheduled("build", 1, 0),
            e::started("build", 1),
            e::attempt_failed("build", 1, ErrorClass::StepFailed),
            e::failed("build", 1),
            DeploymentEvent::DeploymentSucceeded {},
        ]);
        let refused = check(&stream).expect_err("refused");
        assert_eq!(refused.revision, 5);
        assert!(refused.reason.contains("while it was failing"), "{refused}");
    }

    #[test]
    fn success_before_every_step_succeeded_is_refused() {
        let stream = given(vec![
            two_steps(),
            e::scheduled("build", 1, 0),
            e::started("build", 1),
            e::succeeded("build", 1),
            DeploymentEvent::DeploymentSucceeded {},
        ]);
        let refused = check(&stream).expect_err("refused");
        assert_eq!(refused.revision, 4);
        assert!(refused.reason.contains("ship"), "{refused}");
    }

    #[test]
    fn a_failure_without_a_failed_step_is_refused() {
        let stream = given(vec![
            two_steps(),
            DeploymentEvent::DeploymentFailed {
                reason: "made up".into(),
            },
        ]);
        assert_eq!(check(&stream).expect_err("refused").revision, 1);
    }

    #[test]
    fn a_stream_that_changes_tenant_is_refused() {
        let mut stream = given(vec![two_steps(), e::scheduled("build", 1, 0)]);
        stream[1].metadata.tenant = "mallory".into();
        let refused = check(&stream).expect_err("refused");
        assert_eq!(refused.revision, 1);
        assert!(refused.reason.contains("mallory"), "{refused}");
    }

    #[test]
    fn events_before_the_request_or_of_unknown_steps_are_refused() {
        let stream = given(vec![e::scheduled("build", 1, 0)]);
        assert_eq!(check(&stream).expect_err("refused").revision, 0);
        let stream = given(vec![two_steps(), e::scheduled("deploy", 1, 0)]);
        let refused = check(&stream).expect_err("refused");
        assert!(refused.reason.contains("deploy"), "{refused}");
    }
}
