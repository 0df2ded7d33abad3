//! The job's lease while its attempt runs: renewed every [`HEARTBEAT`], and the log watched for
//! the attempt's abandonment.

use std::sync::atomic::AtomicBool;

use overture_domain::StepStatus;
use overture_events::{DeploymentId, Timestamp};
use overture_kit::DeploymentLog;

use crate::{KeepAlive, HEARTBEAT};

/// Resolves once the attempt is no longer running (abandoned) or the job's lease was lost (and
/// then sets `lost_job`).
pub(crate) async fn watch_for_abandonment(
    log: &dyn DeploymentLog,
    lease: &dyn KeepAlive,
    attempt_lease: Option<Timestamp>,
    deployment: DeploymentId,
    step: &str,
    attempt: u32,
    lost_job: &AtomicBool,
) {
    let mut ticks = tokio::time::interval(HEARTBEAT);
    ticks.tick().await;
    loop {
        ticks.tick().await;
        if let Err(error) = lease.keep_alive(attempt_lease).await {
            tracing::warn!(%deployment, step, attempt, %error, "lost the job's lease; stopping the attempt");
            lost_job.store(true, std::sync::atomic::Ordering::Relaxed);
            return;
        }
        match log.load(deployment).await {
            Ok(loaded) => {
                let running = loaded
                    .state
                    .steps
                    .get(step)
                    .is_some_and(|s| s.status == StepStatus::Running && s.attempt == attempt);
                if !running {
                    return;
                }
            }
            Err(error) => {
                tracing::warn!(%deployment, %error, "could not check whether the attempt is still wanted")
            }
        }
    }
}
