//! The orchestrator's work port ([`QueueWork`]) on the SQLite job queue: the jobs are the ones
//! `overture_orchestrator::queued` makes for every queue.

use async_trait::async_trait;
use overture_events::{DeploymentId, Timestamp};
use overture_kit::queue::SendJobs;
use overture_orchestrator::queued::{attempt_jobs, sent, wake_job};
use overture_orchestrator::{QueueWork, WaitingAttempt, WorkError};
use uuid::Uuid;

use super::JobQueue;

pub use overture_events::job::Job;

#[async_trait]
impl QueueWork for JobQueue {
    async fn run_attempts(
        &self,
        deployment: DeploymentId,
        attempts: &[WaitingAttempt],
        cause: Uuid,
    ) -> Result<(), WorkError> {
        let jobs = attempt_jobs(deployment, attempts, cause)?;
        self.send(jobs).await.map_err(sent)
    }

    async fn wake_at(
        &self,
        deployment: DeploymentId,
        at: Timestamp,
        cause: Uuid,
    ) -> Result<(), WorkError> {
        let job = wake_job(deployment, at, cause)?;
        self.send(vec![job]).await.map_err(sent)
    }
}
