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

mod lines;

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
        // Lines quote what steps rendered and printed (an address, a failure's message): a
        // newline or an escape sequence in them must not break the line or drive the terminal.
        let text = overture_domain::text::escaped(&text);
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
        let Some(text) = lines::text(event) else {
            return;
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
                    previous: None,
                    hash: None,
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

    #[test]
    fn a_quoted_value_with_a_newline_or_an_escape_stays_on_its_line_and_moves_no_cursor() {
        let (lines, mut received) = tokio::sync::mpsc::unbounded_channel();
        let mut progress = Progress::sending(lines);
        let failed = DeploymentEvent::DeploymentFailed {
            reason: "`10.0.0.1\n\u{1b}[2J\u{202e}` is not an address".into(),
        };
        progress.entry(&entry(
            DeploymentId::from_uuid(uuid::Uuid::now_v7()),
            failed,
        ));
        let line = received.try_recv().expect("a line");
        assert_eq!(line.matches('\n').count(), 1, "{line:?}");
        assert!(line.ends_with('\n'), "{line:?}");
        assert!(!line.contains(['\u{1b}', '\u{202e}']), "{line:?}");
        assert!(
            line.contains(r"`10.0.0.1\n\u{1b}[2J\u{202e}` is not an address"),
            "{line:?}"
        );
    }
}
