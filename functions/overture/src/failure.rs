//! How a command ends when not in success, which `main` turns into its exit code.

use overture_kit::query::QueryError;

/// How a command ended, when not in success.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// The user's input is wrong; nothing was recorded.
    #[error("{0}")]
    BadInput(String),
    /// The deployment failed, or a check found a difference (already reported).
    #[error("{0}")]
    Unsuccessful(String),
    /// The engine itself failed.
    #[error(transparent)]
    Engine(#[from] anyhow::Error),
}

impl From<QueryError> for Failure {
    fn from(error: QueryError) -> Self {
        match error {
            QueryError::NotAvailable(message) => Failure::BadInput(message.into()),
            QueryError::Refused(message) => Failure::BadInput(message),
            other => Failure::Engine(other.into()),
        }
    }
}

impl From<overture_embedded::EngineError> for Failure {
    fn from(error: overture_embedded::EngineError) -> Self {
        // `main` prints an engine failure with its causes (`{:#}`), and the functions' errors
        // the engine carries already name their causes in their messages: the message alone
        // reads as it always has, without each cause twice.
        Failure::Engine(anyhow::Error::msg(error.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use overture_domain::DeploymentError;
    use overture_embedded::EngineError;
    use overture_events::DeploymentId;
    use overture_orchestrator::OrchestratorError;

    use super::*;

    #[test]
    fn an_engine_failure_prints_its_message_once() {
        let deployment = DeploymentId::from_uuid(uuid::Uuid::nil());
        let error = EngineError::from(OrchestratorError::Refused {
            deployment,
            source: DeploymentError::AlreadyFinished,
        });
        let message = error.to_string();
        let Failure::Engine(printed) = Failure::from(error) else {
            panic!("an engine error is the engine's failure (exit code 3)");
        };
        // As `main` prints it: the cause the message names is not repeated after it.
        assert_eq!(format!("{printed:#}"), message);
        assert!(
            message.starts_with(&format!("deployment {deployment}: ")),
            "{message}"
        );
    }
}
