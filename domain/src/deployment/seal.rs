//! The deployment's seal: what was sealed (references only), and its purge.

use overture_events::DeploymentEvent;

use super::{DeploymentError, DeploymentState, SealedCredentials};

/// The event naming what was sealed: references, never values.
pub(super) fn credentials_sealed(sealed: SealedCredentials) -> DeploymentEvent {
    DeploymentEvent::CredentialsSealed {
        seal: sealed.seal,
        secrets: sealed.secrets,
        ssh_public_key: sealed.ssh_public_key,
        token: sealed.token,
    }
}

/// The sealed secrets were deleted: allowed once no step can run any more, the bastion is
/// closed and the deployment no longer watches services.
pub(super) fn purged(state: &DeploymentState) -> Result<Vec<DeploymentEvent>, DeploymentError> {
    if state.secrets_purged {
        Ok(vec![])
    } else if state.may_purge() && !state.keeps_watching() {
        Ok(vec![DeploymentEvent::SecretsPurged {}])
    } else {
        Err(DeploymentError::StepsStillRunning)
    }
}
