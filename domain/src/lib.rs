//! Overture's rules, free of I/O: nothing here reads a clock, a file or the network.
//!
//! - [`blueprint`]: reading and validating blueprints ([`duration`] and [`template`] help;
//!   [`shape`] checks the text's size, depth and duplicate keys before it is read).
//! - [`inputs`]: what the engine needs of every input (plain relative paths, no NUL byte).
//! - [`text`]: the name rule (blueprints, steps, tenants) and escaping user text for display.
//! - [`graph`]: the workflow DAG: cycles, ancestry, drawings.
//! - [`retry`]: the retry policy per error class.
//! - [`fingerprint`]: a step attempt's inputs, one digest each, and which of them changed.
//! - [`deployment`]: the Deployment aggregate (commands, events, state) and the [`deployment::actions`]
//!   its state calls for; its steps ([`deployment::Steps`]) are kept in `steps`, shared between
//!   clones and indexed so that no command looks at every step.
//! - [`projection`]: the read models as folds over the log; [`registry`]: the tenants' service
//!   registry, folded with them.
//! - [`recorded`]: whether a stream from outside (an import) is a history the aggregate could
//!   have recorded.
//! - [`history`]: a deployment's past from its log alone (a stream as it stood at a revision or
//!   an instant), and the check that folding a stream is deterministic.
//! - [`tenancy`]: whose a deployment is: the tenant is the cloud project's id.
//! - [`secret`]: secret values and masking them.
//! - [`shell`]: where a `script` command's references stand in the shell's quoting, and the
//!   command text that gives each its exact value.
//! - [`kind`]: the step kinds, one module each ([`kind::Kind`] reads a step's `run:`); the
//!   settings of a `servers` step are in [`kind::servers`], also at [`servers`].
//! - [`trigger`]: trigger files, incoming events (CloudEvents, EventBridge) and what a trigger
//!   decides for an event.
//! - [`testing`] (feature `test-util`): the shared test kit: event builders, the tests' clock
//!   and a given/when/then harness over the aggregate.
//!
//! With the `esrs` feature, [`deployment::Deployment`] implements `esrs::Aggregate`.

pub mod blueprint;
pub mod deployment;
pub mod duration;
pub mod egress;
pub mod fingerprint;
pub mod graph;
pub mod history;
pub mod host_keys;
pub mod inputs;
pub mod kind;
pub mod limits;
pub mod projection;
pub mod recorded;
pub mod registry;
pub mod retry;
pub mod secret;
pub mod services;
pub mod shape;
pub mod shell;
mod steps;
pub mod template;
#[cfg(any(test, feature = "test-util"))]
pub mod testing;
pub mod tenancy;
pub mod text;
pub mod trigger;

/// The `servers` kind's settings, where they were before the kinds had a home.
pub use kind::servers;
pub use deployment::{
    Action, Deployment, DeploymentCommand, DeploymentError, DeploymentState, StepStatus,
};
