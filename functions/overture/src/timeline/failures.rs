//! A step failing for good: why it was not retried, the grace period and the steps abandoned.

use overture_events::DeploymentEvent;

use super::describe::{attempt_of, clock, said, wait, Line};

/// A step failing for good: the event in words, its why lines pushed on `line`.
pub(super) fn describe(line: &mut Line<'_>, event: &DeploymentEvent) -> String {
    use DeploymentEvent as E;
    let (title, at) = (&line.title, line.at);
    let why = &mut line.why;
    match event {
        E::StepFailed {
            step,
            attempts,
            error_class,
        } => {
            if let Some(decision) = line.context.give_ups.get(&line.index) {
                why.push(("why", decision.clone()));
            }
            let plural = if *attempts == 1 { "" } else { "s" };
            format!(
                "{title}: {} after {attempts} attempt{plural} ({error_class})",
                said(step)
            )
        }
        E::FailureGracePeriodStarted {
            failed_step,
            deadline,
        } => {
            let left = (*deadline - at).num_milliseconds().max(0);
            why.push((
                "why",
                format!(
                    "step `{}` failed for good; steps still running may finish until {} \
                     (in {}), then they are abandoned",
                    said(failed_step),
                    clock(*deadline, at),
                    wait(u64::try_from(left).unwrap_or(0))
                ),
            ));
            format!("{title}: after {} failed", said(failed_step))
        }
        E::StepAbandoned {
            step,
            attempt,
            reason,
        } => {
            why.push(("why", said(reason)));
            format!("{title}: {}", attempt_of(step, *attempt))
        }
        // Events of other families: `describe` sends none here.
        _ => title.clone(),
    }
}
