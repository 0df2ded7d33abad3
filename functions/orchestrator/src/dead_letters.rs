//! Dead letters on AWS: a batch of the jobs' dead-letter queue, each message a job the runners
//! failed `maxReceiveCount` times, which SQS moved there unchanged (its body the job as the
//! queue wrote it, its `ApproximateReceiveCount` attribute how often it was delivered).
//!
//! A dead-lettered attempt is an event, not a silent loss: for each message, the attempt's job
//! being dead-lettered is recorded on its deployment (`DeploymentCommand::RecordDeadLetter`:
//! the attempt fails as `interrupted`, and the step's rule decides whether another attempt
//! follows), and the deployment is moved on ([`orchestrate`]), queuing what was decided: a
//! retry, or the grace period's deadline. The events are appended under the orchestrator's
//! [`ACTOR`], so the stream trigger does not queue them a second time.
//!
//! - A dead letter of an attempt that already has its outcome (or of an ended deployment)
//!   records nothing, so a dead letter delivered twice is harmless.
//! - A dead letter of a running attempt whose lease has not ended is kept (a batch item
//!   failure): its runner may still record the outcome, and the message comes back after the
//!   dead-letter queue's visibility timeout, when the lease may have ended.
//! - A timer found there (queued on the jobs queue before timers had a queue of their own)
//!   moves its deployment on, late.
//! - A message that is not a job stays in the dead-letter queue for a person (reported failed,
//!   not retryable), as does one the log or the queue failed on (retryable).

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use overture_domain::{DeploymentCommand, DeploymentError};
use overture_events::job::Job;
use overture_events::DeploymentId;
use overture_kit::batch::{BatchFailed, BatchTally};
use overture_kit::sqs_message::{self, Unreadable};
use overture_kit::{execute, Cause, LogError};

use crate::{orchestrate, OrchestratorError, OrchestratorPorts, Since, ACTOR};

/// What a dead-letter handler expects a message to be, for [`Unreadable`].
const EXPECTED: &str = "a dead-lettered job";

/// Why a dead letter was reported as a batch item failure (kept in the dead-letter queue).
#[derive(Debug, thiserror::Error)]
pub enum DeadLetterError {
    /// The message is not a job, or says nothing of its deliveries.
    #[error(transparent)]
    Unreadable(#[from] Unreadable),
    /// The log failed.
    #[error(transparent)]
    Log(#[from] LogError),
    /// The deployment refused the dead letter: no such deployment or step, or an attempt whose
    /// lease has not ended.
    #[error("deployment {deployment}: {source}")]
    Refused {
        /// The deployment.
        deployment: DeploymentId,
        /// Why.
        source: DeploymentError,
    },
    /// The dead letter was recorded, but the deployment could not be moved on.
    #[error(transparent)]
    Orchestrator(#[from] OrchestratorError),
}

impl DeadLetterError {
    /// Whether handling the message again later may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            DeadLetterError::Unreadable(_) => false,
            DeadLetterError::Log(error) => error.is_retryable(),
            // The lease ends: then the dead letter is recorded.
            DeadLetterError::Refused { source, .. } => {
                matches!(source, DeploymentError::LeaseNotExpired { .. })
            }
            DeadLetterError::Orchestrator(error) => error.is_retryable(),
        }
    }

    /// The stable error type Lambda reports: "Retryable" or "NonRetryable".
    pub fn error_type(&self) -> &'static str {
        overture_kit::batch::error_type(self.is_retryable())
    }
}

/// Records every dead letter of the batch on its deployment; returns the messages SQS must keep,
/// or fails the invocation when none could be recorded.
pub async fn on_dead_letters(
    batch: &SqsEvent,
    ports: &OrchestratorPorts<'_>,
) -> Result<SqsBatchResponse, BatchFailed> {
    let mut response = SqsBatchResponse::default();
    let mut tally = BatchTally::new(batch.records.len());
    for message in &batch.records {
        if let Err(error) = on_dead_letter(message, ports).await {
            let message_id = sqs_message::message_id(message);
            tracing::warn!(
                message_id,
                error_type = error.error_type(),
                %error,
                "the dead letter was not recorded; it stays in the dead-letter queue"
            );
            tally.failed(error.is_retryable(), &error);
            response.add_failure(message_id);
        }
    }
    tally.answer(response)
}

/// Records one dead letter and moves its deployment on; `Ok` when it may be deleted.
pub async fn on_dead_letter(
    message: &SqsMessage,
    ports: &OrchestratorPorts<'_>,
) -> Result<(), DeadLetterError> {
    let (_, kind) = sqs_message::job_of(message, EXPECTED)?;
    let run = match kind {
        Job::RunAttempt(run) => run,
        Job::Wake { deployment, cause } => {
            let cause = cause.unwrap_or_else(uuid::Uuid::now_v7);
            orchestrate(deployment, cause, Since::Records(&[]), ports).await?;
            return Ok(());
        }
    };
    let receives = sqs_message::receive_count(message).ok_or_else(|| Unreadable {
        message_id: sqs_message::message_id(message),
        expected: EXPECTED,
        reason: "no ApproximateReceiveCount attribute".into(),
    })?;
    let deployment = run.deployment;
    // The event that scheduled the attempt caused its job, and so its dead letter.
    let cause = run.cause.unwrap_or_else(uuid::Uuid::now_v7);
    let now = ports.clock.now();
    let recorded = execute(
        ports.log,
        deployment,
        "",
        &Cause::new(ACTOR, deployment, cause),
        |_| DeploymentCommand::RecordDeadLetter {
            step: run.step.clone(),
            attempt: run.attempt,
            receives,
            now,
        },
    )
    .await?
    .map_err(|source| DeadLetterError::Refused { deployment, source })?;
    if !recorded.events.is_empty() {
        tracing::warn!(%deployment, step = run.step, attempt = run.attempt, receives, "an attempt's job was dead-lettered");
    }
    orchestrate(deployment, cause, Since::Appended(&recorded.events), ports).await?;
    Ok(())
}
