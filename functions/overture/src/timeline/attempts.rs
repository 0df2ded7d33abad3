//! A step's attempts: scheduled, started, succeeded, failed, dead-lettered, retried, fenced in.

use overture_events::DeploymentEvent;

use super::describe::{attempt_of, clock, failure, said, took, wait, Line};
use crate::progress::human;

/// A step's attempts: the event in words, its why lines pushed on `line`.
pub(super) fn describe(line: &mut Line<'_>, event: &DeploymentEvent) -> String {
    use DeploymentEvent as E;
    let (title, at) = (&line.title, line.at);
    let why = &mut line.why;
    match event {
        E::StepScheduled {
            step,
            attempt,
            not_before,
        } => {
            let wait = if *not_before > at {
                format!(" not before {}", clock(*not_before, at))
            } else {
                String::new()
            };
            format!("{title}: {}{wait}", attempt_of(step, *attempt))
        }
        E::StepStarted { step, attempt, .. } => {
            format!("{title}: {}", attempt_of(step, *attempt))
        }
        E::StepSucceeded {
            step,
            attempt,
            outputs,
            duration_ms,
        } => {
            if !outputs.is_empty() {
                let outputs: Vec<String> = outputs
                    .iter()
                    .map(|(k, v)| format!("{k}={}", said(v)))
                    .collect();
                why.push(("outputs", outputs.join(" ")));
            }
            format!(
                "{title}: {} in {}",
                attempt_of(step, *attempt),
                human(*duration_ms)
            )
        }
        E::StepAttemptFailed {
            step,
            attempt,
            error_class,
            exit_code,
            message,
            duration_ms,
        } => {
            failure(why, Some(*error_class), *exit_code, message);
            if let Some(decision) = line.context.decisions.get(&line.index) {
                why.push(("next", decision.clone()));
            }
            format!(
                "{title}: {}{}",
                attempt_of(step, *attempt),
                took(*duration_ms)
            )
        }
        E::StepJobDeadLettered {
            step,
            attempt,
            receives,
        } => {
            why.push((
                "why",
                format!(
                    "its job was delivered {receives} times without an outcome and moved to \
                     the dead-letter queue"
                ),
            ));
            format!("{title}: {}", attempt_of(step, *attempt))
        }
        E::StepRetryScheduled {
            step,
            next_attempt,
            delay_ms,
            not_before,
            ..
        } => {
            let when = if *delay_ms == 0 {
                "at once".to_owned()
            } else {
                format!("in {} (at {})", wait(*delay_ms), clock(*not_before, at))
            };
            format!("{title}: {} {when}", attempt_of(step, *next_attempt))
        }
        E::StepNetworkPolicyApplied {
            step,
            attempt,
            allowed,
        } => {
            let allowed: Vec<String> = allowed.iter().map(|a| said(a)).collect();
            let allowed = if allowed.is_empty() {
                "nothing".to_owned()
            } else {
                allowed.join(", ")
            };
            why.push(("allowed", allowed));
            format!("{title}: {}", attempt_of(step, *attempt))
        }
        // Events of other families: `describe` sends none here.
        _ => title.clone(),
    }
}
