//! The workers: each runs one job (a step attempt or a timer) handed from the queue.

use std::sync::Arc;

use async_trait::async_trait;
use overture_events::Timestamp;
use overture_infra::sqlite::{HandedJob, Job, JobQueue, Receipt, ReceivedJob};
use overture_kit::Clock;
use overture_kit::SystemClock;
use overture_orchestrator::Since;
use overture_runner::{run_attempt, AttemptReport, KeepAlive, PortError, RunnerPorts};
use tokio::task::JoinSet;
use uuid::Uuid;

use crate::fold::Unfolded;
use crate::{Engine, LEASE};

impl Engine {
    /// Runs each handed job on a worker task, which frees its worker's permit when done and
    /// leaves the job's receipt to `unfolded`, to be deleted with the next fold.
    pub(crate) fn start(
        self: &Arc<Self>,
        running: &mut JoinSet<()>,
        handed: Vec<HandedJob>,
        unfolded: &Unfolded,
    ) {
        for (job, permit) in handed {
            let engine = Arc::clone(self);
            let finished = Arc::clone(&unfolded.finished);
            running.spawn(async move {
                let receipt = job.receipt;
                let done = engine.handle_job(job).await;
                drop(permit);
                if done {
                    finished
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push(receipt);
                }
            });
        }
    }

    /// Handles one received job; says whether it is finished, so its receipt may be deleted.
    async fn handle_job(self: Arc<Self>, job: ReceivedJob) -> bool {
        let receipt = job.receipt;
        let key = job.key.clone();
        let cause = Uuid::now_v7();
        // The queue's contract lets a job come before it is due (here: one `resume` released):
        // it waits the rest out hidden, and is never handled early.
        if job.due_at > self.clock.now() {
            if let Err(error) = self.queue.extend(&receipt, job.due_at).await {
                tracing::warn!(key, %error, "could not postpone a job that is not due");
            }
            return false;
        }
        let finished = match Job::from_body(job.body) {
            Err(error) => {
                tracing::error!(key, %error, "dropping a job that cannot be read");
                true
            }
            Ok(Job::Wake {
                deployment,
                cause: timer_cause,
            }) => match self
                .orchestrate(
                    deployment,
                    timer_cause.unwrap_or(cause),
                    Since::Records(&[]),
                )
                .await
            {
                Ok(_) => true,
                Err(error) => {
                    tracing::warn!(key, %error, "timer failed; it will be retried after its lease");
                    false
                }
            },
            Ok(Job::RunAttempt(attempt)) => {
                let lease = QueueLease {
                    queue: self.queue.clone(),
                    receipt,
                    clock: self.clock.clone(),
                };
                let ports = RunnerPorts {
                    log: &self.deployments,
                    sandbox: &self.sandbox,
                    seals: &self.keys,
                    kept: &self.keys,
                    access: &self.access,
                    logs: &self.logs,
                    clock: self.clock.as_ref(),
                    payloads: &self.payloads,
                    loopback: self.loopback,
                };
                match run_attempt(&attempt, &ports, &lease).await {
                    Ok(AttemptReport::NotYetDue(at) | AttemptReport::StillRunning(at)) => {
                        if let Err(error) = self.queue.extend(&receipt, at).await {
                            tracing::warn!(key, %error, "could not postpone a job that is not due");
                        }
                        false
                    }
                    Ok(report) => {
                        tracing::debug!(key, ?report, "attempt handled");
                        true
                    }
                    Err(error) => {
                        tracing::warn!(key, %error, "attempt could not be handled; it will be retried after its lease");
                        false
                    }
                }
            }
        };
        finished
    }
}

/// Keeps a received job's lease alive while its attempt runs.
struct QueueLease {
    queue: JobQueue,
    receipt: Receipt,
    clock: Arc<SystemClock>,
}

#[async_trait]
impl KeepAlive for QueueLease {
    // The engine's own lease is short and renewed every heartbeat: a dead engine's job is
    // found by `resume`, which holds every engine's lock, not by waiting for the attempt's.
    async fn keep_alive(&self, _: Option<Timestamp>) -> Result<(), PortError> {
        let until = self.clock.now() + chrono::TimeDelta::from_std(LEASE).unwrap_or_default();
        self.queue.extend(&self.receipt, until).await.map_err(|e| {
            if e.is_retryable() {
                PortError::unavailable(e)
            } else {
                PortError::refused(e)
            }
        })
    }
}
