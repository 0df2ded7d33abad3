//! What each event prints as progress: [`text`] sends each event to the family that words it.

use overture_events::DeploymentEvent;

use super::human;

/// The progress line of `event`; none for an event that is no news.
pub(super) fn text(event: DeploymentEvent) -> Option<String> {
    use DeploymentEvent as E;
    let text = match event {
        E::DeploymentRequested { .. } | E::CredentialsSealed { .. } | E::SecretsPurged {} => {
            request(event)
        }
        E::BastionAccessGranted { .. }
        | E::BastionAccessRevoked { .. }
        | E::HostKeysPinned { .. } => bastion(event),
        E::StepScheduled { .. }
        | E::StepStarted { .. }
        | E::StepSucceeded { .. }
        | E::StepAttemptFailed { .. }
        | E::StepJobDeadLettered { .. }
        | E::StepRetryScheduled { .. }
        | E::StepNetworkPolicyApplied { .. } => attempts(event),
        E::StepFailed { .. } | E::FailureGracePeriodStarted { .. } | E::StepAbandoned { .. } => {
            failures(event)
        }
        E::DeploymentSucceeded {}
        | E::DeploymentFailed { .. }
        | E::CancellationRequested { .. }
        | E::DeploymentCancelled { .. }
        | E::DeploymentRedriven { .. } => ends(event),
        E::DestroyRequested { .. }
        | E::StepDestroyed { .. }
        | E::StepDestroyFailed { .. }
        | E::DeploymentDestroyed {} => destroy(event),
        // The members are in the audit trail; the schedule that follows is the news.
        E::ServicesResolved { .. } => return None,
        E::StepAwaitingServices { .. }
        | E::ServiceRegistered { .. }
        | E::ServiceDeregistered { .. }
        | E::StepRerunRequested { .. } => services(event),
    };
    Some(text)
}

/// The request: what it deploys for whom, and its credentials sealed and purged.
fn request(event: DeploymentEvent) -> String {
    use DeploymentEvent as E;
    match event {
        E::DeploymentRequested {
            blueprint,
            tenant,
            cloud,
            ..
        } => {
            let tenant = overture_domain::tenancy::tenant_of(&tenant, cloud.as_ref());
            // The id is the tenant; people know the project by its name and domain.
            let project = overture_domain::tenancy::ProjectLabel::of(cloud.as_ref())
                .map(|label| format!(" (project {label})"))
                .unwrap_or_default();
            format!(
                "deployment of `{}` for tenant `{tenant}`{project}: {} steps",
                blueprint.name,
                blueprint.steps.len()
            )
        }
        E::CredentialsSealed {
            secrets,
            ssh_public_key,
            token,
            ..
        } => {
            let mut sealed = Vec::new();
            if !secrets.is_empty() {
                sealed.push(format!(
                    "{} secret(s) ({})",
                    secrets.len(),
                    secrets.join(", ")
                ));
            }
            if ssh_public_key.is_some() {
                sealed.push("the deployment's SSH key".to_owned());
            }
            if token {
                sealed.push("the cloud token".to_owned());
            }
            format!("sealed {}", sealed.join(", "))
        }
        E::SecretsPurged {} => "secrets purged".to_owned(),
        // Events of other families: `text` sends none here.
        other => other.event_type().to_owned(),
    }
}

/// The bastion's access opened and closed, and the host keys pinned behind it.
fn bastion(event: DeploymentEvent) -> String {
    use DeploymentEvent as E;
    match event {
        E::BastionAccessGranted {
            bastion, source, ..
        } => format!("bastion {bastion} opened for {source}"),
        E::BastionAccessRevoked { kept_for, .. } if !kept_for.is_empty() => {
            format!(
                "bastion lease closed (rule kept for {} other deployment(s))",
                kept_for.len()
            )
        }
        E::BastionAccessRevoked { .. } => "bastion closed".to_owned(),
        E::HostKeysPinned {
            server,
            host,
            learned,
            keys,
        } => {
            let keys: Vec<String> = keys
                .iter()
                .map(|key| format!("{} {}", key.key_type, key.fingerprint))
                .collect();
            let name = if server == host {
                host
            } else {
                format!("{server} ({host})")
            };
            match learned {
                overture_events::HostKeySource::Console => format!(
                    "host keys of {name} pinned from its console: {}",
                    keys.join(", ")
                ),
                overture_events::HostKeySource::FirstUse => format!(
                    "host keys of {name} learned on first use, trusted without a check (no console output): {}",
                    keys.join(", ")
                ),
            }
        }
        // Events of other families: `text` sends none here.
        other => other.event_type().to_owned(),
    }
}

/// A step's attempts: scheduled, started, succeeded, failed, dead-lettered, retried, fenced in.
fn attempts(event: DeploymentEvent) -> String {
    use DeploymentEvent as E;
    match event {
        E::StepScheduled { step, .. } => format!("{step:<20} scheduled"),
        E::StepStarted { step, attempt, .. } => {
            format!("{step:<20} started (attempt {attempt})")
        }
        E::StepSucceeded {
            step,
            duration_ms,
            outputs,
            ..
        } => {
            let outputs = if outputs.is_empty() {
                String::new()
            } else {
                format!(
                    "; outputs: {}",
                    outputs.keys().cloned().collect::<Vec<_>>().join(", ")
                )
            };
            format!("{step:<20} succeeded in {}{outputs}", human(duration_ms))
        }
        E::StepAttemptFailed {
            step,
            attempt,
            error_class,
            message,
            ..
        } => {
            let first = message.lines().next().unwrap_or_default();
            format!("{step:<20} attempt {attempt} failed ({error_class}): {first}")
        }
        E::StepJobDeadLettered {
            step,
            attempt,
            receives,
        } => format!(
            "{step:<20} attempt {attempt}: its job was dead-lettered after {receives} deliveries"
        ),
        E::StepRetryScheduled {
            step,
            next_attempt,
            delay_ms,
            ..
        } => {
            format!(
                "{step:<20} retrying: attempt {next_attempt} in {}",
                human(delay_ms)
            )
        }
        E::StepNetworkPolicyApplied { step, allowed, .. } => format!(
            "{step:<20} network: only {}",
            if allowed.is_empty() {
                "its own loopback".to_owned()
            } else {
                allowed.join(", ")
            }
        ),
        // Events of other families: `text` sends none here.
        other => other.event_type().to_owned(),
    }
}

/// A step failing for good, the grace period, and the steps abandoned.
fn failures(event: DeploymentEvent) -> String {
    use DeploymentEvent as E;
    match event {
        E::StepFailed {
            step,
            attempts,
            error_class,
        } => format!("{step:<20} FAILED after {attempts} attempt(s) ({error_class})"),
        E::FailureGracePeriodStarted {
            failed_step,
            deadline,
        } => {
            format!(
                "`{failed_step}` failed: steps still running may finish until {}",
                deadline.format("%H:%M:%S")
            )
        }
        E::StepAbandoned { step, reason, .. } => {
            format!("{step:<20} abandoned: {reason}")
        }
        // Events of other families: `text` sends none here.
        other => other.event_type().to_owned(),
    }
}

/// How a deployment ends (succeeded, failed, cancelled) and runs again (redriven).
fn ends(event: DeploymentEvent) -> String {
    use DeploymentEvent as E;
    match event {
        E::DeploymentSucceeded {} => "deployment succeeded".to_owned(),
        E::DeploymentFailed { reason } => format!("deployment FAILED: {reason}"),
        E::CancellationRequested {
            requested_by,
            reason,
        } => format!("cancelling (asked by {requested_by}): {reason}"),
        E::DeploymentCancelled { reason, .. } => {
            format!("deployment cancelled: {reason}")
        }
        E::DeploymentRedriven {
            requested_by,
            steps,
        } => format!(
            "redriven (asked by {requested_by}): running again {}",
            steps.join(", ")
        ),
        // Events of other families: `text` sends none here.
        other => other.event_type().to_owned(),
    }
}

/// Tearing a deployment down: asked for, each step's resources destroyed or not, done.
fn destroy(event: DeploymentEvent) -> String {
    use DeploymentEvent as E;
    match event {
        E::DestroyRequested { steps } if steps.is_empty() => {
            "destroying: no step made anything to destroy".to_owned()
        }
        E::DestroyRequested { steps } => {
            format!("destroying the resources of: {}", steps.join(", "))
        }
        E::StepDestroyed { step, duration_ms } => {
            format!("{step:<20} destroyed in {}", human(duration_ms))
        }
        E::StepDestroyFailed { step, message, .. } => {
            let first = message.lines().next().unwrap_or_default();
            format!("{step:<20} destroy FAILED: {first}")
        }
        E::DeploymentDestroyed {} => "deployment destroyed".to_owned(),
        // Events of other families: `text` sends none here.
        other => other.event_type().to_owned(),
    }
}

/// The tenant's services: a step awaiting them, instances joining and leaving, a watching step run again.
fn services(event: DeploymentEvent) -> String {
    use DeploymentEvent as E;
    match event {
        E::StepAwaitingServices {
            step, waiting_for, ..
        } => format!(
            "{step:<20} waiting for {}",
            overture_domain::services::shortfalls_text(&waiting_for)
        ),
        // The members are in the audit trail; the schedule that follows is the news.
        E::ServiceRegistered {
            service,
            host,
            address,
            port,
            ..
        } => format!("service `{service}` registered: {host} ({address}:{port})"),
        E::ServiceDeregistered {
            service,
            host,
            address,
            port,
            ..
        } => format!("service `{service}` deregistered: {host} ({address}:{port})"),
        E::StepRerunRequested {
            step,
            service,
            from,
            to,
        } => format!(
            "{step:<20} runs again: service `{service}` went from {} to {} member(s)",
            from.len(),
            to.len()
        ),
        // Events of other families: `text` sends none here.
        other => other.event_type().to_owned(),
    }
}
