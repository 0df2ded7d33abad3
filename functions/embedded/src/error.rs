//! How the engine fails, as opposed to a deployment failing: each function's and store's own
//! typed error, carried as it came, so a caller can ask it (for example whether it is retryable)
//! and its message reads as the function wrote it.

use overture_events::DeploymentId;

/// The engine failed (as opposed to a deployment failing).
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// Opening the data directory failed.
    #[error("cannot use data directory {dir}: {reason}")]
    DataDir { dir: String, reason: String },
    /// The running program, which sandboxes start again for the steps, cannot be found.
    #[error(transparent)]
    EngineProgram(std::io::Error),
    /// Loading a deployment from its stream or recording its commands failed.
    #[error(transparent)]
    Deployments(#[from] overture_kit::LogError),
    /// Reading the append-only log failed.
    #[error(transparent)]
    Log(#[from] overture_infra::sqlite::LogError),
    /// The read models failed.
    #[error(transparent)]
    ReadModels(#[from] overture_projector::StoreError),
    /// The job queue failed.
    #[error(transparent)]
    Queue(#[from] overture_infra::sqlite::QueueError),
    /// The orchestrator could not move a deployment on.
    #[error(transparent)]
    Orchestrator(#[from] overture_orchestrator::OrchestratorError),
    /// The projector could not fold a deployment's records into its view.
    #[error(transparent)]
    Projector(#[from] overture_projector::StreamProjectionError),
    /// A deployment's records could not be folded into the view printed.
    #[error(transparent)]
    Projection(#[from] overture_domain::projection::ProjectionError),
    /// The runner failed: a teardown, or keeping a stopped Terraform run's state.
    #[error(transparent)]
    Runner(#[from] overture_runner::RunnerError),
    /// The machine lacks what steps' sandboxes need (a tool, cgroup controllers).
    #[error(transparent)]
    Unready(overture_sandbox::Unready),
    /// Killing, unmounting or deleting the sandboxes a stopped engine left behind failed.
    #[error(transparent)]
    Sandboxes(std::io::Error),
    /// A due job found no free worker, though the drive saw room for it.
    #[error(transparent)]
    Workers(#[from] tokio::sync::TryAcquireError),
    /// The deployment's stream holds nothing: no such deployment was recorded.
    #[error("deployment {deployment} has no recorded events")]
    NoEvents { deployment: DeploymentId },
    /// A deployment's view did not reach the end of its stream after folding the stream in.
    #[error("the view of deployment {deployment} stays behind revision {revision} of its stream")]
    ViewBehind {
        deployment: DeploymentId,
        revision: u64,
    },
}

#[cfg(test)]
mod tests {
    use overture_domain::DeploymentError;
    use overture_infra::sqlite::QueueError;
    use overture_orchestrator::OrchestratorError;

    use super::*;

    #[test]
    fn a_functions_error_reads_as_the_function_wrote_it_and_stays_typed() {
        let refused = || OrchestratorError::Refused {
            deployment: DeploymentId::from_uuid(uuid::Uuid::nil()),
            source: DeploymentError::AlreadyFinished,
        };
        let error = EngineError::from(refused());
        assert_eq!(error.to_string(), refused().to_string());
        assert!(matches!(
            error,
            EngineError::Orchestrator(OrchestratorError::Refused { .. })
        ));
        let error = EngineError::from(QueueError::StaleReceipt);
        assert_eq!(
            error.to_string(),
            "the receipt is stale: its job was acked or received again"
        );
    }

    #[test]
    fn a_deployment_without_events_is_named() {
        let deployment = DeploymentId::from_uuid(uuid::Uuid::nil());
        assert_eq!(
            EngineError::NoEvents { deployment }.to_string(),
            format!("deployment {deployment} has no recorded events")
        );
    }
}
