//! `overture events`: a deployment's history as a timeline a person can follow, and the filters
//! that choose which of its events are shown.
//!
//! - [`Filter`]: `--step`, `--type` and `--since`, read from the command line and applied to
//!   envelopes; `--json` prints the envelopes it keeps, the timeline their lines.
//! - [`lines`]: the timeline. One line per event: revision, time (UTC), who (the actor), what
//!   (the event in words, the step and attempt as `build#2`); under it, where there is one, the
//!   why: error class, exit code, the message's headline and last line of output, and the retry
//!   policy's decision with its wait.
//!
//! Both are pure functions of the envelopes the query port returned, so the embedded and the aws
//! backends print the same. The timeline reads the whole history for its context (the retry
//! decision recorded after a failed attempt, the blueprint's retry rules, when the deployment
//! was requested) and prints only the events the filter keeps.

use std::collections::HashMap;

use chrono::NaiveDateTime;
use overture_domain::deployment::{Deployment, DeploymentState};
use overture_domain::retry;
use overture_domain::text::escaped;
use overture_events::{
    BlueprintSnapshot, DeploymentEvent, Envelope, ErrorClass, HostKeySource, Timestamp,
};

use crate::progress::human;

/// The widest a timeline line gets, wrapping where it would be wider.
const WIDTH: usize = 100;

/// The widest the actor column gets; a longer actor pushes its own line's text along.
const MAX_WHO: usize = 16;

/// Which events `overture events` shows: all of those given must hold.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Filter {
    /// Only this step's events (those whose `step` is this).
    step: Option<String>,
    /// Only these event types; none given keeps every type.
    types: Vec<&'static str>,
    /// Only events at or after this point.
    since: Option<Since>,
}

/// Where `--since` starts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Since {
    /// From this revision of the stream on.
    Revision(u64),
    /// From this time on (recorded at or after it).
    Time(Timestamp),
}

/// A filter that cannot be applied, said the way the user can fix it.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum FilterError {
    /// `--type` names no event type.
    #[error(
        "--type `{}`: no such event type; use one or more of (case does not matter): {}",
        escaped(.0),
        DeploymentEvent::TYPES.join(", ")
    )]
    UnknownType(String),
    /// `--since` is neither a revision nor a time.
    #[error(
        "--since `{}`: expected a revision number (such as 12) or a time in RFC 3339 (such as \
         2026-11-23T10:00:00Z) or as the timeline shows it, in UTC (2026-11-23 10:00:00.250, \
         or a day: 2026-11-23)",
        escaped(.0)
    )]
    Since(String),
    /// `--step` names no step of the deployment.
    #[error(
        "--step `{}`: the deployment has no such step; its steps are: {}",
        escaped(.step),
        .steps.join(", ")
    )]
    UnknownStep {
        /// The step asked for.
        step: String,
        /// The deployment's steps.
        steps: Vec<String>,
    },
}

impl Filter {
    /// Reads the filter options: `types` as given (each may hold several, comma-separated),
    /// matched to event types ignoring case and `-`, `_` or spaces.
    pub fn parse(
        step: Option<String>,
        types: &[String],
        since: Option<&str>,
    ) -> Result<Self, FilterError> {
        let types = types
            .iter()
            .flat_map(|given| given.split(','))
            .map(|given| {
                let wanted = folded(given);
                DeploymentEvent::TYPES
                    .into_iter()
                    .find(|known| !wanted.is_empty() && folded(known) == wanted)
                    .ok_or_else(|| FilterError::UnknownType(given.trim().to_owned()))
            })
            .collect::<Result<_, _>>()?;
        let since = since.map(parse_since).transpose()?;
        Ok(Self { step, types, since })
    }

    /// Refuses a `--step` that is not one of the deployment's steps, as its blueprint lists
    /// them: a step that exists and has no events yet is not a mistake, a misspelt one is.
    pub fn check_step(&self, history: &[Envelope]) -> Result<(), FilterError> {
        let Some(step) = &self.step else {
            return Ok(());
        };
        let Some(blueprint) = blueprint_of(history) else {
            return Ok(());
        };
        if blueprint.step(step).is_some() {
            return Ok(());
        }
        Err(FilterError::UnknownStep {
            step: step.clone(),
            steps: blueprint.steps.iter().map(|s| s.name.clone()).collect(),
        })
    }

    /// Whether an event is shown.
    pub fn keeps(&self, envelope: &Envelope) -> bool {
        let step = self
            .step
            .as_ref()
            .is_none_or(|step| envelope.data.get("step").and_then(|s| s.as_str()) == Some(step));
        let kind = self.types.is_empty() || self.types.contains(&envelope.event_type.as_str());
        let since = match self.since {
            None => true,
            Some(Since::Revision(from)) => envelope.revision >= from,
            Some(Since::Time(from)) => envelope.metadata.recorded_at >= from,
        };
        step && kind && since
    }
}

/// A type name as `--type` compares it: lowercase, without separators.
fn folded(name: &str) -> String {
    name.chars()
        .filter(|c| !matches!(c, '-' | '_' | ' '))
        .flat_map(char::to_lowercase)
        .collect()
}

fn parse_since(text: &str) -> Result<Since, FilterError> {
    let text = text.trim();
    if let Ok(revision) = text.parse::<u64>() {
        return Ok(Since::Revision(revision));
    }
    if let Ok(time) = chrono::DateTime::parse_from_rfc3339(text) {
        return Ok(Since::Time(time.to_utc()));
    }
    // The timeline's own times are UTC without a zone; one copied from it must work.
    [
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%d %H:%M",
    ]
    .iter()
    .find_map(|format| NaiveDateTime::parse_from_str(text, format).ok())
    .or_else(|| {
        chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d")
            .ok()
            .and_then(|day| day.and_hms_opt(0, 0, 0))
    })
    .map(|time| Since::Time(time.and_utc()))
    .ok_or_else(|| FilterError::Since(text.to_owned()))
}

/// The blueprint the deployment was requested with, from its first event.
fn blueprint_of(history: &[Envelope]) -> Option<BlueprintSnapshot> {
    history
        .iter()
        .find(|e| e.event_type == "DeploymentRequested")
        .and_then(|e| DeploymentEvent::from_parts(&e.event_type, e.data.clone()).ok())
        .and_then(|event| match event {
            DeploymentEvent::DeploymentRequested { blueprint, .. } => Some(blueprint),
            _ => None,
        })
}

/// One event as the timeline shows it.
struct Entry {
    revision: u64,
    at: Timestamp,
    who: String,
    /// The event in words, with its step and attempt and a short detail.
    what: String,
    /// The lines under it: why it happened and what was decided, each `(label, text)`.
    why: Vec<(&'static str, String)>,
}

/// The timeline of a deployment's `history` (every event of its stream, in order), showing
/// the events `filter` keeps: a header, then each event's line and its why lines. Nothing
/// (not even the header) when the filter keeps no event.
pub fn lines(history: &[Envelope], filter: &Filter) -> Vec<String> {
    let context = Context::of(history);
    let entries: Vec<Entry> = history
        .iter()
        .enumerate()
        .filter(|(_, envelope)| filter.keeps(envelope))
        .map(|(index, envelope)| context.entry(index, envelope))
        .collect();
    if entries.is_empty() {
        return Vec::new();
    }
    let rev_width = entries
        .iter()
        .map(|e| e.revision.to_string().len())
        .max()
        .unwrap_or(0)
        .max("REV".len());
    let who_width = entries
        .iter()
        .map(|e| e.who.chars().count())
        .max()
        .unwrap_or(0)
        .clamp("WHO".len(), MAX_WHO);
    // REV, two spaces, the time (23 characters), two spaces: where WHO starts, and the why
    // lines, which have the room of both columns.
    let who_column = rev_width + 2 + 23 + 2;
    let what_column = who_column + who_width + 2;
    let mut out = vec![format!(
        "{:>rev_width$}  {:<23}  {:<who_width$}  WHAT",
        "REV", "TIME (UTC)", "WHO"
    )];
    for entry in entries {
        let lead = format!(
            "{:>rev_width$}  {}  {:<who_width$}  ",
            entry.revision,
            entry.at.format("%Y-%m-%d %H:%M:%S%.3f"),
            entry.who
        );
        let start = lead.chars().count();
        wrap(&mut out, lead, start, &entry.what, what_column + 4);
        for (label, text) in entry.why {
            let lead = format!("{:who_column$}{label}: ", "");
            let start = lead.chars().count();
            wrap(&mut out, lead, start, &text, start);
        }
    }
    out
}

/// Appends `text` after `lead` (which is `start` characters wide), wrapped at [`WIDTH`] on
/// spaces, continuation lines indented by `indent`. A word wider than the room is not cut.
fn wrap(out: &mut Vec<String>, lead: String, start: usize, text: &str, indent: usize) {
    let mut line = lead;
    let mut used = start;
    let mut empty = true;
    for word in text.split(' ').filter(|w| !w.is_empty()) {
        let len = word.chars().count();
        if !empty && used + 1 + len > WIDTH {
            out.push(line.trim_end().to_owned());
            line = " ".repeat(indent);
            used = indent;
            empty = true;
        }
        if !empty {
            line.push(' ');
            used += 1;
        }
        line.push_str(word);
        used += len;
        empty = false;
    }
    out.push(line.trim_end().to_owned());
}

/// What the timeline knows from the whole history, beyond each event.
struct Context {
    /// When the deployment was requested.
    requested_at: Option<Timestamp>,
    /// The retry decision recorded after each failed attempt, by the failure's index.
    decisions: HashMap<usize, String>,
    /// Why each step that failed for good was not retried, by the `StepFailed`'s index.
    give_ups: HashMap<usize, String>,
}

impl Context {
    fn of(history: &[Envelope]) -> Self {
        let events: Vec<Option<DeploymentEvent>> = history
            .iter()
            .map(|e| DeploymentEvent::from_parts(&e.event_type, e.data.clone()).ok())
            .collect();
        let blueprint = blueprint_of(history);
        let requested_at = history
            .iter()
            .find(|e| e.event_type == "DeploymentRequested")
            .map(|e| e.metadata.recorded_at);

        // The retry policy counts a step's attempts from its current run's first (a redrive
        // starts a new run), as the aggregate folds it; the wording counts them the same way.
        let mut state = DeploymentState::default();
        let mut firsts = HashMap::new();
        for (index, event) in events.iter().enumerate() {
            let Some(event) = event else { continue };
            state = Deployment::apply(state, event.clone());
            if let DeploymentEvent::StepFailed { step, .. }
            | DeploymentEvent::StepRetryScheduled { step, .. } = event
            {
                let first = state.steps.get(step).map_or(1, |s| s.first_attempt);
                firsts.insert(index, first);
            }
        }
        let of_this_run = |index: usize, attempt: u32| {
            attempt.saturating_sub(firsts.get(&index).map_or(1, |f| *f)) + 1
        };

        // The policy retries only while the deployment runs: once a step has failed for good,
        // or a cancel was asked for, a failed attempt is not retried whatever its class.
        let mut give_ups = HashMap::new();
        let mut failing: Option<String> = None;
        let mut cancelling = false;
        for (index, event) in events.iter().enumerate() {
            match event {
                Some(DeploymentEvent::StepFailed {
                    step,
                    attempts,
                    error_class,
                }) => {
                    let reason = if cancelling {
                        "no retry: the deployment is being cancelled".to_owned()
                    } else if let Some(first) = &failing {
                        format!(
                            "no retry: the deployment is already failing (step `{}` failed)",
                            escaped(first)
                        )
                    } else {
                        not_retried(
                            blueprint.as_ref(),
                            step,
                            *error_class,
                            of_this_run(index, *attempts),
                        )
                    };
                    give_ups.insert(index, reason);
                    failing.get_or_insert_with(|| step.clone());
                }
                Some(DeploymentEvent::CancellationRequested { .. }) => cancelling = true,
                // A redrive starts a new run, which the policy retries again.
                Some(DeploymentEvent::DeploymentRedriven { .. }) => {
                    failing = None;
                    cancelling = false;
                }
                _ => {}
            }
        }

        // The decision is appended with the failure; it is the next event about that attempt.
        let mut decisions = HashMap::new();
        for (index, event) in events.iter().enumerate() {
            let Some(DeploymentEvent::StepAttemptFailed { step, attempt, .. }) = event else {
                continue;
            };
            let decision = events
                .iter()
                .enumerate()
                .skip(index + 1)
                .find_map(|(later, event)| match event {
                    Some(DeploymentEvent::StepRetryScheduled {
                        step: s,
                        attempt: a,
                        next_attempt,
                        delay_ms,
                        not_before,
                    }) if s == step && a == attempt => Some(retry_in(
                        of_this_run(later, *next_attempt),
                        *delay_ms,
                        *not_before,
                        history[later].metadata.recorded_at,
                    )),
                    Some(DeploymentEvent::StepFailed { step: s, .. }) if s == step => {
                        give_ups.get(&later).cloned()
                    }
                    _ => None,
                });
            if let Some(decision) = decision {
                decisions.insert(index, decision);
            }
        }
        Self {
            requested_at,
            decisions,
            give_ups,
        }
    }

    /// How long after the request `at` is, for the deployment's end.
    fn after_request(&self, at: Timestamp) -> String {
        self.requested_at
            .map(|start| {
                let ms = (at - start).num_milliseconds().max(0);
                format!(" after {}", human(u64::try_from(ms).unwrap_or(0)))
            })
            .unwrap_or_default()
    }

    fn entry(&self, index: usize, envelope: &Envelope) -> Entry {
        let at = envelope.metadata.recorded_at;
        let (what, why) =
            match DeploymentEvent::from_parts(&envelope.event_type, envelope.data.clone()) {
                Ok(event) => self.describe(index, &event, at),
                Err(error) => (
                    format!("{} (unreadable)", words(&envelope.event_type)),
                    vec![("why", escaped(&error.to_string()).into_owned())],
                ),
            };
        Entry {
            revision: envelope.revision,
            at,
            who: escaped(&envelope.metadata.actor).into_owned(),
            what,
            why,
        }
    }

    fn describe(
        &self,
        index: usize,
        event: &DeploymentEvent,
        at: Timestamp,
    ) -> (String, Vec<(&'static str, String)>) {
        use DeploymentEvent as E;
        let said = |text: &str| escaped(text).into_owned();
        let title = words(event.event_type());
        let mut why = Vec::new();
        let what = match event {
            E::DeploymentRequested {
                tenant,
                requested_by,
                trigger,
                source,
                blueprint,
                params,
                cloud,
                ..
            } => {
                why.push((
                    "by",
                    format!("{} via {}", said(requested_by), said(trigger)),
                ));
                why.push(("from", said(source)));
                if !params.is_empty() {
                    let params: Vec<String> = params
                        .iter()
                        .map(|(k, v)| format!("{k}={}", said(v)))
                        .collect();
                    why.push(("params", params.join(" ")));
                }
                if let Some(cloud) = cloud {
                    why.push((
                        "cloud",
                        format!(
                            "project {} as user {} at {}",
                            said(&cloud.project),
                            said(&cloud.user),
                            said(&cloud.auth_url)
                        ),
                    ));
                }
                format!(
                    "{title}: {} for tenant {}",
                    said(&blueprint.name),
                    said(tenant)
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
                    let names: Vec<String> = secrets.iter().map(|s| said(s)).collect();
                    sealed.push(format!("secrets {}", names.join(", ")));
                }
                if ssh_public_key.is_some() {
                    sealed.push("its own SSH key".to_owned());
                }
                if *token {
                    sealed.push("the cloud token".to_owned());
                }
                if sealed.is_empty() {
                    sealed.push("nothing".to_owned());
                }
                why.push(("sealed", sealed.join("; ")));
                title
            }
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
                failure(&mut why, Some(*error_class), *exit_code, message);
                if let Some(decision) = self.decisions.get(&index) {
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
            E::StepFailed {
                step,
                attempts,
                error_class,
            } => {
                if let Some(decision) = self.give_ups.get(&index) {
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
            E::SecretsPurged {} | E::DeploymentDestroyed {} => title,
            E::DeploymentSucceeded {} => format!("{title}{}", self.after_request(at)),
            E::DeploymentFailed { reason } => {
                why.push(("why", said(reason)));
                format!("{title}{}", self.after_request(at))
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
                format!("{title}{}{by}", self.after_request(at))
            }
            E::DestroyRequested { steps } => {
                let steps: Vec<String> = steps.iter().map(|s| said(s)).collect();
                format!("{title}: {}", steps.join(", "))
            }
            E::DeploymentRedriven {
                requested_by,
                steps,
            } => {
                let steps: Vec<String> = steps.iter().map(|s| said(s)).collect();
                why.push(("again", steps.join(", ")));
                format!("{title}: by {}", said(requested_by))
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
            E::StepDestroyed { step, duration_ms } => {
                format!("{title}: {} in {}", said(step), human(*duration_ms))
            }
            E::StepDestroyFailed {
                step,
                exit_code,
                message,
                duration_ms,
            } => {
                failure(&mut why, None, *exit_code, message);
                format!("{title}: {}{}", said(step), took(*duration_ms))
            }
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
                    why.push(("members", members_of(&said(service), members, &said)));
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
                why.push(("from", members_of(&said(service), from, &said)));
                why.push(("to", members_of(&said(service), to, &said)));
                format!("{title}: {}", said(step))
            }
        };
        (what, why)
    }
}

/// A service's members as the audit trail shows them: `app: 10.0.0.3:8000, 10.0.0.4:8000`.
fn members_of(service: &str, members: &[String], said: &dyn Fn(&str) -> String) -> String {
    if members.is_empty() {
        format!("{service}: none")
    } else {
        let members: Vec<String> = members.iter().map(|m| said(m)).collect();
        format!("{service}: {}", members.join(", "))
    }
}

/// Why an attempt failed: its class and exit code with the message's headline, then the last
/// line of the output recorded with it (the message is masked when it is recorded; `overture
/// logs` has the whole output).
fn failure(
    why: &mut Vec<(&'static str, String)>,
    class: Option<ErrorClass>,
    exit_code: Option<i32>,
    message: &str,
) {
    let (headline, output) = match message.split_once("; last output:\n") {
        Some((headline, output)) => (headline, output),
        None => message.split_once('\n').unwrap_or((message, "")),
    };
    let mut cause: Vec<String> = class.iter().map(ToString::to_string).collect();
    cause.extend(exit_code.map(|code| format!("exit {code}")));
    let headline = escaped(headline.trim());
    why.push((
        "why",
        if cause.is_empty() {
            headline.into_owned()
        } else {
            format!("{}: {headline}", cause.join(", "))
        },
    ));
    if let Some(last) = output.lines().rev().find(|line| !line.trim().is_empty()) {
        why.push(("output", escaped(last.trim()).into_owned()));
    }
}

/// Why a step that failed for good got no retry, by the retry rule of its blueprint; `attempts`
/// counts those of the run that failed.
fn not_retried(
    blueprint: Option<&BlueprintSnapshot>,
    step: &str,
    class: ErrorClass,
    attempts: u32,
) -> String {
    let Some(spec) = blueprint.and_then(|b| b.step(step)) else {
        return "no retry".to_owned();
    };
    match retry::rule_for(spec, class).times {
        0 => format!("no retry: class {class} is not retried"),
        times if attempts > times => format!("no retry: class {class} allows {times}, all used"),
        _ => "no retry".to_owned(),
    }
}

/// A retry decision: `retry #2 in 10s (at 10:00:21.000)`; `next_attempt` counts from the
/// run's first attempt.
fn retry_in(next_attempt: u32, delay_ms: u64, due: Timestamp, now: Timestamp) -> String {
    let retry = next_attempt.saturating_sub(1);
    if delay_ms == 0 {
        format!("retry #{retry} at once")
    } else {
        format!(
            "retry #{retry} in {} (at {})",
            wait(delay_ms),
            clock(due, now)
        )
    }
}

/// A wait: whole seconds as `20s`, anything else as progress shows durations.
fn wait(ms: u64) -> String {
    let (seconds, rest) = (ms / 1_000, ms % 1_000);
    if rest == 0 && (1..60).contains(&seconds) {
        format!("{seconds}s")
    } else {
        human(ms)
    }
}

/// ` after 1.2s`, or nothing when the attempt took no time (it was cut short from outside).
fn took(duration_ms: u64) -> String {
    if duration_ms == 0 {
        String::new()
    } else {
        format!(" after {}", human(duration_ms))
    }
}

/// A time on the same day as `now` by its clock alone, another day's in full.
fn clock(time: Timestamp, now: Timestamp) -> String {
    if time.date_naive() == now.date_naive() {
        time.format("%H:%M:%S%.3f").to_string()
    } else {
        time.format("%Y-%m-%d %H:%M:%S%.3f").to_string()
    }
}

/// A step's attempt: `build#2`.
fn attempt_of(step: &str, attempt: u32) -> String {
    format!("{}#{attempt}", escaped(step))
}

/// An event type in words: `StepAttemptFailed` reads `step attempt failed`.
fn words(event_type: &str) -> String {
    let mut out = String::with_capacity(event_type.len() + 4);
    for c in event_type.chars() {
        if c.is_uppercase() && !out.is_empty() {
            out.push(' ');
        }
        out.extend(c.to_lowercase());
    }
    escaped(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use overture_events::{Metadata, RetryRule, StepSpec};

    use super::*;

    /// 2026-11-23 10:00:00 UTC plus `ms`.
    fn at(ms: i64) -> Timestamp {
        chrono::DateTime::parse_from_rfc3339("2026-11-23T10:00:00Z")
            .expect("a time")
            .to_utc()
            + chrono::TimeDelta::milliseconds(ms)
    }

    fn step(name: &str, retry: &[(ErrorClass, u32, u64)]) -> StepSpec {
        StepSpec {
            name: name.into(),
            kind: "script".into(),
            with: BTreeMap::new(),
            needs: vec![],
            timeout_ms: 60_000,
            retry: retry
                .iter()
                .map(|(class, times, wait_ms)| {
                    (
                        *class,
                        RetryRule {
                            times: *times,
                            wait_ms: *wait_ms,
                        },
                    )
                })
                .collect(),
            limits: Default::default(),
            provides: None,
            requires: vec![],
            watch: vec![],
        }
    }

    fn requested(steps: Vec<StepSpec>) -> DeploymentEvent {
        DeploymentEvent::DeploymentRequested {
            triggered_by: None,
            tenant: "acme".into(),
            requested_by: "ada".into(),
            trigger: "cli".into(),
            source: "examples/publish.yaml".into(),
            blueprint: BlueprintSnapshot {
                name: "publish".into(),
                description: None,
                params: vec![],
                secrets: vec!["token".into()],
                grace_ms: 120_000,
                steps,
                hosts: BTreeMap::new(),
                files: BTreeMap::new(),
                stored_files: BTreeMap::new(),
                bastion: None,
                egress: vec![],
            },
            blueprint_hash: "ab".into(),
            params: [("channel".to_owned(), "stable".to_owned())].into(),
            cloud: None,
        }
    }

    /// A history: each event with its actor and its time in ms after 10:00:00.
    fn history(events: Vec<(&str, i64, DeploymentEvent)>) -> Vec<Envelope> {
        events
            .into_iter()
            .enumerate()
            .map(|(revision, (actor, ms, event))| Envelope {
                stream: "deployment-x".into(),
                revision: revision as u64,
                id: uuid::Uuid::nil(),
                event_type: event.event_type().into(),
                data: event.data(),
                metadata: Metadata {
                    tenant: "acme".into(),
                    actor: actor.into(),
                    correlation_id: uuid::Uuid::nil(),
                    causation_id: uuid::Uuid::nil(),
                    recorded_at: at(ms),
                },
            })
            .collect()
    }

    fn failed(step: &str, attempt: u32, message: &str) -> DeploymentEvent {
        DeploymentEvent::StepAttemptFailed {
            step: step.into(),
            attempt,
            error_class: ErrorClass::BackendUnreachable,
            exit_code: Some(1),
            message: message.into(),
            duration_ms: 1_200,
        }
    }

    /// `publish`, whose backend-unreachable failures are retried twice after 20 s: it fails
    /// twice, then succeeds.
    fn a_retried_publish() -> Vec<Envelope> {
        let publish = step("publish", &[(ErrorClass::BackendUnreachable, 2, 20_000)]);
        let message = "the cloud answered 503; last output:\nusing token ***\n\
                       503 The backend server is unreachable\n";
        history(vec![
            ("ada", 0, requested(vec![publish])),
            (
                "ada",
                5,
                DeploymentEvent::CredentialsSealed {
                    seal: "seal-1".into(),
                    secrets: vec!["token".into()],
                    ssh_public_key: Some("ssh-ed25519 AAAAC3Nza deployment".into()),
                    token: true,
                },
            ),
            (
                "orchestrator",
                10,
                DeploymentEvent::StepScheduled {
                    step: "publish".into(),
                    attempt: 1,
                    not_before: at(10),
                },
            ),
            (
                "runner",
                20,
                DeploymentEvent::StepStarted {
                    step: "publish".into(),
                    attempt: 1,
                    sandbox: "sb-1".into(),
                    lease_until: None,
                },
            ),
            ("runner", 1_234, failed("publish", 1, message)),
            (
                "runner",
                1_234,
                DeploymentEvent::StepRetryScheduled {
                    step: "publish".into(),
                    attempt: 1,
                    next_attempt: 2,
                    delay_ms: 20_000,
                    not_before: at(21_234),
                },
            ),
            (
                "runner",
                21_240,
                DeploymentEvent::StepStarted {
                    step: "publish".into(),
                    attempt: 2,
                    sandbox: "sb-2".into(),
                    lease_until: None,
                },
            ),
            (
                "runner",
                22_000,
                DeploymentEvent::StepSucceeded {
                    step: "publish".into(),
                    attempt: 2,
                    outputs: [("url".to_owned(), "https://example.test/1.4.2".to_owned())].into(),
                    duration_ms: 760,
                },
            ),
            ("orchestrator", 22_010, DeploymentEvent::SecretsPurged {}),
            (
                "orchestrator",
                22_020,
                DeploymentEvent::DeploymentSucceeded {},
            ),
        ])
    }

    #[test]
    fn a_retried_failure_reads_as_who_did_what_and_why_and_what_was_decided() {
        let lines = lines(&a_retried_publish(), &Filter::default());
        let expected = [
            "REV  TIME (UTC)               WHO           WHAT",
            "  0  2026-11-23 10:00:00.000  ada           deployment requested: publish for tenant acme",
            "                              by: ada via cli",
            "                              from: examples/publish.yaml",
            "                              params: channel=stable",
            "  1  2026-11-23 10:00:00.005  ada           credentials sealed",
            "                              sealed: secrets token; its own SSH key; the cloud token",
            "  2  2026-11-23 10:00:00.010  orchestrator  step scheduled: publish#1",
            "  3  2026-11-23 10:00:00.020  runner        step started: publish#1",
            "  4  2026-11-23 10:00:01.234  runner        step attempt failed: publish#1 after 1.2s",
            "                              why: backend-unreachable, exit 1: the cloud answered 503",
            "                              output: 503 The backend server is unreachable",
            "                              next: retry #1 in 20s (at 10:00:21.234)",
            "  5  2026-11-23 10:00:01.234  runner        step retry scheduled: publish#2 in 20s (at 10:00:21.234)",
            "  6  2026-11-23 10:00:21.240  runner        step started: publish#2",
            "  7  2026-11-23 10:00:22.000  runner        step succeeded: publish#2 in 760ms",
            "                              outputs: url=https://example.test/1.4.2",
            "  8  2026-11-23 10:00:22.010  orchestrator  secrets purged",
            "  9  2026-11-23 10:00:22.020  orchestrator  deployment succeeded after 22.0s",
        ];
        assert_eq!(lines, expected, "\n{}", lines.join("\n"));
        assert!(lines.iter().all(|line| line.chars().count() <= WIDTH));
    }

    #[test]
    fn a_step_attempts_network_policy_lists_what_it_may_reach() {
        let mut given = a_retried_publish();
        given.truncate(4);
        let policy = DeploymentEvent::StepNetworkPolicyApplied {
            step: "publish".into(),
            attempt: 1,
            allowed: vec!["10.0.0.0/24".into(), "127.0.0.1:5000".into()],
        };
        let mut event = history(vec![("runner", 21, policy)]).remove(0);
        event.revision = 4;
        given.push(event);
        let text = lines(&given, &Filter::default()).join("\n");
        assert!(
            text.contains("runner        step network policy applied: publish#1\n"),
            "{text}"
        );
        assert!(
            text.contains("allowed: 10.0.0.0/24, 127.0.0.1:5000"),
            "{text}"
        );
    }

    #[test]
    fn a_failure_shows_its_masked_message_and_credentials_only_by_name() {
        let mut given = a_retried_publish();
        given[4] = history(vec![(
            "runner",
            1_234,
            failed(
                "publish",
                1,
                "exited with code 1; last output:\nlogin as ada\ntoken *** refused\n",
            ),
        )])
        .remove(0);
        given[4].revision = 4;
        let text = lines(&given, &Filter::default()).join("\n");
        assert!(
            text.contains("\n                              output: token *** refused\n"),
            "the last line of output, masked as it was recorded:\n{text}"
        );
        assert!(text.contains("sealed: secrets token;"), "{text}");
        assert!(
            !text.contains("AAAAC3Nza"),
            "the key is named, not printed: {text}"
        );
        assert!(!text.contains("seal-1"), "{text}");
    }

    #[test]
    fn a_step_that_is_not_retried_says_so_and_one_out_of_retries_says_they_are_used() {
        let build = step("build", &[]);
        let push = step("push", &[(ErrorClass::BackendUnreachable, 1, 0)]);
        let failure = |step: &str, attempt, class, code| DeploymentEvent::StepAttemptFailed {
            step: step.into(),
            attempt,
            error_class: class,
            exit_code: code,
            message: "it broke".into(),
            duration_ms: 0,
        };
        let given = history(vec![
            ("ada", 0, requested(vec![push, build])),
            (
                "runner",
                1_000,
                failure("push", 1, ErrorClass::BackendUnreachable, None),
            ),
            (
                "runner",
                1_000,
                DeploymentEvent::StepRetryScheduled {
                    step: "push".into(),
                    attempt: 1,
                    next_attempt: 2,
                    delay_ms: 0,
                    not_before: at(1_000),
                },
            ),
            (
                "runner",
                2_000,
                failure("push", 2, ErrorClass::BackendUnreachable, None),
            ),
            (
                "runner",
                2_000,
                DeploymentEvent::StepFailed {
                    step: "push".into(),
                    attempts: 2,
                    error_class: ErrorClass::BackendUnreachable,
                },
            ),
            (
                "runner",
                2_000,
                DeploymentEvent::FailureGracePeriodStarted {
                    failed_step: "push".into(),
                    deadline: at(122_000),
                },
            ),
            (
                "runner",
                3_000,
                failure("build", 1, ErrorClass::StepFailed, Some(2)),
            ),
            (
                "runner",
                3_000,
                DeploymentEvent::StepFailed {
                    step: "build".into(),
                    attempts: 1,
                    error_class: ErrorClass::StepFailed,
                },
            ),
        ]);
        let lines = lines(&given, &Filter::default());
        let expected = [
            "REV  TIME (UTC)               WHO     WHAT",
            "  0  2026-11-23 10:00:00.000  ada     deployment requested: publish for tenant acme",
            "                              by: ada via cli",
            "                              from: examples/publish.yaml",
            "                              params: channel=stable",
            "  1  2026-11-23 10:00:01.000  runner  step attempt failed: push#1",
            "                              why: backend-unreachable: it broke",
            "                              next: retry #1 at once",
            "  2  2026-11-23 10:00:01.000  runner  step retry scheduled: push#2 at once",
            "  3  2026-11-23 10:00:02.000  runner  step attempt failed: push#2",
            "                              why: backend-unreachable: it broke",
            "                              next: no retry: class backend-unreachable allows 1, all used",
            "  4  2026-11-23 10:00:02.000  runner  step failed: push after 2 attempts (backend-unreachable)",
            "                              why: no retry: class backend-unreachable allows 1, all used",
            "  5  2026-11-23 10:00:02.000  runner  failure grace period started: after push failed",
            "                              why: step `push` failed for good; steps still running may finish until",
            "                                   10:02:02.000 (in 2m00s), then they are abandoned",
            "  6  2026-11-23 10:00:03.000  runner  step attempt failed: build#1",
            "                              why: step-failed, exit 2: it broke",
            "                              next: no retry: the deployment is already failing (step `push` failed)",
            "  7  2026-11-23 10:00:03.000  runner  step failed: build after 1 attempt (step-failed)",
            "                              why: no retry: the deployment is already failing (step `push` failed)",
        ];
        assert_eq!(lines, expected, "\n{}", lines.join("\n"));
    }

    #[test]
    fn after_a_redrive_retries_and_give_ups_count_the_attempts_of_the_new_run() {
        let push = step("push", &[(ErrorClass::BackendUnreachable, 1, 0)]);
        let failure = |attempt| DeploymentEvent::StepAttemptFailed {
            step: "push".into(),
            attempt,
            error_class: ErrorClass::BackendUnreachable,
            exit_code: None,
            message: "it broke".into(),
            duration_ms: 0,
        };
        let retry = |attempt| DeploymentEvent::StepRetryScheduled {
            step: "push".into(),
            attempt,
            next_attempt: attempt + 1,
            delay_ms: 0,
            not_before: at(0),
        };
        let given_up = |attempts| DeploymentEvent::StepFailed {
            step: "push".into(),
            attempts,
            error_class: ErrorClass::BackendUnreachable,
        };
        let first_run = vec![
            ("ada", 0, requested(vec![push])),
            ("runner", 1_000, failure(1)),
            ("runner", 1_000, retry(1)),
            ("runner", 2_000, failure(2)),
            ("runner", 2_000, given_up(2)),
            (
                "runner",
                2_000,
                DeploymentEvent::DeploymentFailed {
                    reason: "step `push` failed".into(),
                },
            ),
            (
                "ada",
                3_000,
                DeploymentEvent::DeploymentRedriven {
                    requested_by: "ada".into(),
                    steps: vec!["push".into()],
                },
            ),
            ("runner", 4_000, failure(3)),
        ];
        let decisions = |events: Vec<(&str, i64, DeploymentEvent)>| -> Vec<String> {
            lines(&history(events), &Filter::default())
                .into_iter()
                .filter(|line| line.contains("next:") || line.contains("why: no retry"))
                .map(|line| line.trim().to_owned())
                .collect()
        };

        let mut retried = first_run.clone();
        retried.extend([
            ("runner", 4_000, retry(3)),
            ("runner", 5_000, failure(4)),
            ("runner", 5_000, given_up(4)),
        ]);
        let all_used = "no retry: class backend-unreachable allows 1, all used";
        assert_eq!(
            decisions(retried),
            [
                "next: retry #1 at once".to_owned(),
                format!("next: {all_used}"),
                format!("why: {all_used}"),
                // Attempt 4 is the redriven run's second: its first retry.
                "next: retry #1 at once".to_owned(),
                format!("next: {all_used}"),
                format!("why: {all_used}"),
            ]
        );

        // Given up after the new run's first attempt: its one retry was not used.
        let mut not_retried = first_run;
        not_retried.push(("runner", 4_000, given_up(3)));
        let decided = decisions(not_retried);
        assert_eq!(
            decided[3..],
            ["next: no retry".to_owned(), "why: no retry".to_owned()]
        );
    }

    #[test]
    fn a_class_the_policy_does_not_retry_is_named() {
        let given = history(vec![
            ("ada", 0, requested(vec![step("build", &[])])),
            (
                "runner",
                1_000,
                DeploymentEvent::StepAttemptFailed {
                    step: "build".into(),
                    attempt: 1,
                    error_class: ErrorClass::StepFailed,
                    exit_code: Some(3),
                    message: "exited with code 3".into(),
                    duration_ms: 40,
                },
            ),
            (
                "runner",
                1_000,
                DeploymentEvent::StepFailed {
                    step: "build".into(),
                    attempts: 1,
                    error_class: ErrorClass::StepFailed,
                },
            ),
        ]);
        let filter = Filter::parse(None, &["StepAttemptFailed".into()], None).expect("a filter");
        assert_eq!(
            lines(&given, &filter),
            [
                "REV  TIME (UTC)               WHO     WHAT",
                "  1  2026-11-23 10:00:01.000  runner  step attempt failed: build#1 after 40ms",
                "                              why: step-failed, exit 3: exited with code 3",
                "                              next: no retry: class step-failed is not retried",
            ]
        );
    }

    #[test]
    fn a_dead_lettered_job_reads_as_its_attempt_and_its_deliveries() {
        let given = history(vec![(
            "orchestrator",
            0,
            DeploymentEvent::StepJobDeadLettered {
                step: "build".into(),
                attempt: 2,
                receives: 5,
            },
        )]);
        assert_eq!(
            lines(&given, &Filter::default())[1..],
            [
                "  0  2026-11-23 10:00:00.000  orchestrator  step job dead lettered: build#2",
                "                              why: its job was delivered 5 times without an outcome and moved to the",
                "                                   dead-letter queue",
            ]
        );
    }

    #[test]
    fn control_characters_in_recorded_text_are_shown_escaped() {
        let given = history(vec![(
            "ada\u{1b}[2J",
            0,
            DeploymentEvent::CancellationRequested {
                requested_by: "ada".into(),
                reason: "stop\u{1b}[31m now".into(),
            },
        )]);
        let text = lines(&given, &Filter::default()).join("\n");
        assert!(!text.contains('\u{1b}'), "{text}");
        assert!(text.contains("stop\\u{1b}[31m now"), "{text}");
    }

    #[test]
    fn filters_keep_the_events_of_a_step_of_some_types_from_a_revision_or_a_time() {
        let history = a_retried_publish();
        let kept = |filter: &Filter| -> Vec<u64> {
            history
                .iter()
                .filter(|e| filter.keeps(e))
                .map(|e| e.revision)
                .collect()
        };
        let parse = |step: Option<&str>, types: &[&str], since: Option<&str>| {
            let types: Vec<String> = types.iter().map(|t| (*t).to_owned()).collect();
            Filter::parse(step.map(str::to_owned), &types, since).expect("a filter")
        };
        assert_eq!(kept(&parse(Some("publish"), &[], None)), [2, 3, 4, 5, 6, 7]);
        assert_eq!(
            kept(&parse(
                None,
                &["stepstarted,step-succeeded", "SecretsPurged"],
                None
            )),
            [3, 6, 7, 8]
        );
        assert_eq!(kept(&parse(None, &[], Some("7"))), [7, 8, 9]);
        assert_eq!(
            kept(&parse(None, &[], Some("2026-11-23T10:00:22Z"))),
            [7, 8, 9]
        );
        assert_eq!(
            kept(&parse(None, &[], Some("2026-11-23 10:00:22.010"))),
            [8, 9],
            "a time as the timeline shows it is UTC"
        );
        assert_eq!(
            kept(&parse(None, &[], Some("2026-11-23T11:00:22+01:00"))),
            [7, 8, 9]
        );
        assert_eq!(
            kept(&parse(None, &[], Some("2026-11-23"))).len(),
            history.len(),
            "a day starts at midnight UTC"
        );
        assert!(kept(&parse(None, &[], Some("2026-11-24"))).is_empty());
        assert_eq!(
            kept(&parse(Some("publish"), &["StepStarted"], Some("4"))),
            [6],
            "filters combine"
        );
        assert!(kept(&parse(Some("publish"), &["SecretsPurged"], None)).is_empty());
        assert!(
            lines(&history, &parse(None, &[], Some("99"))).is_empty(),
            "nothing kept, nothing printed, not even the header"
        );
    }

    #[test]
    fn an_unknown_type_is_refused_listing_the_types() {
        let error = Filter::parse(None, &["StepStarted,StepExploded".into()], None)
            .expect_err("unknown type");
        assert_eq!(error, FilterError::UnknownType("StepExploded".into()));
        let message = error.to_string();
        assert!(message.starts_with("--type `StepExploded`: no such event type"));
        for known in DeploymentEvent::TYPES {
            assert!(message.contains(known), "{message}");
        }
        assert_eq!(
            Filter::parse(None, &["StepStarted,".into()], None),
            Err(FilterError::UnknownType(String::new())),
            "an empty type is a mistake too"
        );
    }

    #[test]
    fn a_since_that_is_neither_a_revision_nor_a_time_is_refused_saying_what_is_expected() {
        for bad in ["-1", "yesterday", "2026-13-01T00:00:00Z", "10:00"] {
            let error = Filter::parse(None, &[], Some(bad)).expect_err(bad);
            assert_eq!(error, FilterError::Since(bad.into()));
            let message = error.to_string();
            assert!(message.starts_with(&format!("--since `{bad}`: expected a revision number")));
            assert!(message.contains("RFC 3339"), "{message}");
        }
    }

    #[test]
    fn a_step_the_deployment_does_not_have_is_refused_naming_its_steps() {
        let history = a_retried_publish();
        let filter = Filter::parse(Some("pubish".into()), &[], None).expect("a filter");
        assert_eq!(
            filter.check_step(&history),
            Err(FilterError::UnknownStep {
                step: "pubish".into(),
                steps: vec!["publish".into()]
            })
        );
        let filter = Filter::parse(Some("publish".into()), &[], None).expect("a filter");
        assert_eq!(filter.check_step(&history), Ok(()));
    }
}
