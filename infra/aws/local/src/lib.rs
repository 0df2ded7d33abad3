//! Overture's AWS form on one machine: the stack made in the local emulator, and a poller that
//! stands in for Lambda's event source mappings, which the emulator records but does not act on.
//!
//! - [`setup`]: the stack made once through CloudFormation ([`setup::stack`]) and the settings
//!   the functions and the `overture` program need to work on it ([`setup::settings`]).
//! - [`triggers`]: the stack's event source mappings, read back from the emulator's Lambda.
//! - [`poller`]: reads each trigger's stream or queue and invokes its function through
//!   `cargo lambda watch` ([`poller::Poller::run`]).
//! - [`urls`]: the door of the function URLs with `AWS_IAM` auth (the submit function's): checks
//!   each request's SigV4 signature, as Lambda does, and hands the function the signer.
//! - [`batches`]: the pure part: the events in Lambda's shapes, what an answer means for the
//!   batch, what is delivered again.
//!
//! `scripts/local-aws.sh` (`make local-aws`) runs all of it with the emulator and
//! `cargo lambda watch`.

pub mod batches;
pub mod poller;
pub mod setup;
pub mod triggers;
pub mod urls;

/// Why the local set-up or the poller could not go on.
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    /// A call to the emulator or to `cargo lambda watch` failed.
    #[error("{operation} failed: {message}")]
    Call {
        /// What was called.
        operation: &'static str,
        /// What went wrong, with its causes.
        message: String,
    },
    /// The stack has no trigger for the poller to stand in for.
    #[error("the stack `{0}` has no triggers (was it made with its functions?)")]
    NoTriggers(String),
}

impl LocalError {
    /// A failed call of `operation`, saying why.
    pub fn call(operation: &'static str, error: impl std::fmt::Display) -> Self {
        Self::Call {
            operation,
            message: error.to_string(),
        }
    }
}
