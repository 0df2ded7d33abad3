//! What the triggers function's Lambda binaries share: the adapters behind its ports, built
//! once per execution environment from the variables the stack sets.
//!
//! `triggers` (src/main.rs) hands the trigger events queue's batches to
//! `overture_triggers::queue::on_event_messages`; `deployment-ends` (src/ends.rs) hands the
//! events table's stream batches to `overture_triggers::ends::on_stream_records`, which
//! publishes each deployment's end on that queue.

use std::sync::Arc;

use overture_aws::dynamodb::DynamoDeployments;
use overture_aws::function::setting;
pub use overture_aws::function::{diagnostic, init_tracing};
use overture_aws::recording::Recording;
use overture_aws::triggers::{DynamoTriggerLedger, S3TriggerBundle, SqsEvents};
use overture_kit::SystemClock;
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

/// Everything `triggers` needs: the published bundle, the ledger, and what records a
/// deployment.
pub struct Adapters {
    bundle: S3TriggerBundle,
    ledger: DynamoTriggerLedger,
    recording: Recording,
    clock: SystemClock,
}

impl Adapters {
    /// The adapters named by the environment: the triggers table, the payloads bucket, and
    /// what records a deployment ([`Recording`]).
    pub async fn from_env() -> Result<Self, lambda_runtime::Error> {
        let config = overture_aws::config::from_env().await;
        Ok(Self {
            bundle: S3TriggerBundle::new(
                overture_aws::s3::client(&config),
                setting("OVERTURE_PAYLOADS_BUCKET")?,
            ),
            ledger: DynamoTriggerLedger::new(
                aws_sdk_dynamodb::Client::new(&config),
                setting("OVERTURE_TRIGGERS_TABLE")?,
            ),
            recording: Recording::from_settings(&config, setting)?,
            clock: SystemClock,
        })
    }

    /// The ports, borrowed.
    pub fn ports(&self) -> QueuePorts<'_> {
        QueuePorts {
            bundle: &self.bundle,
            ledger: &self.ledger,
            secrets: &ProcessEnvironment,
            submit: self.recording.ports(),
            clock: &self.clock,
        }
    }
}
