//! An event in words: [`Context::describe`] sends each event to the family that describes it
//! ([`request`], [`attempts`], [`failures`], [`ends`], [`bastion`], [`services`], [`destroy`]);
//! the wording they share is here.

use overture_domain::text::escaped;
use overture_events::{DeploymentEvent, ErrorClass, Timestamp};

use super::context::Context;
use super::{attempts, bastion, destroy, ends, failures, request, services};
use crate::progress::human;

/// One event being described: where it is in the history and what the history says about it,
/// when it was recorded, its type in words, and the lines gathered under it.
pub(super) struct Line<'c> {
    /// What the whole history says.
    pub(super) context: &'c Context,
    /// The event's index in the history.
    pub(super) index: usize,
    /// When it was recorded.
    pub(super) at: Timestamp,
    /// Its type in words: `step attempt failed`.
    pub(super) title: String,
    /// The lines under it: why it happened and what was decided, each `(label, text)`.
    pub(super) why: Vec<(&'static str, String)>,
}

impl Context {
    /// The event at `index` of the history, recorded `at`, in words, with the lines under it.
    pub(super) fn describe(
        &self,
        index: usize,
        event: &DeploymentEvent,
        at: Timestamp,
    ) -> (String, Vec<(&'static str, String)>) {
        use DeploymentEvent as E;
        let mut line = Line {
            context: self,
            index,
            at,
            title: words(event.event_type()),
            why: Vec::new(),
        };
        let what = match event {
            E::DeploymentRequested { .. } | E::CredentialsSealed { .. } | E::SecretsPurged {} => {
                request::describe(&mut line, event)
            }
            E::StepScheduled { .. }
            | E::StepStarted { .. }
            | E::StepSucceeded { .. }
            | E::StepAttemptFailed { .. }
            | E::StepJobDeadLettered { .. }
            | E::StepRetryScheduled { .. }
            | E::StepNetworkPolicyApplied { .. } => attempts::describe(&mut line, event),
            E::StepFailed { .. }
            | E::FailureGracePeriodStarted { .. }
            | E::StepAbandoned { .. } => failures::describe(&mut line, event),
            E::DeploymentSucceeded {}
            | E::DeploymentFailed { .. }
            | E::CancellationRequested { .. }
            | E::DeploymentCancelled { .. }
            | E::DeploymentRedriven { .. } => ends::describe(&mut line, event),
            E::BastionAccessGranted { .. }
            | E::BastionAccessRevoked { .. }
            | E::HostKeysPinned { .. } => bastion::describe(&mut line, event),
            E::StepAwaitingServices { .. }
            | E::ServicesResolved { .. }
            | E::ServiceRegistered { .. }
            | E::ServiceDeregistered { .. }
            | E::StepRerunRequested { .. } => services::describe(&mut line, event),
            E::DestroyRequested { .. }
            | E::StepDestroyed { .. }
            | E::StepDestroyFailed { .. }
            | E::DeploymentDestroyed {} => destroy::describe(&mut line, event),
        };
        (what, line.why)
    }
}

/// Recorded text as the timeline shows it: control characters escaped.
pub(super) fn said(text: &str) -> String {
    escaped(text).into_owned()
}

/// A service's members as the audit trail shows them: `app: 10.0.0.3:8000, 10.0.0.4:8000`.
pub(super) fn members_of(service: &str, members: &[String]) -> String {
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
pub(super) fn failure(
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

/// A wait: whole seconds as `20s`, anything else as progress shows durations.
pub(super) fn wait(ms: u64) -> String {
    let (seconds, rest) = (ms / 1_000, ms % 1_000);
    if rest == 0 && (1..60).contains(&seconds) {
        format!("{seconds}s")
    } else {
        human(ms)
    }
}

/// ` after 1.2s`, or nothing when the attempt took no time (it was cut short from outside).
pub(super) fn took(duration_ms: u64) -> String {
    if duration_ms == 0 {
        String::new()
    } else {
        format!(" after {}", human(duration_ms))
    }
}

/// A time on the same day as `now` by its clock alone, another day's in full.
pub(super) fn clock(time: Timestamp, now: Timestamp) -> String {
    if time.date_naive() == now.date_naive() {
        time.format("%H:%M:%S%.3f").to_string()
    } else {
        time.format("%Y-%m-%d %H:%M:%S%.3f").to_string()
    }
}

/// A step's attempt: `build#2`.
pub(super) fn attempt_of(step: &str, attempt: u32) -> String {
    format!("{}#{attempt}", escaped(step))
}

/// An event type in words: `StepAttemptFailed` reads `step attempt failed`.
pub(super) fn words(event_type: &str) -> String {
    let mut out = String::with_capacity(event_type.len() + 4);
    for c in event_type.chars() {
        if c.is_uppercase() && !out.is_empty() {
            out.push(' ');
        }
        out.extend(c.to_lowercase());
    }
    escaped(&out).into_owned()
}
