//! The embedded engine: every function wired in one process, on one data directory.
//!
//! The log feeds the functions in-process: after anything is appended, [`Engine::drive`] reads
//! the new entries, has the orchestrator move each touched deployment on and the projector fold
//! each touched deployment's entries into its view ([`Engine::project`]), then hands due jobs
//! from the durable queue to the runner (at most `parallelism` at a time). Waits are never
//! sleeps that hold state: a retry's wait is a job's due time and a grace period's deadline is a
//! timer job, both in the SQLite file, so a restarted process picks them up.
//!
//! - [`engine`]: the [`Engine`], its adapters opened on the data directory, and the commands of
//!   the functions carried out on it (submit, cancel, destroy, orchestrate, recover).
//! - [`drive`]: the drive loop, [`Engine::drive`], in named parts.
//! - [`scope`]: what a drive runs ([`Scope`], [`Joining`]) and who watches it ([`Watch`]).
//! - [`fold`]: folding what a drive has fed into the read models ([`Engine::project`]).
//! - [`jobs`]: the workers, each running one job handed from the queue.
//! - [`error`]: [`EngineError`], which carries the functions' own typed errors.

use std::time::Duration;

mod drive;
mod engine;
mod error;
mod fold;
mod jobs;
mod scope;

pub use engine::Engine;
pub use error::EngineError;
pub use scope::{Joining, Scope, Unwatched, Watch};

/// How long a received job stays invisible to other engines without a heartbeat.
const LEASE: Duration = Duration::from_secs(30);
/// How often the engine looks at the log even when nothing woke it (other processes append too).
const POLL: Duration = Duration::from_millis(500);
/// How many log entries one feed read takes.
const FEED_BATCH: usize = 2_000;
/// How long a busy drive may keep what it has fed from the read models (and finished jobs in
/// the queue): folding them in is one write for many steps instead of several per step.
const PROJECT_LAG: Duration = Duration::from_millis(25);
/// How long a drive waits for news before it folds what it has fed into the read models.
const PROJECT_IDLE: Duration = Duration::from_millis(2);
