//! A deployment's sealed secrets on AWS: envelope encryption with KMS, combined with the user's
//! token, kept in a DynamoDB table until the purge.
//!
//! Sealing asks KMS for a data key (`GenerateDataKey`, AES-256) with the encryption context
//! `{tenant, deployment}`; the values are sealed as everywhere ([`overture_seal`]) under that data
//! key, or, for a deployment made with the user's cloud token, under a key derived from the token
//! and the data key, so that neither KMS access nor the token alone opens the seal. Only the
//! KMS-encrypted data key and the sealed values are stored (item `deployment` → `tenant`, `lock`,
//! `data_key`, `values`); the token is kept by the [`TokenCustody`] port. What steps keep between
//! attempts is sealed the same way, one data key per state, in S3 ([`crate::kept`]). The purge
//! deletes the kept states and the item, and lets go of the token.

use std::collections::HashMap;
use std::sync::Arc;

#[cfg(any(feature = "submit", feature = "runner", feature = "orchestrator"))]
use async_trait::async_trait;
use aws_sdk_dynamodb::error::DisplayErrorContext;
use aws_sdk_dynamodb::primitives::Blob as DynamoBlob;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_kms::types::DataKeySpec;
use overture_domain::secret::{SecretString, SecretValues};
use overture_events::DeploymentId;
use overture_kit::TokenCustody;

use crate::custody::{decrypt_bound, encryption_context, Decrypted};
use crate::kept::KeptStates;
use overture_seal::{SealKey, SealedValue, NONCE_BYTES, ROOT_KEY_BYTES};

const DEPLOYMENT: &str = "deployment";
const TENANT: &str = "tenant";
const LOCK: &str = "lock";
const DATA_KEY: &str = "data_key";
const VALUES: &str = "values";
/// The `lock` of a seal that opens only with the user's token too.
const TOKEN_LOCK: &str = "token";
/// The `lock` of a seal that KMS alone opens.
const KMS_LOCK: &str = "kms";

/// Why the seal could not be made, opened or deleted; never carries a secret.
#[derive(Debug, thiserror::Error)]
pub enum SealsError {
    /// A call to KMS or DynamoDB failed; trying again later may succeed.
    #[error("{service} {operation} failed: {message}")]
    Call {
        service: &'static str,
        operation: &'static str,
        message: String,
    },
    /// There is no seal for the deployment (purged, or never made).
    #[error("deployment {0} has no sealed secrets (they are purged at its end)")]
    Missing(DeploymentId),
    /// The seal does not open: another tenant, a moved item, no token, a wrong token.
    #[error("the sealed secrets of deployment {deployment} do not open: {reason}")]
    DoesNotOpen {
        deployment: DeploymentId,
        reason: String,
    },
}

impl SealsError {
    /// Whether trying the same call again later may succeed.
    pub const fn is_retryable(&self) -> bool {
        matches!(self, SealsError::Call { .. })
    }
}

pub(crate) fn call<E: std::error::Error + 'static>(
    service: &'static str,
    operation: &'static str,
) -> impl FnOnce(E) -> SealsError {
    move |error| SealsError::Call {
        service,
        operation,
        message: DisplayErrorContext(error).to_string(),
    }
}

/// Sealed secrets under KMS data keys, in a DynamoDB table.
#[derive(Clone)]
pub struct KmsSeals {
    kms: aws_sdk_kms::Client,
    dynamodb: aws_sdk_dynamodb::Client,
    table: String,
    key: String,
    custody: Arc<dyn TokenCustody>,
    pub(crate) kept: KeptStates,
}

/// A data key KMS made for one seal: in the clear to seal with, and encrypted under the KMS key
/// (bound to tenant and deployment) to be stored beside what it seals.
pub(crate) struct DataKey {
    /// The key itself; never stored.
    pub(crate) root: [u8; ROOT_KEY_BYTES],
    /// The key as KMS encrypted it.
    pub(crate) encrypted: Vec<u8>,
}

impl KmsSeals {
    /// Seals under data keys of the KMS key `key` (id, ARN or alias), kept in `table`, with the
    /// users' tokens in `custody` and what steps keep between attempts in `kept`.
    pub fn new(
        kms: aws_sdk_kms::Client,
        dynamodb: aws_sdk_dynamodb::Client,
        table: impl Into<String>,
        key: impl Into<String>,
        custody: Arc<dyn TokenCustody>,
        kept: KeptStates,
    ) -> Self {
        Self {
            kms,
            dynamodb,
            table: table.into(),
            key: key.into(),
            custody,
            kept,
        }
    }

    /// A new data key for a seal of `deployment` of `tenant` (`GenerateDataKey`, AES-256, with
    /// their encryption context).
    pub(crate) async fn new_data_key(
        &self,
        deployment: DeploymentId,
        tenant: &str,
    ) -> Result<DataKey, SealsError> {
        let generated = self
            .kms
            .generate_data_key()
            .key_id(&self.key)
            .key_spec(DataKeySpec::Aes256)
            .set_encryption_context(Some(encryption_context(deployment, tenant)))
            .send()
            .await
            .map_err(call("KMS", "GenerateDataKey"))?;
        let malformed = |what: &str| SealsError::Call {
            service: "KMS",
            operation: "GenerateDataKey",
            message: format!("the answer has no {what}"),
        };
        let root: [u8; ROOT_KEY_BYTES] = generated
            .plaintext()
            .and_then(|key| key.as_ref().try_into().ok())
            .ok_or_else(|| malformed("256-bit plaintext key"))?;
        let encrypted = generated
            .ciphertext_blob()
            .ok_or_else(|| malformed("encrypted key"))?
            .as_ref()
            .to_vec();
        Ok(DataKey { root, encrypted })
    }

    /// Opens a data key [`new_data_key`](Self::new_data_key) made for `deployment` of `tenant`;
    /// one made for others does not open.
    pub(crate) async fn open_data_key(
        &self,
        encrypted: &[u8],
        deployment: DeploymentId,
        tenant: &str,
    ) -> Result<[u8; ROOT_KEY_BYTES], SealsError> {
        let refused = |reason: &str| SealsError::DoesNotOpen {
            deployment,
            reason: reason.to_owned(),
        };
        let decrypted = decrypt_bound(&self.kms, &self.key, encrypted, deployment, tenant)
            .await
            .map_err(call("KMS", "Decrypt"))?;
        let Decrypted::Plain(data_key) = decrypted else {
            return Err(refused(
                "KMS does not open its data key for this tenant and deployment",
            ));
        };
        data_key
            .as_slice()
            .try_into()
            .map_err(|_| refused("its data key is not 256 bits"))
    }

    /// The user's token a seal locked with it needs: refused when custody no longer keeps it.
    pub(crate) async fn lock_token(
        &self,
        deployment: DeploymentId,
        tenant: &str,
    ) -> Result<SecretString, SealsError> {
        let refused = |reason: String| SealsError::DoesNotOpen { deployment, reason };
        self.custody
            .token(deployment, tenant)
            .await
            .map_err(|e| refused(e.to_string()))?
            .ok_or_else(|| {
                refused("it opens only with the user's cloud token, which is not kept".into())
            })
    }

    /// The user's token while custody keeps it, to lock a new seal with.
    pub(crate) async fn kept_token(
        &self,
        deployment: DeploymentId,
        tenant: &str,
    ) -> Result<Option<SecretString>, SealsError> {
        self.custody
            .token(deployment, tenant)
            .await
            .map_err(|e| SealsError::Call {
                service: "custody",
                operation: "token",
                message: e.to_string(),
            })
    }

    /// Seals `secrets`, locked by `token` too when one is given, and hands the token to custody.
    pub async fn seal_secrets(
        &self,
        deployment: DeploymentId,
        tenant: &str,
        secrets: &SecretValues,
        token: Option<&SecretString>,
    ) -> Result<String, SealsError> {
        let DataKey {
            root,
            encrypted: encrypted_key,
        } = self.new_data_key(deployment, tenant).await?;
        let key = SealKey::derive(&root, token, tenant, deployment);
        let mut values = HashMap::new();
        for (name, value) in secrets {
            let sealed =
                overture_seal::seal_value(&key, tenant, deployment, name, value).map_err(|e| {
                    SealsError::DoesNotOpen {
                        deployment,
                        reason: e.to_string(),
                    }
                })?;
            let mut bytes = sealed.nonce.to_vec();
            bytes.extend(sealed.ciphertext);
            values.insert(name.clone(), AttributeValue::B(DynamoBlob::new(bytes)));
        }
        let lock = if token.is_some() {
            TOKEN_LOCK
        } else {
            KMS_LOCK
        };
        self.dynamodb
            .put_item()
            .table_name(&self.table)
            .item(DEPLOYMENT, AttributeValue::S(deployment.to_string()))
            .item(TENANT, AttributeValue::S(tenant.to_owned()))
            .item(LOCK, AttributeValue::S(lock.to_owned()))
            .item(DATA_KEY, AttributeValue::B(DynamoBlob::new(encrypted_key)))
            .item(VALUES, AttributeValue::M(values))
            .send()
            .await
            .map_err(call("DynamoDB", "PutItem"))?;
        if let Some(token) = token {
            self.custody
                .keep(deployment, tenant, token)
                .await
                .map_err(|e| SealsError::Call {
                    service: "custody",
                    operation: "keep",
                    message: e.to_string(),
                })?;
        }
        Ok(format!("kms:{deployment}"))
    }

    /// Opens the secrets sealed for `deployment` of `tenant`.
    pub async fn open_secrets(
        &self,
        deployment: DeploymentId,
        tenant: &str,
    ) -> Result<SecretValues, SealsError> {
        let found = self
            .dynamodb
            .get_item()
            .table_name(&self.table)
            .consistent_read(true)
            .key(DEPLOYMENT, AttributeValue::S(deployment.to_string()))
            .send()
            .await
            .map_err(call("DynamoDB", "GetItem"))?;
        let item = found.item().ok_or(SealsError::Missing(deployment))?;
        let refused = |reason: &str| SealsError::DoesNotOpen {
            deployment,
            reason: reason.to_owned(),
        };
        let encrypted_key = item
            .get(DATA_KEY)
            .and_then(|v| v.as_b().ok())
            .ok_or_else(|| refused("it holds no data key"))?;
        let root = self
            .open_data_key(encrypted_key.as_ref(), deployment, tenant)
            .await?;
        let token = match item
            .get(LOCK)
            .and_then(|v| v.as_s().ok())
            .map(String::as_str)
        {
            Some(TOKEN_LOCK) => Some(self.lock_token(deployment, tenant).await?),
            _ => None,
        };
        let key = SealKey::derive(&root, token.as_ref(), tenant, deployment);
        let mut secrets = SecretValues::new();
        let values = item
            .get(VALUES)
            .and_then(|v| v.as_m().ok())
            .ok_or_else(|| refused("it holds no values"))?;
        for (name, value) in values {
            let bytes = value
                .as_b()
                .map_err(|_| refused("a value is not binary"))?
                .as_ref();
            if bytes.len() < NONCE_BYTES {
                return Err(refused("a value is shorter than its nonce"));
            }
            let (nonce, ciphertext) = bytes.split_at(NONCE_BYTES);
            let sealed = SealedValue {
                nonce: nonce
                    .try_into()
                    .map_err(|_| refused("a nonce is malformed"))?,
                ciphertext: ciphertext.to_vec(),
            };
            let value = overture_seal::open_value(&key, tenant, deployment, name, &sealed)
                .map_err(|e| refused(&e.to_string()))?;
            secrets.insert(name.clone(), value);
        }
        Ok(secrets)
    }

    /// Deletes what the deployment's steps kept and its seal, and lets go of its token; purging
    /// what is gone succeeds.
    pub async fn purge_secrets(&self, deployment: DeploymentId) -> Result<(), SealsError> {
        self.kept.delete_all(deployment).await?;
        self.dynamodb
            .delete_item()
            .table_name(&self.table)
            .key(DEPLOYMENT, AttributeValue::S(deployment.to_string()))
            .send()
            .await
            .map_err(call("DynamoDB", "DeleteItem"))?;
        self.custody
            .forget(deployment)
            .await
            .map_err(|e| SealsError::Call {
                service: "custody",
                operation: "forget",
                message: e.to_string(),
            })
    }
}

#[cfg(feature = "submit")]
#[async_trait]
impl overture_submit::SealSecrets for KmsSeals {
    async fn seal(
        &self,
        deployment: DeploymentId,
        tenant: &str,
        secrets: &SecretValues,
        token: Option<&SecretString>,
    ) -> Result<String, overture_submit::SealError> {
        self.seal_secrets(deployment, tenant, secrets, token)
            .await
            .map_err(|e| {
                if e.is_retryable() {
                    overture_submit::SealError::Unavailable(Box::new(e))
                } else {
                    overture_submit::SealError::Failed(Box::new(e))
                }
            })
    }
}

#[cfg(feature = "runner")]
#[async_trait]
impl overture_runner::OpenSeal for KmsSeals {
    async fn open(
        &self,
        deployment: DeploymentId,
        tenant: &str,
        _seal: &str,
    ) -> Result<SecretValues, overture_runner::PortError> {
        self.open_secrets(deployment, tenant)
            .await
            .map_err(port_error)
    }
}

#[cfg(feature = "orchestrator")]
#[async_trait]
impl overture_orchestrator::PurgeSecrets for KmsSeals {
    async fn purge(
        &self,
        deployment: DeploymentId,
    ) -> Result<(), overture_orchestrator::WorkError> {
        self.purge_secrets(deployment).await.map_err(|e| {
            if e.is_retryable() {
                overture_orchestrator::WorkError::unavailable(e)
            } else {
                overture_orchestrator::WorkError::refused(e)
            }
        })
    }
}

/// The runner's port error for a seal's: whether a retry can help, as the seal said.
#[cfg(feature = "runner")]
pub(crate) fn port_error(error: SealsError) -> overture_runner::PortError {
    if error.is_retryable() {
        overture_runner::PortError::unavailable(error)
    } else {
        overture_runner::PortError::refused(error)
    }
}

/// Creates the seals table unless it exists. For development and tests; on AWS the stack
/// makes it.
pub async fn create_seals_table(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
) -> Result<(), crate::dynamodb::DynamoError> {
    crate::dynamodb::create_table_keyed_by(client, table, DEPLOYMENT).await
}
