//! The bastion's access opened and closed, and the host keys pinned behind it.

use overture_events::{DeploymentEvent, HostKeySource};

use super::describe::{said, Line};

/// The bastion's access opened and closed, and the host keys pinned behind it.: the event in words, its why lines pushed on `line`.
pub(super) fn describe(line: &mut Line<'_>, event: &DeploymentEvent) -> String {
    use DeploymentEvent as E;
    let title = &line.title;
    let why = &mut line.why;
    match event {
        E::BastionAccessGranted {
            rule,
            security_group,
            bastion,
            source,
            port,
        } => {
            why.push((
                "rule",
                format!("{} in security group {}", said(rule), said(security_group)),
            ));
            format!(
                "{title}: tcp/{port} from {} to {}",
                said(source),
                said(bastion)
            )
        }
        E::BastionAccessRevoked { rule, kept_for } if kept_for.is_empty() => {
            format!("{title}: rule {}", said(rule))
        }
        E::BastionAccessRevoked { rule, kept_for } => format!(
            "{title}: rule {} kept for {}, which still hold it",
            said(rule),
            kept_for
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        E::HostKeysPinned {
            server,
            host,
            learned,
            keys,
        } => {
            for key in keys {
                why.push((
                    "key",
                    format!("{} {}", said(&key.key_type), said(&key.fingerprint)),
                ));
            }
            let how = match learned {
                HostKeySource::Console => "from its console output",
                HostKeySource::FirstUse => "on first use (no console output to check them)",
            };
            if server == host {
                format!("{title}: {} {how}", said(host))
            } else {
                format!("{title}: {} ({}) {how}", said(server), said(host))
            }
        }
        // Events of other families: `describe` sends none here.
        _ => title.clone(),
    }
}
