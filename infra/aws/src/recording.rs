//! What records deployments on AWS, built once from the stack's settings: the events table, the
//! seals under the stack's KMS key (the users' tokens kept in custody under it too) and the
//! payloads bucket. The submit function, the api function and `overture --backend aws` record
//! through the same adapters, built here, so their settings cannot drift apart.

use std::sync::Arc;

use overture_kit::SystemClock;
use overture_submit::SubmitPorts;

use crate::custody::KmsTokenCustody;
use crate::dynamodb::DynamoDeployments;
use crate::kept::KeptStates;
use crate::s3::S3Payloads;
use crate::seals::KmsSeals;

/// The adapters a deployment, its redrive or its cancel is recorded with.
pub struct Recording {
    /// The events table.
    pub log: DynamoDeployments,
    /// The seals, under the stack's key.
    pub seals: KmsSeals,
    /// The blueprints' files.
    pub payloads: S3Payloads,
}

impl Recording {
    /// The adapters, each setting (`OVERTURE_EVENTS_TABLE`, `OVERTURE_KMS_KEY`,
    /// `OVERTURE_SEALS_TABLE`, `OVERTURE_CUSTODY_TABLE`, `OVERTURE_PAYLOADS_BUCKET`) read through
    /// `setting`, which says what is missing in its caller's words.
    pub fn from_settings<E>(
        config: &aws_config::SdkConfig,
        setting: impl Fn(&str) -> Result<String, E>,
    ) -> Result<Self, E> {
        let dynamodb = aws_sdk_dynamodb::Client::new(config);
        let kms = aws_sdk_kms::Client::new(config);
        let key = setting("OVERTURE_KMS_KEY")?;
        let bucket = setting("OVERTURE_PAYLOADS_BUCKET")?;
        let custody = Arc::new(KmsTokenCustody::new(
            kms.clone(),
            dynamodb.clone(),
            setting("OVERTURE_CUSTODY_TABLE")?,
            key.clone(),
        ));
        Ok(Self {
            log: DynamoDeployments::new(
                dynamodb.clone(),
                setting("OVERTURE_EVENTS_TABLE")?,
                Arc::new(SystemClock),
            ),
            seals: KmsSeals::new(
                kms,
                dynamodb,
                setting("OVERTURE_SEALS_TABLE")?,
                key,
                custody,
                // Recording keeps no step state; the seal's other half is the runner's and the
                // purge's.
                KeptStates::new(crate::s3::client(config), bucket.clone()),
            ),
            payloads: S3Payloads::new(crate::s3::client(config), bucket),
        })
    }

    /// The ports submitting uses.
    pub fn ports(&self) -> SubmitPorts<'_> {
        SubmitPorts {
            log: &self.log,
            seals: &self.seals,
            payloads: &self.payloads,
            clock: &SystemClock,
        }
    }
}
