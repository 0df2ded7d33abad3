//! What the triggers function's Lambda binaries share: the adapters behind its ports, built
//! once per execution environment from the variables the stack sets.
//!
//! `triggers` (src/main.rs) hands the trigger events queue's batches to
//! `overture_triggers::queue::on_event_messages`; `deployment-ends` (src/ends.rs) hands the
//! events table's stream batches to `overture_triggers::ends::on_stream_records`, which
//! publishes each deployment's end on that queue.

use std::sync::Arc;

use overture_aws::custody::KmsTokenCustody;
use overture_aws::dynamodb::DynamoDeployments;
use overture_aws::function::setting;
pub use overture_aws::function::{diagnostic, init_tracing};
use overture_aws::kept::KeptStates;
use overture_aws::s3::S3Payloads;
use overture_aws::seals::KmsSeals;
use overture_aws::triggers::{DynamoTriggerLedger, S3TriggerBundle, SqsEvents};
use overture_kit::SystemClock;
use overture_submit::SubmitPorts;
use overture_triggers::ends::EndPorts;
use overture_triggers::queue::QueuePorts;
use overture_triggers::ProcessEnvironment;

/// The events table, and the queue ends are published on: what `deployment-ends` needs.
pub struct EndAdapters {
    log: DynamoDeployments,
    events: SqsEvents,
}

impl EndAdapters {
    /// The adapters named by the environment: the events table and the trigger events queue.
    pub async fn from_env() -> Result<Self, lambda_runtime::Error> {
        let config = overture_aws::config::from_env().await;
        Ok(Self {
            log: DynamoDeployments::new(
                aws_sdk_dynamodb::Client::new(&config),
                setting("OVERTURE_EVENTS_TABLE")?,
                Arc::new(SystemClock),
            ),
            events: SqsEvents::new(
                aws_sdk_sqs::Client::new(&config),
                setting("OVERTURE_TRIGGER_EVENTS_QUEUE_URL")?,
            ),
        })
    }

    /// The ports, borrowed.
    pub fn ports(&self) -> EndPorts<'_> {
        EndPorts {
            log: &self.log,
            events: &self.events,
        }
    }
}

/// Everything `triggers` needs: the published bundle, the ledger, and what submit needs.
pub struct Adapters {
    bundle: S3TriggerBundle,
    ledger: DynamoTriggerLedger,
    log: DynamoDeployments,
    seals: KmsSeals,
    payloads: S3Payloads,
    clock: SystemClock,
}

impl Adapters {
    /// The adapters named by the environment: the triggers, events, custody and seals tables,
    /// the KMS key and the payloads bucket.
    pub async fn from_env() -> Result<Self, lambda_runtime::Error> {
        let config = overture_aws::config::from_env().await;
        let dynamodb = aws_sdk_dynamodb::Client::new(&config);
        let kms = aws_sdk_kms::Client::new(&config);
        let s3 = overture_aws::s3::client(&config);
        let bucket = setting("OVERTURE_PAYLOADS_BUCKET")?;
        let key = setting("OVERTURE_KMS_KEY")?;
        let custody = Arc::new(KmsTokenCustody::new(
            kms.clone(),
            dynamodb.clone(),
            setting("OVERTURE_CUSTODY_TABLE")?,
            key.clone(),
        ));
        Ok(Self {
            bundle: S3TriggerBundle::new(s3.clone(), bucket.clone()),
            ledger: DynamoTriggerLedger::new(dynamodb.clone(), setting("OVERTURE_TRIGGERS_TABLE")?),
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
                // Submitting keeps no step state; the seal's other half is the runner's.
                KeptStates::new(s3.clone(), bucket.clone()),
            ),
            payloads: S3Payloads::new(s3, bucket),
            clock: SystemClock,
        })
    }

    /// The ports, borrowed.
    pub fn ports(&self) -> QueuePorts<'_> {
        QueuePorts {
            bundle: &self.bundle,
            ledger: &self.ledger,
            secrets: &ProcessEnvironment,
            submit: SubmitPorts {
                log: &self.log,
                seals: &self.seals,
                payloads: &self.payloads,
            },
            clock: &self.clock,
        }
    }
}
