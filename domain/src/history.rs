//! A deployment's past, read from its log alone.
//!
//! - [`Moment`]: a point in a stream's history, a revision or an instant (`--at`).
//! - [`prefix`]: the records of a stream as it stood at a moment. Folded through
//!   [`crate::projection::project`] they give the status then; through [`events_of`] and
//!   [`Deployment::replay`], the aggregate's state then.
//! - [`check_determinism`]: folding a stream twice, independently, yields the same state and
//!   the same decisions at every prefix. Handlers reload the aggregate from the log before every
//!   command, so a fold that drifted between two loads would make them decide differently on the
//!   same history.

use std::str::FromStr;

use overture_events::deployment::SchemaError;
use overture_events::{DeploymentEvent, Envelope, Timestamp};

use crate::deployment::{actions, Deployment, DeploymentCommand, DeploymentState};

/// A point in a stream's history.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Moment {
    /// Just after the event at this revision (0-based, as the log numbers them).
    Revision(u64),
    /// Just after the last event recorded at or before this instant.
    Time(Timestamp),
}

/// A moment that is neither a revision nor an RFC 3339 time.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{0}` is neither a revision (0, 1, 2, ...) nor an RFC 3339 time such as \
     2026-11-23T16:20:00Z"
)]
pub struct MomentError(String);

impl FromStr for Moment {
    type Err = MomentError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let text = text.trim();
        if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
            return text
                .parse()
                .map(Moment::Revision)
                .map_err(|_| MomentError(text.to_owned()));
        }
        chrono::DateTime::parse_from_rfc3339(text)
            .map(|time| Moment::Time(time.to_utc()))
            .map_err(|_| MomentError(text.to_owned()))
    }
}

/// Why a stream has no state at a moment.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HistoryError {
    /// The stream holds no event at all.
    #[error("the stream holds no event")]
    Empty,
    /// The revision is past the stream's last one.
    #[error(
        "revision {asked} is past the end of the stream, whose revisions are {first} to {last}"
    )]
    PastTheEnd {
        /// The revision asked for.
        asked: u64,
        /// The stream's first revision.
        first: u64,
        /// The stream's last revision.
        last: u64,
    },
    /// The instant is before the stream's first event.
    #[error("{asked} is before the stream's first event, recorded at {first}")]
    BeforeTheStart {
        /// The instant asked for.
        asked: Timestamp,
        /// When the first event was recorded.
        first: Timestamp,
    },
}

/// The records of a stream (in revision order) as it stood at `moment`: every record up to the
/// revision, or up to the last one recorded at or before the instant.
///
/// Within a stream each event is appended after the one before it, so times only go backwards
/// across a clock's skew; the last record at or before the instant then takes the ones before
/// it along, so the prefix holds every event recorded at or before the instant.
pub fn prefix(records: &[Envelope], moment: Moment) -> Result<&[Envelope], HistoryError> {
    let (Some(first), Some(last)) = (records.first(), records.last()) else {
        return Err(HistoryError::Empty);
    };
    match moment {
        Moment::Revision(asked) if asked > last.revision => Err(HistoryError::PastTheEnd {
            asked,
            first: first.revision,
            last: last.revision,
        }),
        Moment::Revision(asked) => {
            let end = records.partition_point(|r| r.revision <= asked);
            Ok(&records[..end])
        }
        Moment::Time(asked) => records
            .iter()
            .rposition(|r| r.metadata.recorded_at <= asked)
            .map(|last| &records[..=last])
            .ok_or(HistoryError::BeforeTheStart {
                asked,
                first: first.metadata.recorded_at,
            }),
    }
}

/// The deployment events the records carry, in order.
pub fn events_of(records: &[Envelope]) -> Result<Vec<DeploymentEvent>, SchemaError> {
    records
        .iter()
        .map(|r| DeploymentEvent::from_parts(&r.event_type, r.data.clone()))
        .collect()
}

/// Where two folds of one stream disagreed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Divergence {
    /// The two folds reached different states.
    #[error("after its first {after} event(s), two folds of the stream reached different states")]
    State {
        /// How many events were folded.
        after: usize,
    },
    /// The same history called for different actions.
    #[error(
        "after its first {after} event(s), two folds of the stream called for different actions"
    )]
    Actions {
        /// How many events were folded.
        after: usize,
    },
    /// Advancing the same history at the same instant decided differently.
    #[error(
        "after its first {after} event(s), advancing at {now} decided differently on two folds \
         of the stream"
    )]
    Advance {
        /// How many events were folded.
        after: usize,
        /// When the deployment was advanced.
        now: Timestamp,
    },
}

/// Folds `events` twice, independently, and compares at every prefix (the empty one too) the
/// two states, the actions each calls for, and what advancing each decides at every instant of
/// `moments` (time arrives as an argument, as it does inside commands).
///
/// One fold goes event by event, as a handler's loaded state grows; the other folds each prefix
/// afresh, as a handler loading the stream from the log does.
pub fn check_determinism(
    events: &[DeploymentEvent],
    moments: &[Timestamp],
) -> Result<(), Divergence> {
    check_with(events, moments, Deployment::apply)
}

/// [`check_determinism`] with the fold given, so a test can show that it catches a fold that is
/// not deterministic.
fn check_with(
    events: &[DeploymentEvent],
    moments: &[Timestamp],
    apply: impl Fn(DeploymentState, DeploymentEvent) -> DeploymentState,
) -> Result<(), Divergence> {
    let mut running = DeploymentState::default();
    for after in 0..=events.len() {
        if let Some(event) = after.checked_sub(1).and_then(|last| events.get(last)) {
            running = apply(running, event.clone());
        }
        let afresh = events[..after]
            .iter()
            .cloned()
            .fold(DeploymentState::default(), &apply);
        if running != afresh {
            return Err(Divergence::State { after });
        }
        if actions(&running) != actions(&afresh) {
            return Err(Divergence::Actions { after });
        }
        for &now in moments {
            let advance = || DeploymentCommand::Advance { now };
            if Deployment::handle(&running, advance()) != Deployment::handle(&afresh, advance()) {
                return Err(Divergence::Advance { after, now });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;
    use crate::deployment::Phase;

    /// A fold that sees the third event differently every other time it meets it.
    #[test]
    fn a_fold_that_drifts_between_two_loads_is_caught() {
        let blueprint = crate::blueprint::parse("name: app\nsteps:\n  a: { run: noop }\n")
            .expect("valid")
            .snapshot;
        let now = Timestamp::UNIX_EPOCH;
        let events = vec![
            DeploymentEvent::DeploymentRequested {
                triggered_by: None,
                tenant: "acme".into(),
                requested_by: "ada".into(),
                trigger: "cli".into(),
                source: "app.yaml".into(),
                blueprint,
                blueprint_hash: "h".into(),
                params: Default::default(),
                cloud: None,
                name: None,
            },
            DeploymentEvent::StepScheduled {
                step: "a".into(),
                attempt: 1,
                not_before: now,
            },
            DeploymentEvent::StepStarted {
                step: "a".into(),
                attempt: 1,
                sandbox: "s".into(),
                lease_until: None,
                fingerprint: None,
            },
        ];
        let seen = Cell::new(0);
        let drifting = |state: DeploymentState, event: DeploymentEvent| {
            let started = matches!(event, DeploymentEvent::StepStarted { .. });
            let mut state = Deployment::apply(state, event);
            if started {
                seen.set(seen.get() + 1);
                if seen.get() % 2 == 0 {
                    state.phase = Phase::Finished(crate::deployment::Outcome::Failed);
                }
            }
            state
        };
        assert_eq!(
            check_with(&events, &[now], drifting),
            Err(Divergence::State { after: 3 })
        );
        assert_eq!(check_with(&events, &[now], Deployment::apply), Ok(()));
    }

    #[test]
    fn a_moment_is_a_revision_or_an_rfc_3339_time() {
        assert_eq!("0".parse(), Ok(Moment::Revision(0)));
        assert_eq!(" 12 ".parse(), Ok(Moment::Revision(12)));
        assert_eq!(
            "1970-01-01T01:00:00+01:00".parse(),
            Ok(Moment::Time(Timestamp::UNIX_EPOCH))
        );
        for wrong in [
            "",
            "-1",
            "yesterday",
            "2026-11-23",
            "99999999999999999999999",
        ] {
            assert_eq!(
                wrong.parse::<Moment>(),
                Err(MomentError(wrong.trim().to_owned())),
                "{wrong}"
            );
        }
    }
}
