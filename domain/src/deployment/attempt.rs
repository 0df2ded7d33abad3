//! An attempt's life: it starts, runs under a lease, records its network policy, succeeds.
//! (How it fails is in [`super::failure`].)

use std::collections::BTreeMap;

use chrono::TimeDelta;
use overture_events::{DeploymentEvent, Timestamp};

use super::{DeploymentError, DeploymentState, Phase, StepStatus};

/// How much longer than its timeout an attempt's lease lasts: the time its runner needs to kill
/// the sandbox and record the outcome. A running attempt whose lease has not ended is alive as
/// far as anyone can tell, so a second delivery of its job must leave it be.
pub const ATTEMPT_LEASE_MARGIN: TimeDelta = TimeDelta::minutes(1);

pub(super) fn start(
    state: &DeploymentState,
    step: String,
    attempt: u32,
    sandbox: String,
    now: Timestamp,
) -> Result<Vec<DeploymentEvent>, DeploymentError> {
    let current = state.step(&step)?;
    let waiting = current.status.is_waiting() && current.attempt == attempt;
    if !waiting || state.phase != Phase::Running {
        return Err(DeploymentError::AttemptNotScheduled { step, attempt });
    }
    if let Some(not_before) = current.not_before.filter(|t| now < *t) {
        return Err(DeploymentError::NotYetDue {
            step,
            attempt,
            not_before,
        });
    }
    let spec = state.spec(&step);
    let timeout = spec.map_or(0, |spec| spec.timeout_ms);
    let fingerprint = spec.map(|spec| crate::fingerprint::of_attempt(state, spec));
    // A timeout beyond what an instant can hold leaves the attempt without a lease.
    let lease_until = i64::try_from(timeout)
        .ok()
        .and_then(TimeDelta::try_milliseconds)
        .and_then(|timeout| timeout.checked_add(&ATTEMPT_LEASE_MARGIN))
        .and_then(|lease| now.checked_add_signed(lease));
    Ok(vec![DeploymentEvent::StepStarted {
        step,
        attempt,
        sandbox,
        lease_until,
        fingerprint,
    }])
}

pub(super) fn require_running(
    state: &DeploymentState,
    step: &str,
    attempt: u32,
) -> Result<(), DeploymentError> {
    let current = state.step(step)?;
    if current.status == StepStatus::Running && current.attempt == attempt {
        Ok(())
    } else {
        Err(DeploymentError::AttemptNotRunning {
            step: step.to_owned(),
            attempt,
        })
    }
}

/// An attempt's success: the step is done.
pub(super) fn succeed(
    state: &DeploymentState,
    step: String,
    attempt: u32,
    outputs: BTreeMap<String, String>,
    duration_ms: u64,
) -> Result<Vec<DeploymentEvent>, DeploymentError> {
    require_running(state, &step, attempt)?;
    Ok(vec![DeploymentEvent::StepSucceeded {
        step,
        attempt,
        outputs,
        duration_ms,
    }])
}

/// The destinations a running attempt's sandbox reaches, for the audit trail.
pub(super) fn network_policy(
    state: &DeploymentState,
    step: String,
    attempt: u32,
    allowed: Vec<String>,
) -> Result<Vec<DeploymentEvent>, DeploymentError> {
    require_running(state, &step, attempt)?;
    Ok(vec![DeploymentEvent::StepNetworkPolicyApplied {
        step,
        attempt,
        allowed,
    }])
}
