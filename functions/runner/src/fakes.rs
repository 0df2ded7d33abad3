//! In-memory stand-ins for the runner's ports that a handler's test does not exercise (feature
//! `fakes`, for tests only).

use std::io::Write;

use async_trait::async_trait;
use overture_domain::deployment::BastionAccess;
use overture_domain::secret::SecretValues;
use overture_events::{CloudAccount, DeploymentId};

use crate::logs::{AttemptLogs, LogName};
use crate::step::SshAddress;
use crate::{GrantAccess, GrantError, KeepStepState, OpenSeal, PortError};

/// No secrets, nothing kept, no bastion (a grant is refused), every log dropped.
#[derive(Clone, Copy, Debug, Default)]
pub struct Quiet;

#[async_trait]
impl OpenSeal for Quiet {
    async fn open(&self, _: DeploymentId, _: &str, _: &str) -> Result<SecretValues, PortError> {
        Ok(SecretValues::new())
    }
}

#[async_trait]
impl KeepStepState for Quiet {
    async fn load(&self, _: DeploymentId, _: &str, _: &str) -> Result<Option<Vec<u8>>, PortError> {
        Ok(None)
    }
    async fn save(&self, _: DeploymentId, _: &str, _: &str, _: &[u8]) -> Result<(), PortError> {
        Ok(())
    }
}

#[async_trait]
impl GrantAccess for Quiet {
    async fn grant(
        &self,
        _: DeploymentId,
        _: &CloudAccount,
        _: &SshAddress,
        _: &str,
    ) -> Result<BastionAccess, GrantError> {
        Err(GrantError::Refused(
            "no step of these tests goes through a bastion".into(),
        ))
    }

    async fn still_granted(
        &self,
        _: DeploymentId,
        _: &CloudAccount,
        _: &BastionAccess,
    ) -> Result<bool, GrantError> {
        Ok(true)
    }
}

impl AttemptLogs for Quiet {
    fn create(
        &self,
        _: DeploymentId,
        _: &str,
        _: LogName,
    ) -> Result<Box<dyn Write + Send + Sync>, PortError> {
        Ok(Box::new(std::io::sink()))
    }
}
