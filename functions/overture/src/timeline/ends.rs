//! How a deployment ends (succeeded, failed, cancelled) and runs again (redriven).

use overture_events::DeploymentEvent;

use super::describe::{said, Line};

/// How a deployment ends (succeeded, failed, cancelled) and runs again (redriven).: the event in words, its why lines pushed on `line`.
pub(super) fn describe(line: &mut Line<'_>, event: &DeploymentEvent) -> String {
    use DeploymentEvent as E;
    let (title, at) = (&line.title, line.at);
    let why = &mut line.why;
    match event {
        E::DeploymentSucceeded {} => format!("{title}{}", line.context.after_request(at)),
        E::DeploymentFailed { reason } => {
            why.push(("why", said(reason)));
            format!("{title}{}", line.context.after_request(at))
        }
        E::CancellationRequested {
            requested_by,
            reason,
        } => {
            why.push(("why", said(reason)));
            format!("{title}: by {}", said(requested_by))
        }
        E::DeploymentCancelled {
            reason,
            requested_by,
        } => {
            why.push(("why", said(reason)));
            let by = if requested_by.is_empty() {
                String::new()
            } else {
                format!(", by {}", said(requested_by))
            };
            format!("{title}{}{by}", line.context.after_request(at))
        }
        E::DeploymentRedriven {
            requested_by,
            steps,
        } => {
            let steps: Vec<String> = steps.iter().map(|s| said(s)).collect();
            why.push(("again", steps.join(", ")));
            format!("{title}: by {}", said(requested_by))
        }
        // Events of other families: `describe` sends none here.
        _ => title.clone(),
    }
}
