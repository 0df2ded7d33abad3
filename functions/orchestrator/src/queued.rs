//! [`QueueWork`] on any job queue of the port `overture_kit::queue` (SQLite, SQS): each attempt
//! and timer becomes one [`Job`](overture_events::job::Job) body, keyed by what it names.

use async_trait::async_trait;
use overture_events::job::{Job, RunAttempt};
use overture_events::{DeploymentId, Timestamp};
use overture_kit::queue::{self, SendJobs};
use uuid::Uuid;

use crate::{QueueWork, WaitingAttempt, WorkError};

/// The orchestrator's work, sent to a queue.
#[derive(Clone, Debug)]
pub struct QueueOn<Q>(pub Q);

/// The jobs that run these attempts.
pub fn attempt_jobs(
    deployment: DeploymentId,
    attempts: &[WaitingAttempt],
    cause: Uuid,
) -> Result<Vec<queue::Job>, WorkError> {
    attempts
        .iter()
        .map(|waiting| {
            let job = Job::RunAttempt(RunAttempt {
                deployment,
                step: waiting.step.clone(),
                attempt: waiting.attempt,
                cause: Some(cause),
            });
            queued(
                format!("run/{deployment}/{}/{}", waiting.step, waiting.attempt),
                deployment,
                &job,
                waiting.not_before,
            )
        })
        .collect()
}

/// The job that moves a deployment on at `at`.
pub fn wake_job(
    deployment: DeploymentId,
    at: Timestamp,
    cause: Uuid,
) -> Result<queue::Job, WorkError> {
    let job = Job::Wake {
        deployment,
        cause: Some(cause),
    };
    queued(
        format!("wake/{deployment}/{}", at.timestamp_millis()),
        deployment,
        &job,
        at,
    )
}

fn queued(
    key: String,
    deployment: DeploymentId,
    job: &Job,
    due_at: Timestamp,
) -> Result<queue::Job, WorkError> {
    let body = serde_json::to_value(job).map_err(WorkError::refused)?;
    Ok(queue::Job {
        key,
        deployment,
        body,
        due_at,
    })
}

/// A queue's failure as the orchestrator's: retryable or not, as the queue said.
pub fn sent(error: queue::QueueError) -> WorkError {
    if error.is_retryable() {
        WorkError::unavailable(error)
    } else {
        WorkError::refused(error)
    }
}

#[async_trait]
impl<Q: SendJobs> QueueWork for QueueOn<Q> {
    async fn run_attempts(
        &self,
        deployment: DeploymentId,
        attempts: &[WaitingAttempt],
        cause: Uuid,
    ) -> Result<(), WorkError> {
        let jobs = attempt_jobs(deployment, attempts, cause)?;
        self.0.send(jobs).await.map_err(sent)
    }

    async fn wake_at(
        &self,
        deployment: DeploymentId,
        at: Timestamp,
        cause: Uuid,
    ) -> Result<(), WorkError> {
        let job = wake_job(deployment, at, cause)?;
        self.0.send(vec![job]).await.map_err(sent)
    }
}
