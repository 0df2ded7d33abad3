//! What the orchestrator's Lambda binaries share: the adapters behind the orchestrator's ports,
//! built once per execution environment from the variables the stack sets.
//!
//! Each binary is only a trigger's wiring: `orchestrator` (src/main.rs) hands the events
//! table's stream batches to `overture_orchestrator::on_stream_records`, `timer` (src/timer.rs)
//! the timers queue's batches to `overture_orchestrator::on_timer_messages`, and `dead-letters`
//! (src/dead_letters.rs) the jobs' dead-letter queue's batches to
//! `overture_orchestrator::on_dead_letters`. Each is a function of its own in the stack, so
//! that each consumes only its own queue.

use std::sync::Arc;

use overture_aws::custody::KmsTokenCustody;
use overture_aws::dynamodb::DynamoDeployments;
use overture_aws::function::setting;
pub use overture_aws::function::{diagnostic, init_tracing};
use overture_aws::kept::KeptStates;
use overture_aws::leases::DynamoLeases;
use overture_aws::read_models::DynamoReadModels;
use overture_aws::seals::KmsSeals;
use overture_aws::sqs::{SqsQueue, SqsWork};
use overture_kit::SystemClock;
use overture_openstack::CloudAccess;
use overture_orchestrator::queued::QueueOn;
use overture_orchestrator::{OrchestratorPorts, RegistryDirectory};

/// The adapters, built once per execution environment.
pub struct Adapters {
    log: DynamoDeployments,
    work: SqsWork,
    seals: KmsSeals,
    access: CloudAccess,
    registry: RegistryDirectory<DynamoReadModels>,
    clock: SystemClock,
}

impl Adapters {
    /// The adapters named by the environment: the events, custody and seals tables, the read
    /// models' tables (the service registry), the KMS key, the jobs and the timers queues.
    pub async fn from_env() -> Result<Self, lambda_runtime::Error> {
        let config = overture_aws::config::from_env().await;
        let dynamodb = aws_sdk_dynamodb::Client::new(&config);
        let dynamodb_leases = dynamodb.clone();
        let dynamodb_registry = dynamodb.clone();
        let kms = aws_sdk_kms::Client::new(&config);
        let sqs = aws_sdk_sqs::Client::new(&config);
        let clock = Arc::new(SystemClock);
        let key = setting("OVERTURE_KMS_KEY")?;
        let custody = Arc::new(KmsTokenCustody::new(
            kms.clone(),
            dynamodb.clone(),
            setting("OVERTURE_CUSTODY_TABLE")?,
            key.clone(),
        ));
        let queue = |url| SqsQueue::new(sqs.clone(), url, clock.clone());
        Ok(Self {
            log: DynamoDeployments::new(
                dynamodb.clone(),
                setting("OVERTURE_EVENTS_TABLE")?,
                clock.clone(),
            ),
            work: QueueOn {
                attempts: queue(setting("OVERTURE_JOBS_QUEUE_URL")?),
                timers: queue(setting("OVERTURE_TIMERS_QUEUE_URL")?),
            },
            seals: KmsSeals::new(
                kms,
                dynamodb,
                setting("OVERTURE_SEALS_TABLE")?,
                key,
                custody.clone(),
                // The purge deletes what the deployment's steps kept there.
                KeptStates::new(
                    overture_aws::s3::client(&config),
                    setting("OVERTURE_PAYLOADS_BUCKET")?,
                ),
            ),
            access: CloudAccess::new(
                custody,
                Arc::new(DynamoLeases::new(
                    dynamodb_leases,
                    setting("OVERTURE_LEASES_TABLE")?,
                )),
            ),
            registry: RegistryDirectory(DynamoReadModels::new(
                dynamodb_registry,
                setting("OVERTURE_DEPLOYMENTS_TABLE")?,
                setting("OVERTURE_TENANTS_TABLE")?,
            )),
            clock: SystemClock,
        })
    }

    /// The orchestrator's ports on these adapters.
    pub fn ports(&self) -> OrchestratorPorts<'_> {
        OrchestratorPorts {
            log: &self.log,
            work: &self.work,
            secrets: &self.seals,
            access: &self.access,
            services: &self.registry,
            clock: &self.clock,
        }
    }

    /// The timers queue, where a timer delivered before it is due goes back.
    pub fn timers(&self) -> &SqsQueue {
        &self.work.timers
    }
}
