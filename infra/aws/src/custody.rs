//! The users' cloud tokens in custody on AWS: encrypted with KMS, kept in a DynamoDB table.
//!
//! No function lives as long as a deployment, so the token a user deployed with must be kept
//! where the next function can get it back. Each token is encrypted with `kms:Encrypt` under the
//! engine's key with the encryption context `{tenant, deployment}`, and the ciphertext is the
//! only thing stored (table item `deployment` → `tenant`, `sealed_token`). KMS refuses to decrypt
//! with any other context, so a ciphertext copied to another deployment's item, or asked for by
//! another tenant, does not open. Forgetting deletes the item; KMS keeps no copy.
//!
//! Who can get a token back: a principal allowed both to read the table and `kms:Decrypt` with
//! the key (the engine's function roles), while the deployment runs; every decrypt is a KMS call
//! that AWS CloudTrail records with its encryption context.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::error::DisplayErrorContext;
use aws_sdk_dynamodb::primitives::Blob as DynamoBlob;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_kms::operation::decrypt::DecryptError;
use aws_sdk_kms::primitives::Blob;
use overture_domain::secret::SecretString;
use overture_events::DeploymentId;
use overture_kit::{CustodyError, TokenCustody};
use secrecy::ExposeSecret;

const DEPLOYMENT: &str = "deployment";
const TENANT: &str = "tenant";
const SEALED_TOKEN: &str = "sealed_token";

/// A call to KMS or DynamoDB failed; never carries the token.
#[derive(Debug, thiserror::Error)]
#[error("{service} {operation} failed: {message}")]
pub struct CallFailed {
    service: &'static str,
    operation: &'static str,
    message: String,
}

fn failed<E: std::error::Error + 'static>(
    service: &'static str,
    operation: &'static str,
) -> impl FnOnce(E) -> CustodyError {
    move |error| {
        CustodyError::Unavailable(Box::new(CallFailed {
            service,
            operation,
            message: DisplayErrorContext(error).to_string(),
        }))
    }
}

/// Tokens encrypted under a KMS key, kept in a DynamoDB table.
#[derive(Clone, Debug)]
pub struct KmsTokenCustody {
    kms: aws_sdk_kms::Client,
    dynamodb: aws_sdk_dynamodb::Client,
    table: String,
    key: String,
}

impl KmsTokenCustody {
    /// Custody under the KMS key `key` (id, ARN or alias), in `table`.
    pub fn new(
        kms: aws_sdk_kms::Client,
        dynamodb: aws_sdk_dynamodb::Client,
        table: impl Into<String>,
        key: impl Into<String>,
    ) -> Self {
        Self {
            kms,
            dynamodb,
            table: table.into(),
            key: key.into(),
        }
    }
}

/// The KMS encryption context binding a ciphertext to its tenant and deployment: KMS decrypts it
/// under this context only.
pub(crate) fn encryption_context(
    deployment: DeploymentId,
    tenant: &str,
) -> HashMap<String, String> {
    [
        (TENANT.to_owned(), tenant.to_owned()),
        (DEPLOYMENT.to_owned(), deployment.to_string()),
    ]
    .into()
}

/// What KMS made of a ciphertext bound to a tenant and a deployment.
pub(crate) enum Decrypted {
    /// It opened.
    Plain(Vec<u8>),
    /// It does not open under this context or key: moved, tampered with, or another tenant's.
    DoesNotOpen,
}

/// Decrypts `ciphertext` under the encryption context of `deployment` and `tenant`; a failed
/// call (KMS unreachable, throttled) is the error, a refusal is [`Decrypted::DoesNotOpen`].
pub(crate) async fn decrypt_bound(
    kms: &aws_sdk_kms::Client,
    key: &str,
    ciphertext: &[u8],
    deployment: DeploymentId,
    tenant: &str,
) -> Result<Decrypted, aws_sdk_kms::error::SdkError<DecryptError>> {
    let opened = kms
        .decrypt()
        .key_id(key)
        .ciphertext_blob(Blob::new(ciphertext))
        .set_encryption_context(Some(encryption_context(deployment, tenant)))
        .send()
        .await;
    match opened {
        Ok(opened) => Ok(opened.plaintext().map_or(Decrypted::DoesNotOpen, |plain| {
            Decrypted::Plain(plain.as_ref().to_vec())
        })),
        Err(error)
            if matches!(
                error.as_service_error(),
                Some(
                    DecryptError::InvalidCiphertextException(_)
                        | DecryptError::IncorrectKeyException(_)
                )
            ) =>
        {
            Ok(Decrypted::DoesNotOpen)
        }
        Err(error) => Err(error),
    }
}

#[async_trait]
impl TokenCustody for KmsTokenCustody {
    async fn keep(
        &self,
        deployment: DeploymentId,
        tenant: &str,
        token: &SecretString,
    ) -> Result<(), CustodyError> {
        let sealed = self
            .kms
            .encrypt()
            .key_id(&self.key)
            .plaintext(Blob::new(token.expose_secret().as_bytes()))
            .set_encryption_context(Some(encryption_context(deployment, tenant)))
            .send()
            .await
            .map_err(failed("KMS", "Encrypt"))?;
        let ciphertext = sealed.ciphertext_blob().map(|b| b.as_ref().to_vec());
        let Some(ciphertext) = ciphertext else {
            return Err(CustodyError::Unavailable(Box::new(CallFailed {
                service: "KMS",
                operation: "Encrypt",
                message: "the answer holds no ciphertext".into(),
            })));
        };
        self.dynamodb
            .put_item()
            .table_name(&self.table)
            .item(DEPLOYMENT, AttributeValue::S(deployment.to_string()))
            .item(TENANT, AttributeValue::S(tenant.to_owned()))
            .item(SEALED_TOKEN, AttributeValue::B(DynamoBlob::new(ciphertext)))
            .send()
            .await
            .map_err(failed("DynamoDB", "PutItem"))?;
        Ok(())
    }

    async fn token(
        &self,
        deployment: DeploymentId,
        tenant: &str,
    ) -> Result<Option<SecretString>, CustodyError> {
        let found = self
            .dynamodb
            .get_item()
            .table_name(&self.table)
            .consistent_read(true)
            .key(DEPLOYMENT, AttributeValue::S(deployment.to_string()))
            .send()
            .await
            .map_err(failed("DynamoDB", "GetItem"))?;
        let Some(item) = found.item() else {
            return Ok(None);
        };
        let refused = || CustodyError::Refused {
            deployment,
            tenant: tenant.to_owned(),
        };
        let ciphertext = item
            .get(SEALED_TOKEN)
            .and_then(|v| v.as_b().ok())
            .ok_or_else(refused)?;
        let decrypted = decrypt_bound(
            &self.kms,
            &self.key,
            ciphertext.as_ref(),
            deployment,
            tenant,
        )
        .await
        .map_err(failed("KMS", "Decrypt"))?;
        let Decrypted::Plain(plain) = decrypted else {
            return Err(refused());
        };
        let text = String::from_utf8(plain).map_err(|_| refused())?;
        Ok(Some(SecretString::from(text)))
    }

    async fn forget(&self, deployment: DeploymentId) -> Result<(), CustodyError> {
        self.dynamodb
            .delete_item()
            .table_name(&self.table)
            .key(DEPLOYMENT, AttributeValue::S(deployment.to_string()))
            .send()
            .await
            .map_err(failed("DynamoDB", "DeleteItem"))?;
        Ok(())
    }
}

/// Creates the custody table unless it exists. For development and tests; on AWS the stack
/// makes it.
pub async fn create_custody_table(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
) -> Result<(), crate::dynamodb::DynamoError> {
    crate::dynamodb::create_table_keyed_by(client, table, DEPLOYMENT).await
}
