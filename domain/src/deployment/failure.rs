//! An attempt's failure (recorded, interrupted, dead-lettered) and what follows it: a retry, or
//! the step's failure, the waiting steps abandoned and the grace period.

use chrono::TimeDelta;
use overture_events::{DeploymentEvent, ErrorClass, Timestamp};

use super::{require_running, DeploymentError, DeploymentState, Interruption, Phase, StepStatus};
use crate::retry::{self, RetryDecision};

/// A failure the attempt recorded itself; the retry policy decides what follows.
// The command's fields, one by one, as the event takes them.
#[allow(clippy::too_many_arguments)]
pub(super) fn record(
    state: &DeploymentState,
    step: String,
    attempt: u32,
    error_class: ErrorClass,
    exit_code: Option<i32>,
    message: String,
    duration_ms: u64,
    now: Timestamp,
) -> Result<Vec<DeploymentEvent>, DeploymentError> {
    require_running(state, &step, attempt)?;
    let failed = DeploymentEvent::StepAttemptFailed {
        step: step.clone(),
        attempt,
        error_class,
        exit_code,
        message,
        duration_ms,
    };
    Ok(std::iter::once(failed)
        .chain(after_failure(state, &step, attempt, error_class, now))
        .collect())
}

/// A running attempt cut short by something other than the step (class `interrupted`). An
/// expired lease is believed only once the lease has ended.
pub(super) fn interrupt(
    state: &DeploymentState,
    step: String,
    attempt: u32,
    why: Interruption,
    now: Timestamp,
) -> Result<Vec<DeploymentEvent>, DeploymentError> {
    require_running(state, &step, attempt)?;
    let lease = state.step(&step)?.lease_until;
    if let (Interruption::LeaseExpired, Some(until)) = (why, lease) {
        if now < until {
            return Err(DeploymentError::LeaseNotExpired {
                step,
                attempt,
                until,
            });
        }
    }
    let class = ErrorClass::Interrupted;
    let failed = DeploymentEvent::StepAttemptFailed {
        step: step.clone(),
        attempt,
        error_class: class,
        exit_code: None,
        message: why.message().to_owned(),
        duration_ms: 0,
    };
    Ok(std::iter::once(failed)
        .chain(after_failure(state, &step, attempt, class, now))
        .collect())
}

/// The events of an attempt whose job the queue gave up on.
///
/// The attempt fails as `interrupted`, and the step's rule for that class decides what follows
/// (by default two more attempts), rather than the step failing outright: a dead letter says
/// that the engine could not carry the attempt through (its runners crashed or timed out on
/// it, the log or the sandbox were unavailable at every delivery), not that the step did
/// anything wrong, which is what `interrupted` means. A step that must never run twice opts
/// out as for any interruption (`interrupted: { times: 0 }`), and the work stays bounded: at
/// most `times + 1` attempts of `maxReceiveCount` deliveries each.
///
/// A running attempt whose lease has not ended may still be running (its runner holds the job
/// and will record the outcome), so the dead letter waits for the lease, as an interruption
/// does. An attempt that ended or was superseded already has its outcome: nothing is recorded.
pub(super) fn dead_lettered(
    state: &DeploymentState,
    step: String,
    attempt: u32,
    receives: u32,
    now: Timestamp,
) -> Result<Vec<DeploymentEvent>, DeploymentError> {
    let current = state.step(&step)?;
    let running = current.status == StepStatus::Running;
    if current.attempt != attempt || !(running || current.status.is_waiting()) {
        return Ok(vec![]);
    }
    if let Some(until) = current.lease_until.filter(|until| running && now < *until) {
        return Err(DeploymentError::LeaseNotExpired {
            step,
            attempt,
            until,
        });
    }
    let class = ErrorClass::Interrupted;
    let events = vec![
        DeploymentEvent::StepJobDeadLettered {
            step: step.clone(),
            attempt,
            receives,
        },
        DeploymentEvent::StepAttemptFailed {
            step: step.clone(),
            attempt,
            error_class: class,
            exit_code: None,
            message: format!(
                "the attempt was interrupted: its job was delivered {receives} times without an \
                 outcome and moved to the dead-letter queue"
            ),
            duration_ms: 0,
        },
    ];
    Ok(events
        .into_iter()
        .chain(after_failure(state, &step, attempt, class, now))
        .collect())
}

/// The events after an attempt's failure: a retry, or the step's failure and its consequences.
pub(super) fn after_failure(
    state: &DeploymentState,
    step: &str,
    attempt: u32,
    class: ErrorClass,
    now: Timestamp,
) -> Vec<DeploymentEvent> {
    let spec = state.spec(step);
    // The policy counts the attempts of this run: a redriven step gets its retries again.
    let first = state.steps.get(step).map_or(1, |s| s.first_attempt);
    let of_this_run = attempt.saturating_sub(first).saturating_add(1);
    let decision = match (spec, &state.phase) {
        (Some(spec), Phase::Running) => retry::decide(spec, class, of_this_run),
        // A deployment that is already failing starts no new attempts.
        _ => RetryDecision::GiveUp,
    };
    // An attempt number past the last one there can be is no retry.
    let next_attempt = attempt.checked_add(1);
    if let (RetryDecision::Retry { wait, .. }, Some(next_attempt)) = (decision, next_attempt) {
        let delay_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
        return vec![DeploymentEvent::StepRetryScheduled {
            step: step.to_owned(),
            attempt,
            next_attempt,
            delay_ms,
            not_before: later(now, delay_ms),
        }];
    }
    let mut events = vec![DeploymentEvent::StepFailed {
        step: step.to_owned(),
        attempts: attempt,
        error_class: class,
    }];
    if state.phase != Phase::Running {
        return events;
    }
    // The first failure for good: waiting attempts never start; running ones get the grace period.
    for (name, s) in state
        .steps
        .waiting()
        .chain(state.steps.awaiting())
        .filter(|(name, _)| name.as_str() != step)
    {
        events.push(DeploymentEvent::StepAbandoned {
            step: name.clone(),
            attempt: s.attempt,
            reason: format!("not started because step `{step}` failed"),
        });
    }
    let still_running = state.running_steps().any(|(name, _)| name.as_str() != step);
    if still_running {
        let grace_ms = state.blueprint.as_ref().map_or(0, |b| b.grace_ms);
        events.push(DeploymentEvent::FailureGracePeriodStarted {
            failed_step: step.to_owned(),
            deadline: later(now, grace_ms),
        });
    }
    events
}

/// The instant `ms` after `now`, never panicking on what was recorded. A wait longer than a
/// blueprint may set ([`MAX_DURATION_MS`](crate::duration::MAX_DURATION_MS): recorded before the
/// bound, or by a door that did not check) waits that long; an instant past the last one a
/// timestamp holds is the last one.
pub fn later(now: Timestamp, ms: u64) -> Timestamp {
    let ms = ms.min(crate::duration::MAX_DURATION_MS);
    i64::try_from(ms)
        .ok()
        .and_then(TimeDelta::try_milliseconds)
        .and_then(|wait| now.checked_add_signed(wait))
        .unwrap_or(Timestamp::MAX_UTC)
}
