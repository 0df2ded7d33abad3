//! Tearing a deployment down: asked for, each step's resources destroyed or not, done.

use overture_events::DeploymentEvent;

use super::describe::{failure, said, took, Line};
use crate::progress::human;

/// Tearing a deployment down: the event in words, its why lines pushed on `line`.
pub(super) fn describe(line: &mut Line<'_>, event: &DeploymentEvent) -> String {
    use DeploymentEvent as E;
    let title = &line.title;
    let why = &mut line.why;
    match event {
        E::DestroyRequested { steps } => {
            let steps: Vec<String> = steps.iter().map(|s| said(s)).collect();
            format!("{title}: {}", steps.join(", "))
        }
        E::StepDestroyed { step, duration_ms } => {
            format!("{title}: {} in {}", said(step), human(*duration_ms))
        }
        E::StepDestroyFailed {
            step,
            exit_code,
            message,
            duration_ms,
        } => {
            failure(why, None, *exit_code, message);
            format!("{title}: {}{}", said(step), took(*duration_ms))
        }
        E::DeploymentDestroyed {} => title.clone(),
        // Events of other families: `describe` sends none here.
        _ => title.clone(),
    }
}
