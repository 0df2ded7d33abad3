//! The orchestrator's work port ([`QueueWork`]) on the SQLite job queue: the jobs are the ones
//! `overture_orchestrator::queued` makes for every queue.
//!
//! [`Handoff`] is the same port for an engine that runs the attempts it queues itself.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use overture_events::{DeploymentId, Timestamp};
use overture_kit::queue::SendJobs;
use overture_orchestrator::queued::{attempt_jobs, sent, wake_job};
use overture_orchestrator::{QueueWork, WaitingAttempt, WorkError};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use uuid::Uuid;

use super::{JobQueue, NewJob, QueueError, ReceivedJob};

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

/// A job queued already received by this engine, with the worker slot it holds.
pub type HandedJob = (ReceivedJob, OwnedSemaphorePermit);

/// The orchestrator's work port for an engine that runs attempts itself: an attempt due now is
/// queued already received (hidden for `lease`) while one of `workers` is free, and handed to
/// the engine through [`Handoff::take`] instead of waiting for the engine to receive it, which
/// would cost one more write and one more pass before it starts.
///
/// The job is in the queue all the same, so if this engine dies another receives it once its
/// lease has run out; attempts with no free worker, or not due yet, are queued as usual.
pub struct Handoff {
    queue: JobQueue,
    workers: Arc<Semaphore>,
    lease: Duration,
    handed: Mutex<Vec<HandedJob>>,
    woken: Mutex<Vec<DeploymentId>>,
}

impl Handoff {
    /// Hands jobs due now to the holders of `workers`' permits, received for `lease`.
    pub fn new(queue: JobQueue, workers: Arc<Semaphore>, lease: Duration) -> Self {
        Self {
            queue,
            workers,
            lease,
            handed: Mutex::new(Vec::new()),
            woken: Mutex::new(Vec::new()),
        }
    }

    /// The deployments woken for now since the last call (another deployment's services
    /// changed): the engine may move them on at once rather than when it receives their timer.
    pub fn take_woken(&self) -> Vec<DeploymentId> {
        std::mem::take(&mut *self.woken.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// The jobs handed over since the last call, each with its worker's permit.
    pub fn take(&self) -> Vec<HandedJob> {
        std::mem::take(&mut *self.handed.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

fn work_error(error: QueueError) -> WorkError {
    if error.is_retryable() {
        WorkError::unavailable(error)
    } else {
        WorkError::refused(error)
    }
}

#[async_trait]
impl QueueWork for Handoff {
    async fn run_attempts(
        &self,
        deployment: DeploymentId,
        attempts: &[WaitingAttempt],
        cause: Uuid,
    ) -> Result<(), WorkError> {
        let now = chrono::Utc::now();
        let jobs: Vec<NewJob> = attempt_jobs(deployment, attempts, cause)?
            .into_iter()
            .map(NewJob::from)
            .collect();
        // Slots first, so that attempts queued side by side never count the same free worker.
        let due = jobs.iter().filter(|job| job.due_at <= now).count();
        let mut slots: Vec<OwnedSemaphorePermit> =
            std::iter::from_fn(|| Arc::clone(&self.workers).try_acquire_owned().ok())
                .take(due)
                .collect();
        let received = self
            .queue
            .enqueue_received(jobs, slots.len(), now, self.lease)
            .await
            .map_err(work_error)?;
        // Slots left over (jobs queued already) go back as `slots` is dropped.
        let handed = received.into_iter().zip(slots.drain(..));
        self.handed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(handed);
        Ok(())
    }

    async fn wake_at(
        &self,
        deployment: DeploymentId,
        at: Timestamp,
        cause: Uuid,
    ) -> Result<(), WorkError> {
        // Queued all the same: should this engine die first, whoever resumes wakes it.
        self.queue.wake_at(deployment, at, cause).await?;
        if at <= chrono::Utc::now() {
            let mut woken = self.woken.lock().unwrap_or_else(PoisonError::into_inner);
            if !woken.contains(&deployment) {
                woken.push(deployment);
            }
        }
        Ok(())
    }
}
