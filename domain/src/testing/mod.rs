//! The shared test kit, behind the `test-util` feature: what every crate's tests need to build
//! a deployment's events and to ask the aggregate about them.
//!
//! - [`t`]: the tests' clock, seconds after one fixed instant ([`T0`]).
//! - [`events`]: builders of events and commands with the values tests take for granted
//!   (tenant `acme`, requested by `ada`, message `boom`), and [`events::samples`], one event of
//!   every type.
//! - [`harness`]: given/when/then over the aggregate, after cqrs-es's `TestFramework`:
//!   `given(events).when(command).then(events)` or `.then_error(error)`.
//! - [`life`]: a deployment's life decided command by command, as the handlers would, at the
//!   instant each command is handled, with the stream it leaves.
//! - [`folds`]: the read models folded from whole events and from a rebuild's lean decode, side
//!   by side ([`folds::BothWays`]).

pub mod events;
pub mod folds;
pub mod harness;
pub mod life;

use chrono::{DateTime, TimeDelta, Utc};
use overture_events::Timestamp;

pub use harness::{given, Decided, Given, Then};
pub use life::Life;

/// The tests' first instant, in seconds after the Unix epoch (2027-01-15T08:00:00Z).
pub const T0: i64 = 1_800_000_000;

/// The instant `seconds` after [`T0`].
pub fn t(seconds: i64) -> Timestamp {
    DateTime::<Utc>::UNIX_EPOCH + TimeDelta::seconds(T0 + seconds)
}
