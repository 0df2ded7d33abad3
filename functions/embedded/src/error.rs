//! How the engine fails, as opposed to a deployment failing.

use overture_events::DeploymentId;

/// The engine failed (as opposed to a deployment failing).
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// Opening the data directory failed.
    #[error("cannot use data directory {dir}: {reason}")]
    DataDir { dir: String, reason: String },
    /// A function or store failed.
    #[error("{0}")]
    Function(String),
    /// A deployment's view did not reach the end of its stream after folding the stream in.
    #[error("the view of deployment {deployment} stays behind revision {revision} of its stream")]
    ViewBehind {
        deployment: DeploymentId,
        revision: u64,
    },
}

pub(crate) fn function_error(error: impl std::fmt::Display) -> EngineError {
    EngineError::Function(error.to_string())
}
