//! The filters of `overture events`: `--step`, `--type` and `--since`, read from the command
//! line and applied to envelopes.

use chrono::NaiveDateTime;
use overture_domain::text::escaped;
use overture_events::{DeploymentEvent, Envelope, Timestamp};

use super::blueprint_of;

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
