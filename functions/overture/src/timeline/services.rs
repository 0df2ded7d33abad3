//! The tenant's services: a step awaiting them, the members it saw, instances joining and leaving, a watching step run again.

use overture_events::DeploymentEvent;

use super::describe::{clock, members_of, said, wait, Line};

/// The tenant's services: the event in words, its why lines pushed on `line`.
pub(super) fn describe(line: &mut Line<'_>, event: &DeploymentEvent) -> String {
    use DeploymentEvent as E;
    let (title, at) = (&line.title, line.at);
    let why = &mut line.why;
    match event {
        E::StepAwaitingServices {
            step,
            waiting_for,
            deadline,
        } => {
            for short in waiting_for {
                why.push((
                    "needs",
                    format!(
                        "service {}: {} of {} registered",
                        said(&short.service),
                        short.registered,
                        short.count
                    ),
                ));
            }
            let left = (*deadline - at).num_milliseconds().max(0);
            why.push((
                "until",
                format!(
                    "{} (in {}), then it fails as service-timeout",
                    clock(*deadline, at),
                    wait(u64::try_from(left).unwrap_or(0))
                ),
            ));
            format!("{title}: {}", said(step))
        }
        E::ServicesResolved { step, services } => {
            for (service, members) in services {
                why.push(("members", members_of(&said(service), members)));
            }
            format!("{title}: {}", said(step))
        }
        E::ServiceRegistered {
            service,
            step,
            host,
            address,
            port,
        } => {
            why.push((
                "why",
                format!(
                    "step {} configured it and it answered its check",
                    said(step)
                ),
            ));
            format!(
                "{title}: {} on {} ({}:{port})",
                said(service),
                said(host),
                said(address)
            )
        }
        E::ServiceDeregistered {
            service,
            host,
            address,
            port,
            reason,
            ..
        } => {
            why.push(("why", said(reason)));
            format!(
                "{title}: {} on {} ({}:{port})",
                said(service),
                said(host),
                said(address)
            )
        }
        E::StepRerunRequested {
            step,
            service,
            from,
            to,
        } => {
            why.push((
                "why",
                format!("service {} changed its members", said(service)),
            ));
            why.push(("from", members_of(&said(service), from)));
            why.push(("to", members_of(&said(service), to)));
            format!("{title}: {}", said(step))
        }
        // Events of other families: `describe` sends none here.
        _ => title.clone(),
    }
}
