//! [`Recorded`]: the engine behind the API where recording is all it takes, as on the serverless
//! form. There the events table's stream drives every deployment (the orchestrator function), so
//! recording `DeploymentRequested`, `DeploymentRedriven` or a cancel *is* starting, redriving or
//! cancelling it; nothing here runs a step.
//!
//! It records through the same code as the submit function ([`overture_submit::submit`],
//! [`overture_submit::again::redrive`]) and as the embedded engine's cancel
//! ([`overture_kit::execute`]), so the three cannot drift apart.

use std::time::Duration;

use async_trait::async_trait;
use overture_domain::{DeploymentCommand, DeploymentError};
use overture_events::DeploymentId;
use overture_kit::payload::StorePayloads;
use overture_kit::{execute, Cause, DeploymentLog, LogError, SystemClock};
use overture_submit::again::{self, Redrive};
use overture_submit::{SealSecrets, Submission, SubmitPorts};
use uuid::Uuid;

use crate::auth::Caller;
use crate::{RunDeployments, RunError};

/// Starts, redrives and cancels deployments by recording them in `log`; whoever follows the log
/// (the orchestrator on the events table's stream) carries them out.
pub struct Recorded<L, S, P> {
    log: L,
    seals: S,
    payloads: P,
    look_every: Duration,
}

impl<L, S, P> Recorded<L, S, P>
where
    L: DeploymentLog,
    S: SealSecrets,
    P: StorePayloads,
{
    /// Records in `log`, seals with `seals`, keeps blueprints' files in `payloads`; a stream of
    /// the log looks again every `look_every` (another process appends, and tells no one here).
    pub fn new(log: L, seals: S, payloads: P, look_every: Duration) -> Self {
        Self {
            log,
            seals,
            payloads,
            look_every,
        }
    }

    /// The ports submitting uses, for what the API does not serve itself (a redeploy).
    pub fn ports(&self) -> SubmitPorts<'_> {
        SubmitPorts {
            log: &self.log,
            seals: &self.seals,
            payloads: &self.payloads,
            clock: &SystemClock,
        }
    }

    /// The log recorded in.
    pub fn log(&self) -> &L {
        &self.log
    }
}

/// Records a user's cancel of `id` in `log`, or answers why the deployment refuses it (it has
/// ended, or was never requested); whoever drives the deployment carries the cancel out.
pub async fn cancel(
    log: &dyn DeploymentLog,
    id: DeploymentId,
    requested_by: &str,
    reason: &str,
) -> Result<Result<(), DeploymentError>, LogError> {
    let cause = Cause::new(requested_by, id, Uuid::now_v7());
    let command = DeploymentCommand::Cancel {
        requested_by: requested_by.to_owned(),
        reason: reason.to_owned(),
    };
    // No tenant for a new stream: cancelling one that does not exist is refused.
    let recorded = execute(log, id, "", &cause, |_| command.clone()).await?;
    Ok(recorded.map(|_| ()))
}

#[async_trait]
impl<L, S, P> RunDeployments for Recorded<L, S, P>
where
    L: DeploymentLog,
    S: SealSecrets,
    P: StorePayloads,
{
    async fn start(&self, submission: Submission) -> Result<DeploymentId, RunError> {
        Ok(overture_submit::submit(submission, &self.ports()).await?)
    }

    async fn redrive(&self, request: Redrive) -> Result<(), RunError> {
        Ok(again::redrive(request, &self.ports()).await?)
    }

    async fn cancel(
        &self,
        id: DeploymentId,
        requested_by: &str,
        reason: &str,
    ) -> Result<Result<(), DeploymentError>, RunError> {
        Ok(cancel(&self.log, id, requested_by, reason).await?)
    }

    async fn changed(&self) {
        tokio::time::sleep(self.look_every).await;
    }

    async fn caller_seen(&self, _: &Caller) {
        // A deployment's token is kept in custody when it is recorded; nothing waits for one.
    }
}
