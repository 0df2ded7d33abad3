//! The orchestrator as a Lambda, triggered by the events table's stream. Only wiring: the
//! clients are built once from the environment (the stack sets the variables), and each batch
//! goes to `overture_orchestrator::on_stream_records`.

use std::sync::Arc;

use aws_lambda_events::event::dynamodb::Event;
use aws_lambda_events::event::streams::DynamoDbEventResponse;
use lambda_runtime::{service_fn, LambdaEvent};
use overture_aws::custody::KmsTokenCustody;
use overture_aws::dynamodb::DynamoDeployments;
use overture_aws::kept::KeptStates;
use overture_aws::seals::KmsSeals;
use overture_aws::sqs::{SqsQueue, SqsWork};
use overture_infra::clock::SystemClock;
use overture_infra::openstack::CloudAccess;
use overture_orchestrator::queued::QueueOn;
use overture_orchestrator::{on_stream_records, OrchestratorPorts};

/// The adapters, built once per execution environment.
struct Adapters {
    log: DynamoDeployments,
    work: SqsWork,
    seals: KmsSeals,
    access: CloudAccess,
    clock: SystemClock,
}

impl Adapters {
    fn ports(&self) -> OrchestratorPorts<'_> {
        OrchestratorPorts {
            log: &self.log,
            work: &self.work,
            secrets: &self.seals,
            access: &self.access,
            clock: &self.clock,
        }
    }
}

fn setting(name: &str) -> Result<String, lambda_runtime::Error> {
    std::env::var(name).map_err(|_| format!("{name} is not set; the stack sets it").into())
}

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("OVERTURE_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .without_time()
        .init();
    let config = overture_aws::config::from_env().await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&config);
    let kms = aws_sdk_kms::Client::new(&config);
    let clock = Arc::new(SystemClock);
    let key = setting("OVERTURE_KMS_KEY")?;
    let custody = Arc::new(KmsTokenCustody::new(
        kms.clone(),
        dynamodb.clone(),
        setting("OVERTURE_CUSTODY_TABLE")?,
        key.clone(),
    ));
    let adapters = Arc::new(Adapters {
        log: DynamoDeployments::new(
            dynamodb.clone(),
            setting("OVERTURE_EVENTS_TABLE")?,
            clock.clone(),
        ),
        work: QueueOn(SqsQueue::new(
            aws_sdk_sqs::Client::new(&config),
            setting("OVERTURE_JOBS_QUEUE_URL")?,
            clock.clone(),
        )),
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
        access: CloudAccess::new(custody),
        clock: SystemClock,
    });
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Event>| {
        let adapters = Arc::clone(&adapters);
        async move {
            let response: DynamoDbEventResponse =
                on_stream_records(&event.payload, &adapters.ports()).await;
            Ok::<_, lambda_runtime::Error>(response)
        }
    }))
    .await
}
