//! The payload store on S3: one object per payload, `payloads/<sha256>` in one bucket.
//!
//! The key is the content's hash, so putting the same bytes twice writes the same object and
//! is harmless, and a get checks the bytes against the key before handing them on. A client for
//! a custom endpoint (the local emulator) addresses buckets by path, since the emulator serves
//! no per-bucket host names; on AWS itself buckets are addressed by host, as AWS prefers.

use async_trait::async_trait;
use aws_config::SdkConfig;
use aws_sdk_s3::error::{DisplayErrorContext, SdkError};
use aws_sdk_s3::operation::create_bucket::CreateBucketError;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{BucketLocationConstraint, CreateBucketConfiguration};
use aws_sdk_s3::Client;
use overture_kit::payload::{check_hash, payload_hash, verified, PayloadError, StorePayloads};

/// The prefix of every payload's key.
pub const KEY_PREFIX: &str = "payloads/";

/// A call to S3 failed; what the SDK said, with its causes.
#[derive(Debug, thiserror::Error)]
#[error("S3 bucket `{bucket}`: {operation} failed: {message}")]
pub struct S3Error {
    /// The bucket.
    pub bucket: String,
    /// The API operation.
    pub operation: &'static str,
    /// What the SDK said.
    pub message: String,
}

/// An S3 client for `config`: addressing buckets by path when the config names an endpoint of
/// its own (an emulator), by host on AWS.
pub fn client(config: &SdkConfig) -> Client {
    let s3 = aws_sdk_s3::config::Builder::from(config)
        .force_path_style(config.endpoint_url().is_some())
        .build();
    Client::from_conf(s3)
}

/// Payloads as objects of one S3 bucket.
#[derive(Clone, Debug)]
pub struct S3Payloads {
    client: Client,
    bucket: String,
}

impl S3Payloads {
    /// The store in `bucket`, through `client` (see [`client`]).
    pub fn new(client: Client, bucket: impl Into<String>) -> Self {
        Self {
            client,
            bucket: bucket.into(),
        }
    }

    /// The key of the payload named `hash`.
    pub fn key(hash: &str) -> String {
        format!("{KEY_PREFIX}{hash}")
    }

    fn failed<E>(&self, operation: &'static str, error: SdkError<E>) -> PayloadError
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        let retryable = passes(&error);
        let error = Box::new(S3Error {
            bucket: self.bucket.clone(),
            operation,
            message: DisplayErrorContext(&error).to_string(),
        });
        if retryable {
            PayloadError::Unavailable(error)
        } else {
            PayloadError::Refused(error)
        }
    }
}

#[async_trait]
impl StorePayloads for S3Payloads {
    async fn put(&self, bytes: &[u8]) -> Result<String, PayloadError> {
        let hash = payload_hash(bytes);
        self.client
            .put_object()
            .bucket(&self.bucket)
            .key(Self::key(&hash))
            .body(ByteStream::from(bytes.to_vec()))
            .send()
            .await
            .map_err(|e| self.failed("PutObject", e))?;
        Ok(hash)
    }

    async fn get(&self, hash: &str) -> Result<Vec<u8>, PayloadError> {
        check_hash(hash)?;
        let object = match self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(Self::key(hash))
            .send()
            .await
        {
            Ok(object) => object,
            Err(error) if error.as_service_error().is_some_and(|e| e.is_no_such_key()) => {
                return Err(PayloadError::NotFound {
                    hash: hash.to_owned(),
                })
            }
            Err(error) => return Err(self.failed("GetObject", error)),
        };
        let body = object.body.collect().await.map_err(|error| {
            PayloadError::Unavailable(Box::new(S3Error {
                bucket: self.bucket.clone(),
                operation: "GetObject",
                message: format!("reading the object: {}", DisplayErrorContext(&error)),
            }))
        })?;
        verified(hash, body.into_bytes().to_vec())
    }
}

/// Whether a failed S3 call may succeed when made again: throttling, S3's own failures and a
/// lost connection pass; a refusal (no bucket, access denied) or a request that could not be
/// built does not.
pub(crate) fn passes<E>(error: &SdkError<E>) -> bool {
    match error {
        SdkError::ServiceError(service) => {
            let status = service.raw().status().as_u16();
            status >= 500 || status == 429
        }
        SdkError::ConstructionFailure(_) => false,
        _ => true,
    }
}

/// Creates the payloads bucket in the client's region, unless this account has it already.
pub async fn create_payloads_bucket(client: &Client, bucket: &str) -> Result<(), S3Error> {
    let region = client.config().region().map(|r| r.as_ref().to_owned());
    let mut request = client.create_bucket().bucket(bucket);
    // us-east-1 is the default location and may not be named as a constraint.
    if let Some(region) = region.filter(|r| r != "us-east-1") {
        request = request.create_bucket_configuration(
            CreateBucketConfiguration::builder()
                .location_constraint(BucketLocationConstraint::from(region.as_str()))
                .build(),
        );
    }
    match request.send().await {
        Ok(_) => Ok(()),
        Err(error)
            if error
                .as_service_error()
                .is_some_and(CreateBucketError::is_bucket_already_owned_by_you) =>
        {
            Ok(())
        }
        Err(error) => Err(S3Error {
            bucket: bucket.to_owned(),
            operation: "CreateBucket",
            message: DisplayErrorContext(&error).to_string(),
        }),
    }
}
