//! The orchestrator's work port ([`QueueWork`]) on the SQLite job queue, and the jobs it queues.

use async_trait::async_trait;
use overture_events::{DeploymentId, Timestamp};
use overture_orchestrator::{QueueWork, WaitingAttempt, WorkError};
use overture_runner::RunAttempt;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

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

#[async_trait]
impl QueueWork for JobQueue {
    async fn run_attempts(
        &self,
        deployment: DeploymentId,
        attempts: &[WaitingAttempt],
        cause: Uuid,
    ) -> Result<(), WorkError> {
        let jobs = attempts
            .iter()
            .map(|waiting| {
                let job = Job::RunAttempt(RunAttempt {
                    deployment,
                    step: waiting.step.clone(),
                    attempt: waiting.attempt,
                    cause: Some(cause),
                });
                new_job(
                    format!("run/{deployment}/{}/{}", waiting.step, waiting.attempt),
                    deployment,
                    &job,
                    waiting.not_before,
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.enqueue_all(jobs)
            .await
            .map_err(WorkError::unavailable)?;
        Ok(())
    }

    async fn wake_at(
        &self,
        deployment: DeploymentId,
        at: Timestamp,
        cause: Uuid,
    ) -> Result<(), WorkError> {
        let job = Job::Wake {
            deployment,
            cause: Some(cause),
        };
        let job = new_job(
            format!("wake/{deployment}/{}", at.timestamp_millis()),
            deployment,
            &job,
            at,
        )?;
        self.enqueue(job).await.map_err(WorkError::unavailable)?;
        Ok(())
    }
}

fn new_job(
    key: String,
    deployment: DeploymentId,
    job: &Job,
    due_at: Timestamp,
) -> Result<NewJob, WorkError> {
    let body = serde_json::to_value(job).map_err(WorkError::refused)?;
    Ok(NewJob {
        key,
        deployment,
        body,
        due_at,
    })
}
