//! [`QueueWork`] on job queues of the port `overture_kit::queue` (SQLite, SQS): each attempt
//! and timer becomes one [`Job`](overture_events::job::Job) body, keyed by what it names.
//!
//! Attempts and timers go to queues of their own ([`QueueOn`]): on AWS each queue feeds one
//! function (the jobs queue the runner, the timers queue the timer), and a Lambda trigger can
//! only hand its batch to one handler. Embedded, one SQLite queue carries both, and the engine
//! dispatches each job by its kind.

use async_trait::async_trait;
use overture_events::job::{Job, RunAttempt};
use overture_events::{DeploymentId, Timestamp};
use overture_kit::queue::{self, SendJobs};
use uuid::Uuid;

use crate::{QueueWork, WaitingAttempt, WorkError};

/// The orchestrator's work, sent to queues: attempts to one, timers to another (or the same).
#[derive(Clone, Debug)]
pub struct QueueOn<A, T = A> {
    /// Where attempts go, for the runners.
    pub attempts: A,
    /// Where timers go, for the orchestrator.
    pub timers: T,
}

impl<Q: Clone> QueueOn<Q> {
    /// Attempts and timers on one queue, whose consumer dispatches by kind.
    pub fn one(queue: Q) -> Self {
        Self {
            attempts: queue.clone(),
            timers: queue,
        }
    }
}

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
impl<A: SendJobs, T: SendJobs> QueueWork for QueueOn<A, T> {
    async fn run_attempts(
        &self,
        deployment: DeploymentId,
        attempts: &[WaitingAttempt],
        cause: Uuid,
    ) -> Result<(), WorkError> {
        let jobs = attempt_jobs(deployment, attempts, cause)?;
        self.attempts.send(jobs).await.map_err(sent)
    }

    async fn wake_at(
        &self,
        deployment: DeploymentId,
        at: Timestamp,
        cause: Uuid,
    ) -> Result<(), WorkError> {
        let job = wake_job(deployment, at, cause)?;
        self.timers.send(vec![job]).await.map_err(sent)
    }
}
