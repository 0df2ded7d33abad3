//! What the timeline knows from the whole history, beyond each event: when the deployment was
//! requested, the retry decision after each failed attempt, and why a step that failed for good
//! was not retried.

use std::collections::HashMap;

use overture_domain::deployment::{Deployment, DeploymentState};
use overture_domain::retry;
use overture_domain::text::escaped;
use overture_events::{BlueprintSnapshot, DeploymentEvent, Envelope, ErrorClass, Timestamp};

use super::describe::{clock, wait, words};
use super::{blueprint_of, Entry};
use crate::progress::human;

/// What the timeline knows from the whole history, beyond each event.
pub(super) struct Context {
    /// When the deployment was requested.
    requested_at: Option<Timestamp>,
    /// The retry decision recorded after each failed attempt, by the failure's index.
    pub(super) decisions: HashMap<usize, String>,
    /// Why each step that failed for good was not retried, by the `StepFailed`'s index.
    pub(super) give_ups: HashMap<usize, String>,
}

impl Context {
    /// What `history` says, read once for the whole timeline.
    pub(super) fn of(history: &[Envelope]) -> Self {
        let events: Vec<Option<DeploymentEvent>> = history
            .iter()
            .map(|e| DeploymentEvent::from_parts(&e.event_type, e.data.clone()).ok())
            .collect();
        let blueprint = blueprint_of(history);
        let requested_at = history
            .iter()
            .find(|e| e.event_type == "DeploymentRequested")
            .map(|e| e.metadata.recorded_at);

        // The retry policy counts a step's attempts from its current run's first (a redrive
        // starts a new run), as the aggregate folds it; the wording counts them the same way.
        let mut state = DeploymentState::default();
        let mut firsts = HashMap::new();
        for (index, event) in events.iter().enumerate() {
            let Some(event) = event else { continue };
            state = Deployment::apply(state, event.clone());
            if let DeploymentEvent::StepFailed { step, .. }
            | DeploymentEvent::StepRetryScheduled { step, .. } = event
            {
                let first = state.steps.get(step).map_or(1, |s| s.first_attempt);
                firsts.insert(index, first);
            }
        }
        let of_this_run = |index: usize, attempt: u32| {
            attempt.saturating_sub(firsts.get(&index).map_or(1, |f| *f)) + 1
        };

        // The policy retries only while the deployment runs: once a step has failed for good,
        // or a cancel was asked for, a failed attempt is not retried whatever its class.
        let mut give_ups = HashMap::new();
        let mut failing: Option<String> = None;
        let mut cancelling = false;
        for (index, event) in events.iter().enumerate() {
            match event {
                Some(DeploymentEvent::StepFailed {
                    step,
                    attempts,
                    error_class,
                }) => {
                    let reason = if cancelling {
                        "no retry: the deployment is being cancelled".to_owned()
                    } else if let Some(first) = &failing {
                        format!(
                            "no retry: the deployment is already failing (step `{}` failed)",
                            escaped(first)
                        )
                    } else {
                        not_retried(
                            blueprint.as_ref(),
                            step,
                            *error_class,
                            of_this_run(index, *attempts),
                        )
                    };
                    give_ups.insert(index, reason);
                    failing.get_or_insert_with(|| step.clone());
                }
                Some(DeploymentEvent::CancellationRequested { .. }) => cancelling = true,
                // A redrive starts a new run, which the policy retries again.
                Some(DeploymentEvent::DeploymentRedriven { .. }) => {
                    failing = None;
                    cancelling = false;
                }
                _ => {}
            }
        }

        // The decision is appended with the failure; it is the next event about that attempt.
        let mut decisions = HashMap::new();
        for (index, event) in events.iter().enumerate() {
            let Some(DeploymentEvent::StepAttemptFailed { step, attempt, .. }) = event else {
                continue;
            };
            let decision = events
                .iter()
                .enumerate()
                .skip(index + 1)
                .find_map(|(later, event)| match event {
                    Some(DeploymentEvent::StepRetryScheduled {
                        step: s,
                        attempt: a,
                        next_attempt,
                        delay_ms,
                        not_before,
                    }) if s == step && a == attempt => Some(retry_in(
                        of_this_run(later, *next_attempt),
                        *delay_ms,
                        *not_before,
                        history[later].metadata.recorded_at,
                    )),
                    Some(DeploymentEvent::StepFailed { step: s, .. }) if s == step => {
                        give_ups.get(&later).cloned()
                    }
                    _ => None,
                });
            if let Some(decision) = decision {
                decisions.insert(index, decision);
            }
        }
        Self {
            requested_at,
            decisions,
            give_ups,
        }
    }

    /// How long after the request `at` is, for the deployment's end.
    pub(super) fn after_request(&self, at: Timestamp) -> String {
        self.requested_at
            .map(|start| {
                let ms = (at - start).num_milliseconds().max(0);
                format!(" after {}", human(u64::try_from(ms).unwrap_or(0)))
            })
            .unwrap_or_default()
    }

    /// The event at `index` of the history as the timeline shows it.
    pub(super) fn entry(&self, index: usize, envelope: &Envelope) -> Entry {
        let at = envelope.metadata.recorded_at;
        let (what, why) =
            match DeploymentEvent::from_parts(&envelope.event_type, envelope.data.clone()) {
                Ok(event) => self.describe(index, &event, at),
                Err(error) => (
                    format!("{} (unreadable)", words(&envelope.event_type)),
                    vec![("why", escaped(&error.to_string()).into_owned())],
                ),
            };
        Entry {
            revision: envelope.revision,
            at,
            who: escaped(&envelope.metadata.actor).into_owned(),
            what,
            why,
        }
    }
}

/// Why a step that failed for good got no retry, by the retry rule of its blueprint; `attempts`
/// counts those of the run that failed.
fn not_retried(
    blueprint: Option<&BlueprintSnapshot>,
    step: &str,
    class: ErrorClass,
    attempts: u32,
) -> String {
    let Some(spec) = blueprint.and_then(|b| b.step(step)) else {
        return "no retry".to_owned();
    };
    match retry::rule_for(spec, class).times {
        0 => format!("no retry: class {class} is not retried"),
        times if attempts > times => format!("no retry: class {class} allows {times}, all used"),
        _ => "no retry".to_owned(),
    }
}

/// A retry decision: `retry #2 in 10s (at 10:00:21.000)`; `next_attempt` counts from the
/// run's first attempt.
fn retry_in(next_attempt: u32, delay_ms: u64, due: Timestamp, now: Timestamp) -> String {
    let retry = next_attempt.saturating_sub(1);
    if delay_ms == 0 {
        format!("retry #{retry} at once")
    } else {
        format!(
            "retry #{retry} in {} (at {})",
            wait(delay_ms),
            clock(due, now)
        )
    }
}
