//! The jobs on the step-and-timer queue, as their bodies are written: JSON tagged by `kind`.
//! The SQLite queue and SQS carry the same bodies, so one consumer reads both.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::DeploymentId;

/// A job in the queue.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Job {
    /// Run one attempt of a step (for the runner).
    RunAttempt(RunAttempt),
    /// Move a deployment on at a deadline (for the orchestrator).
    Wake {
        /// The deployment.
        deployment: DeploymentId,
        /// The event that set the timer (none in jobs queued before it was carried).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cause: Option<Uuid>,
    },
}

impl Job {
    /// Reads a job's body back.
    pub fn from_body(body: serde_json::Value) -> Result<Self, serde_json::Error> {
        serde_json::from_value(body)
    }
}

/// The runner's job: run this attempt of this step.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunAttempt {
    /// The deployment.
    pub deployment: DeploymentId,
    /// The step.
    pub step: String,
    /// The 1-based attempt.
    pub attempt: u32,
    /// The event that led to the attempt's scheduling: the causation of the runner's events.
    /// Jobs queued before it was carried have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<Uuid>,
}
