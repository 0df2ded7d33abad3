//! The event schema of Overture, and nothing else.
//!
//! - [`ids`]: deployment ids and the stream names derived from them.
//! - [`envelope`]: the EventStoreDB-style envelope every stored event travels in.
//! - [`chain`]: the hash chain that makes each stream tamper-evident, and its check.
//! - [`blueprint`]: the blueprint snapshot a deployment records when it is requested.
//! - [`deployment`]: the events of a deployment, with their stable type strings.
//! - [`fingerprint`]: the fingerprint of a step attempt's inputs.
//! - [`job`]: the bodies of the jobs on the step-and-timer queue.
//! - [`limits`]: what one attempt of a step may use of the machine.
//!
//! This crate holds data shapes only. It reads no clock and does no I/O: times are values handed
//! to it. Rules live in `overture-domain`.

pub mod blueprint;
pub mod chain;
pub mod deployment;
pub mod envelope;
pub mod fingerprint;
pub mod ids;
pub mod job;
pub mod limits;

pub use blueprint::{
    BastionSpec, BlueprintSnapshot, ErrorClass, ParamSpec, RetryRule, ServiceCheck,
    ServiceProvision, ServiceRequirement, StepSpec, StoredFile,
};
pub use deployment::DeploymentEvent;
pub use deployment::{CloudAccount, HostKeySource, PinnedHostKey, ServiceShortfall, TriggeredBy};
pub use envelope::{Envelope, LogEntry, Metadata};
pub use fingerprint::InputFingerprint;
pub use ids::{DeploymentId, ParseIdError};
pub use limits::StepLimits;

/// The instant type used throughout the schema: UTC, serialised as RFC 3339.
pub type Timestamp = chrono::DateTime<chrono::Utc>;
