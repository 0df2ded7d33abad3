//! The orchestrator's work port ([`QueueWork`]) on the SQLite job queue, and the jobs it queues.

use async_trait::async_trait;
use overture_events::{DeploymentId, Timestamp};
use overture_orchestrator::{QueueWork, WorkError};
use overture_runner::RunAttempt;
use serde::{Deserialize, Serialize};

use super::{JobQueue, NewJob};

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
    },
}

impl Job {
    /// Reads a job's body back.
    pub fn from_body(body: serde_json::Value) -> Result<Self, serde_json::Error> {
        serde_json::from_value(body)
    }
}

#[async_trait]
impl QueueWork for JobQueue {
    async fn run_attempt(
        &self,
        deployment: DeploymentId,
        step: &str,
        attempt: u32,
        not_before: Timestamp,
    ) -> Result<(), WorkError> {
        let job = Job::RunAttempt(RunAttempt {
            deployment,
            step: step.to_owned(),
            attempt,
        });
        queue(
            self,
            format!("run/{deployment}/{step}/{attempt}"),
            deployment,
            &job,
            not_before,
        )
        .await
    }

    async fn wake_at(&self, deployment: DeploymentId, at: Timestamp) -> Result<(), WorkError> {
        let job = Job::Wake { deployment };
        queue(
            self,
            format!("wake/{deployment}/{}", at.timestamp_millis()),
            deployment,
            &job,
            at,
        )
        .await
    }
}

async fn queue(
    jobs: &JobQueue,
    key: String,
    deployment: DeploymentId,
    job: &Job,
    due_at: Timestamp,
) -> Result<(), WorkError> {
    let body = serde_json::to_value(job).map_err(|e| WorkError(e.to_string()))?;
    jobs.enqueue(NewJob {
        key,
        deployment,
        body,
        due_at,
    })
    .await
    .map_err(|e| WorkError(e.to_string()))?;
    Ok(())
}
