//! Live progress of a deployment, printed to stderr as its events are recorded.
//!
//! One line per step transition, and a "still running" line whenever nothing has been printed
//! for a while, so a long step never looks frozen. Everything printed comes from events, which
//! hold no secret values.

use std::io::Write;
use std::time::{Duration, Instant};

use overture_domain::{DeploymentState, StepStatus};
use overture_events::{DeploymentEvent, LogEntry};

use crate::engine::Watch;

/// How long progress may stay silent before a "still running" line.
const QUIET: Duration = Duration::from_secs(10);

/// Prints a deployment's progress.
pub struct Progress {
    started: Instant,
    last_line: Instant,
    to: Sink,
    /// The stream of the deployment followed: the first one seen. Lines of others (those whose
    /// watching steps it set off) name theirs.
    own: Option<String>,
}

/// Where progress lines go.
enum Sink {
    /// This process's standard error.
    Stderr,
    /// Another process's, through the engine that drives its deployment ([`crate::shared`]).
    Lines(tokio::sync::mpsc::UnboundedSender<String>),
}

impl Default for Progress {
    fn default() -> Self {
        Self::new()
    }
}

impl Progress {
    /// Starts the clock; lines go to standard error.
    pub fn new() -> Self {
        Self {
            started: Instant::now(),
            last_line: Instant::now(),
            to: Sink::Stderr,
            own: None,
        }
    }

    /// Follows `deployment`: lines of other deployments name theirs.
    pub fn following(mut self, deployment: overture_events::DeploymentId) -> Self {
        self.own = Some(deployment.stream());
        self
    }

    /// Starts the clock; each line (ending in a newline) is sent to `lines`.
    pub fn sending(lines: tokio::sync::mpsc::UnboundedSender<String>) -> Self {
        Self {
            to: Sink::Lines(lines),
            ..Self::new()
        }
    }

    fn line(&mut self, text: String) {
        let elapsed = self.started.elapsed().as_secs_f64();
        // One write per line: standard error is unbuffered, and `writeln!` would make a system
        // call of every piece of the format.
        let line = format!("[{elapsed:7.1}s] {text}\n");
        match &self.to {
            Sink::Stderr => {
                let _ = std::io::stderr().write_all(line.as_bytes());
            }
            // The receiver has gone only once its deployment is no longer followed.
            Sink::Lines(lines) => {
                let _ = lines.send(line);
            }
        }
        self.last_line = Instant::now();
    }
}

impl Watch for Progress {
    fn entry(&mut self, entry: &LogEntry) {
        let Ok(event) =
            DeploymentEvent::from_parts(&entry.envelope.event_type, entry.envelope.data.clone())
        else {
            return;
        };
        let stream = &entry.envelope.stream;
        let other = self.own.get_or_insert_with(|| stream.clone()) != stream;
        let text = match event {
            DeploymentEvent::DeploymentRequested {
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
            DeploymentEvent::CredentialsSealed {
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
            DeploymentEvent::BastionAccessGranted {
                bastion, source, ..
            } => format!("bastion {bastion} opened for {source}"),
            DeploymentEvent::BastionAccessRevoked { kept_for, .. } if !kept_for.is_empty() => {
                format!(
                    "bastion lease closed (rule kept for {} other deployment(s))",
                    kept_for.len()
                )
            }
            DeploymentEvent::BastionAccessRevoked { .. } => "bastion closed".to_owned(),
            DeploymentEvent::HostKeysPinned {
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
            DeploymentEvent::StepScheduled { step, .. } => format!("{step:<20} scheduled"),
            DeploymentEvent::StepStarted { step, attempt, .. } => {
                format!("{step:<20} started (attempt {attempt})")
            }
            DeploymentEvent::StepSucceeded {
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
            DeploymentEvent::StepAttemptFailed {
                step,
                attempt,
                error_class,
                message,
                ..
            } => {
                let first = message.lines().next().unwrap_or_default();
                format!("{step:<20} attempt {attempt} failed ({error_class}): {first}")
            }
            DeploymentEvent::StepJobDeadLettered {
                step,
                attempt,
                receives,
            } => format!(
                "{step:<20} attempt {attempt}: its job was dead-lettered after {receives} deliveries"
            ),
            DeploymentEvent::StepRetryScheduled {
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
            DeploymentEvent::StepFailed {
                step,
                attempts,
                error_class,
            } => format!("{step:<20} FAILED after {attempts} attempt(s) ({error_class})"),
            DeploymentEvent::FailureGracePeriodStarted {
                failed_step,
                deadline,
            } => {
                format!(
                    "`{failed_step}` failed: steps still running may finish until {}",
                    deadline.format("%H:%M:%S")
                )
            }
            DeploymentEvent::StepAbandoned { step, reason, .. } => {
                format!("{step:<20} abandoned: {reason}")
            }
            DeploymentEvent::SecretsPurged {} => "secrets purged".to_owned(),
            DeploymentEvent::DeploymentSucceeded {} => "deployment succeeded".to_owned(),
            DeploymentEvent::DeploymentFailed { reason } => format!("deployment FAILED: {reason}"),
            DeploymentEvent::CancellationRequested {
                requested_by,
                reason,
            } => format!("cancelling (asked by {requested_by}): {reason}"),
            DeploymentEvent::DeploymentCancelled { reason, .. } => {
                format!("deployment cancelled: {reason}")
            }
            DeploymentEvent::DestroyRequested { steps } if steps.is_empty() => {
                "destroying: no step made anything to destroy".to_owned()
            }
            DeploymentEvent::DestroyRequested { steps } => {
                format!("destroying the resources of: {}", steps.join(", "))
            }
            DeploymentEvent::StepDestroyed { step, duration_ms } => {
                format!("{step:<20} destroyed in {}", human(duration_ms))
            }
            DeploymentEvent::StepDestroyFailed { step, message, .. } => {
                let first = message.lines().next().unwrap_or_default();
                format!("{step:<20} destroy FAILED: {first}")
            }
            DeploymentEvent::DeploymentDestroyed {} => "deployment destroyed".to_owned(),
            DeploymentEvent::DeploymentRedriven {
                requested_by,
                steps,
            } => format!(
                "redriven (asked by {requested_by}): running again {}",
                steps.join(", ")
            ),
            DeploymentEvent::StepAwaitingServices {
                step, waiting_for, ..
            } => format!(
                "{step:<20} waiting for {}",
                overture_domain::services::shortfalls_text(&waiting_for)
            ),
            // The members are in the audit trail; the schedule that follows is the news.
            DeploymentEvent::ServicesResolved { .. } => return,
            DeploymentEvent::ServiceRegistered {
                service,
                host,
                address,
                port,
                ..
            } => format!("service `{service}` registered: {host} ({address}:{port})"),
            DeploymentEvent::ServiceDeregistered {
                service,
                host,
                address,
                port,
                ..
            } => format!("service `{service}` deregistered: {host} ({address}:{port})"),
            DeploymentEvent::StepRerunRequested {
                step,
                service,
                from,
                to,
            } => format!(
                "{step:<20} runs again: service `{service}` went from {} to {} member(s)",
                from.len(),
                to.len()
            ),
            DeploymentEvent::StepNetworkPolicyApplied { step, allowed, .. } => format!(
                "{step:<20} network: only {}",
                if allowed.is_empty() {
                    "its own loopback".to_owned()
                } else {
                    allowed.join(", ")
                }
            ),
        };
        if other {
            let id = stream.strip_prefix("deployment-").unwrap_or(stream);
            self.line(format!("[{id}] {text}"));
        } else {
            self.line(text);
        }
    }

    fn tick(&mut self, state: &DeploymentState) {
        if self.last_line.elapsed() < QUIET {
            return;
        }
        let running: Vec<&String> = state
            .steps
            .iter()
            .filter(|(_, s)| s.status == StepStatus::Running)
            .map(|(n, _)| n)
            .collect();
        let waiting = state
            .steps
            .values()
            .filter(|s| s.status.is_waiting())
            .count();
        let text = if running.is_empty() {
            format!("waiting: {waiting} attempt(s) due later")
        } else {
            format!(
                "still running: {}",
                running
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        self.line(text);
    }
}

/// Milliseconds for people.
pub fn human(ms: u64) -> String {
    match ms {
        ms if ms < 1_000 => format!("{ms}ms"),
        ms if ms < 60_000 => format!("{:.1}s", ms as f64 / 1_000.0),
        ms => format!("{}m{:02}s", ms / 60_000, (ms % 60_000) / 1_000),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use overture_events::{DeploymentId, Envelope, Metadata};

    fn entry(deployment: DeploymentId, event: DeploymentEvent) -> LogEntry {
        LogEntry {
            position: 1,
            envelope: Envelope {
                stream: deployment.stream(),
                revision: 0,
                id: uuid::Uuid::now_v7(),
                event_type: event.event_type().into(),
                data: event.data(),
                metadata: Metadata {
                    tenant: "acme".into(),
                    actor: "orchestrator".into(),
                    correlation_id: uuid::Uuid::now_v7(),
                    causation_id: uuid::Uuid::now_v7(),
                    recorded_at: chrono::Utc::now(),
                },
            },
        }
    }

    #[test]
    fn a_line_of_another_deployment_than_the_one_followed_names_it() {
        let (lines, mut received) = tokio::sync::mpsc::unbounded_channel();
        let followed = DeploymentId::from_uuid(uuid::Uuid::now_v7());
        let woken = DeploymentId::from_uuid(uuid::Uuid::now_v7());
        let mut progress = Progress::sending(lines).following(followed);
        let rerun = DeploymentEvent::StepRerunRequested {
            step: "lb".into(),
            service: "app".into(),
            from: vec!["10.0.0.5:8000".into()],
            to: vec!["10.0.0.5:8000".into(), "10.0.0.6:8000".into()],
        };
        progress.entry(&entry(woken, rerun.clone()));
        progress.entry(&entry(followed, rerun));
        let theirs = received.try_recv().expect("a line");
        let ours = received.try_recv().expect("a line");
        assert!(
            theirs.contains(&format!("[{woken}] lb")) && theirs.contains("from 1 to 2 member(s)"),
            "{theirs}"
        );
        assert!(
            !ours.contains(&followed.to_string()) && ours.contains("s] lb"),
            "{ours}"
        );
    }
}
