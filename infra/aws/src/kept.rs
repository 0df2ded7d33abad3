//! What steps keep between attempts on AWS (a Terraform state, which holds the ids of what it
//! made and often secrets of its own), sealed as [`KmsSeals`] seals secrets, as S3 objects.
//!
//! A state can be far larger than a DynamoDB item (400 KB), so each is one object of the
//! payloads bucket, `kept/<deployment>/<step>.sealed`, replaced by each save. It is sealed under
//! a fresh KMS data key bound to tenant and deployment (the encryption context), combined with
//! the user's token while custody keeps it, exactly as the deployment's secrets are
//! ([`KmsSeals`]); the object holds only the encrypted data key, the lock and the sealed bytes:
//!
//! ```text
//! "overture-kept-v1\n" | lock (b't': token and KMS, b'k': KMS alone) | u16 key length (BE)
//! | encrypted data key | nonce (12 bytes) | ciphertext
//! ```
//!
//! The states go with the deployment's secrets: [`KmsSeals::purge_secrets`] deletes them. A state
//! locked with the token could not be opened after the purge anyway, since the token is let go
//! of then.

#[cfg(feature = "runner")]
use async_trait::async_trait;
use aws_sdk_s3::primitives::ByteStream;
use overture_events::DeploymentId;
use overture_seal::{SealKey, SealedValue, NONCE_BYTES};

#[cfg(feature = "runner")]
use crate::seals::port_error;
use crate::seals::{call, DataKey, KmsSeals, SealsError};

/// The prefix of every kept state's key.
pub const KEY_PREFIX: &str = "kept/";
/// What every kept state's object starts with: the format and its version.
const MAGIC: &[u8] = b"overture-kept-v1\n";
/// The lock of a state that opens only with the user's token too.
const TOKEN_LOCK: u8 = b't';
/// The lock of a state that KMS alone opens.
const KMS_LOCK: u8 = b'k';

/// Where the kept states are: a prefix of one S3 bucket.
#[derive(Clone, Debug)]
pub struct KeptStates {
    client: aws_sdk_s3::Client,
    bucket: String,
}

impl KeptStates {
    /// The states in `bucket` (the payloads bucket), through `client` (see [`crate::s3::client`]).
    pub fn new(client: aws_sdk_s3::Client, bucket: impl Into<String>) -> Self {
        Self {
            client,
            bucket: bucket.into(),
        }
    }

    /// The key of the object holding what `step` of `deployment` keeps.
    pub fn key(deployment: DeploymentId, step: &str) -> String {
        format!("{}{step}.sealed", Self::prefix(deployment))
    }

    fn prefix(deployment: DeploymentId) -> String {
        format!("{KEY_PREFIX}{deployment}/")
    }

    /// Deletes every state the deployment's steps kept; deleting what is gone succeeds.
    pub(crate) async fn delete_all(&self, deployment: DeploymentId) -> Result<(), SealsError> {
        let mut pages = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(Self::prefix(deployment))
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(call("S3", "ListObjectsV2"))?;
            for object in page.contents() {
                let Some(key) = object.key() else { continue };
                self.client
                    .delete_object()
                    .bucket(&self.bucket)
                    .key(key)
                    .send()
                    .await
                    .map_err(call("S3", "DeleteObject"))?;
            }
        }
        Ok(())
    }
}

/// The name a step's state is sealed under: binds it to the step, as a secret to its name.
fn sealed_name(step: &str) -> String {
    format!("kept-state/{step}")
}

impl KmsSeals {
    /// Seals `state` for `step` of `deployment` of `tenant`, replacing what the step kept.
    pub async fn keep_state(
        &self,
        deployment: DeploymentId,
        tenant: &str,
        step: &str,
        state: &[u8],
    ) -> Result<(), SealsError> {
        let token = self.kept_token(deployment, tenant).await?;
        let DataKey { root, encrypted } = self.new_data_key(deployment, tenant).await?;
        let key = SealKey::derive(&root, token.as_ref(), tenant, deployment);
        let sealed = overture_seal::seal_bytes(&key, tenant, deployment, &sealed_name(step), state)
            .map_err(|e| SealsError::DoesNotOpen {
                deployment,
                reason: e.to_string(),
            })?;
        let key_length = u16::try_from(encrypted.len()).map_err(|_| SealsError::Call {
            service: "KMS",
            operation: "GenerateDataKey",
            message: "the encrypted data key is longer than 64 KiB".into(),
        })?;
        let lock = if token.is_some() {
            TOKEN_LOCK
        } else {
            KMS_LOCK
        };
        let mut body = MAGIC.to_vec();
        body.push(lock);
        body.extend(key_length.to_be_bytes());
        body.extend(encrypted);
        body.extend(sealed.nonce);
        body.extend(sealed.ciphertext);
        self.kept
            .client
            .put_object()
            .bucket(&self.kept.bucket)
            .key(KeptStates::key(deployment, step))
            .body(ByteStream::from(body))
            .send()
            .await
            .map_err(call("S3", "PutObject"))?;
        Ok(())
    }

    /// Opens what `step` of `deployment` of `tenant` kept, if it kept anything.
    pub async fn kept_state(
        &self,
        deployment: DeploymentId,
        tenant: &str,
        step: &str,
    ) -> Result<Option<Vec<u8>>, SealsError> {
        let object = match self
            .kept
            .client
            .get_object()
            .bucket(&self.kept.bucket)
            .key(KeptStates::key(deployment, step))
            .send()
            .await
        {
            Ok(object) => object,
            Err(error) if error.as_service_error().is_some_and(|e| e.is_no_such_key()) => {
                return Ok(None)
            }
            Err(error) => return Err(call("S3", "GetObject")(error)),
        };
        let body = object
            .body
            .collect()
            .await
            .map_err(call("S3", "GetObject"))?
            .into_bytes();
        let refused = |reason: &str| SealsError::DoesNotOpen {
            deployment,
            reason: format!("the state step `{step}` kept {reason}"),
        };
        let rest = body
            .strip_prefix(MAGIC)
            .ok_or_else(|| refused("is not a sealed state of this format"))?;
        let (&lock, rest) = rest.split_first().ok_or_else(|| refused("has no lock"))?;
        let (length, rest) = rest
            .split_first_chunk::<2>()
            .ok_or_else(|| refused("has no data key"))?;
        let length = usize::from(u16::from_be_bytes(*length));
        if rest.len() < length + NONCE_BYTES {
            return Err(refused("is cut short"));
        }
        let (encrypted, rest) = rest.split_at(length);
        let (nonce, ciphertext) = rest.split_at(NONCE_BYTES);
        let root = self.open_data_key(encrypted, deployment, tenant).await?;
        let token = match lock {
            TOKEN_LOCK => Some(self.lock_token(deployment, tenant).await?),
            KMS_LOCK => None,
            _ => return Err(refused("has an unknown lock")),
        };
        let key = SealKey::derive(&root, token.as_ref(), tenant, deployment);
        let sealed = SealedValue {
            nonce: nonce
                .try_into()
                .map_err(|_| refused("has a malformed nonce"))?,
            ciphertext: ciphertext.to_vec(),
        };
        overture_seal::open_bytes(&key, tenant, deployment, &sealed_name(step), &sealed)
            .map(Some)
            .map_err(|e| refused(&format!("does not open: {e}")))
    }
}

#[cfg(feature = "runner")]
#[async_trait]
impl overture_runner::KeepStepState for KmsSeals {
    async fn load(
        &self,
        deployment: DeploymentId,
        tenant: &str,
        step: &str,
    ) -> Result<Option<Vec<u8>>, overture_runner::PortError> {
        self.kept_state(deployment, tenant, step)
            .await
            .map_err(port_error)
    }

    async fn save(
        &self,
        deployment: DeploymentId,
        tenant: &str,
        step: &str,
        state: &[u8],
    ) -> Result<(), overture_runner::PortError> {
        self.keep_state(deployment, tenant, step, state)
            .await
            .map_err(port_error)
    }
}
