//! The users' cloud tokens, held in memory while their deployments run: the embedded engine's
//! [`TokenCustody`].
//!
//! A deployment that acts in a cloud is sealed under a key derived from its user's token (see
//! [`crate::keystore`]), and every cloud call on its behalf carries that token. The token is never
//! written anywhere the engine could read it back without the user: the process that runs the
//! deployment holds it here, handed over by `overture deploy` or `overture resume`.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use async_trait::async_trait;
use overture_domain::secret::SecretString;
use overture_events::DeploymentId;
use overture_kit::{CustodyError, TokenCustody};

/// The tokens of the deployments this process runs, by deployment.
#[derive(Clone, Debug, Default)]
pub struct SessionTokens {
    tokens: Arc<RwLock<HashMap<DeploymentId, SecretString>>>,
}

impl SessionTokens {
    /// No tokens yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Holds the user's token for a deployment (replacing an earlier one).
    pub fn remember(&self, deployment: DeploymentId, token: SecretString) {
        self.tokens
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(deployment, token);
    }

    /// The user's token for a deployment, if this process was given it.
    pub fn token(&self, deployment: DeploymentId) -> Option<SecretString> {
        self.tokens
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&deployment)
            .cloned()
    }

    /// Lets go of a deployment's token.
    pub fn forget(&self, deployment: DeploymentId) {
        self.tokens
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&deployment);
    }
}

#[async_trait]
impl TokenCustody for SessionTokens {
    async fn keep(
        &self,
        deployment: DeploymentId,
        _tenant: &str,
        token: &SecretString,
    ) -> Result<(), CustodyError> {
        self.remember(deployment, token.clone());
        Ok(())
    }

    async fn token(
        &self,
        deployment: DeploymentId,
        _tenant: &str,
    ) -> Result<Option<SecretString>, CustodyError> {
        Ok(SessionTokens::token(self, deployment))
    }

    async fn forget(&self, deployment: DeploymentId) -> Result<(), CustodyError> {
        SessionTokens::forget(self, deployment);
        Ok(())
    }
}
