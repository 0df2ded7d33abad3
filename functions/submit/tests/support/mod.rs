//! What the submit's tests share: a submission as the tests take it for granted, a seal with
//! nothing to seal, and a log that cannot be written.

#![allow(dead_code)]

use std::collections::BTreeMap;

use async_trait::async_trait;
use overture_domain::secret::{SecretString, SecretValues};
use overture_domain::DeploymentState;
use overture_events::{DeploymentEvent, DeploymentId};
use overture_kit::{Cause, DeploymentLog, Loaded, LogError};
use overture_submit::{SealError, SealSecrets, Submission};

/// The blueprint `text`, read from `b.yaml`, submitted by `ada` of tenant `acme` from a test,
/// with no parameter, secret, file or cloud.
pub fn submission(text: &str) -> Submission {
    Submission {
        triggered_by: None,
        source: "b.yaml".into(),
        text: text.into(),
        tenant: "acme".into(),
        requested_by: "ada".into(),
        trigger: "test".into(),
        params: BTreeMap::new(),
        secrets: SecretValues::new(),
        files: BTreeMap::new(),
        cloud: None,
        name: None,
    }
}

/// The blueprint declares no secret and makes no key: nothing is sealed, and asking is a bug.
pub struct NothingToSeal;

#[async_trait]
impl SealSecrets for NothingToSeal {
    async fn seal(
        &self,
        _: DeploymentId,
        _: &str,
        _: &SecretValues,
        _: Option<&SecretString>,
    ) -> Result<String, SealError> {
        Err(SealError::Failed("nothing was to be sealed".into()))
    }
}

/// A log in which no deployment has begun, and that cannot be written.
pub struct DownLog;

#[async_trait]
impl DeploymentLog for DownLog {
    async fn load(&self, _: DeploymentId) -> Result<Loaded, LogError> {
        Ok(Loaded {
            state: DeploymentState::default(),
            revision: None,
        })
    }

    async fn append(
        &self,
        _: DeploymentId,
        _: &str,
        _: Option<u64>,
        _: Vec<DeploymentEvent>,
        _: &Cause,
    ) -> Result<(), LogError> {
        Err(LogError::Unavailable("the table is throttled".into()))
    }
}
