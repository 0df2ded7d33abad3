//! The runner as a Lambda, triggered by the jobs queue. Only wiring: the clients are built once
//! from the environment (the stack sets the variables), and each batch of job messages goes to
//! `overture_runner::on_job_messages`, whose answer names the messages SQS must keep
//! (`ReportBatchItemFailures`).
//!
//! Each attempt runs in a bubblewrap sandbox, exactly as embedded, with its workspace under
//! `$OVERTURE_WORK_DIR/sandboxes`: that is how `cargo lambda watch` runs the runner locally.
//! `OVERTURE_ENGINE_PROGRAM`, when set, is the `overture` program shown to the steps the engine
//! carries out itself (`servers`); without it those steps are refused, as their sandbox cannot
//! run them.

use std::path::PathBuf;
use std::sync::Arc;

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use lambda_runtime::{service_fn, LambdaEvent};
use overture_aws::custody::KmsTokenCustody;
use overture_aws::dynamodb::DynamoDeployments;
use overture_aws::function::{init_tracing, setting};
use overture_aws::kept::KeptStates;
use overture_aws::logs::S3AttemptLogs;
use overture_aws::s3::S3Payloads;
use overture_aws::seals::KmsSeals;
use overture_aws::sqs::SqsQueue;
use overture_kit::SystemClock;
use overture_openstack::CloudAccess;
use overture_runner::{on_job_messages, RunnerPorts};
use overture_sandbox::Bubblewrap;

/// The adapters, built once per execution environment.
struct Adapters {
    log: DynamoDeployments,
    sandbox: Bubblewrap,
    seals: KmsSeals,
    access: CloudAccess,
    logs: S3AttemptLogs,
    clock: SystemClock,
    payloads: S3Payloads,
    queue: SqsQueue,
}

impl Adapters {
    fn ports(&self) -> RunnerPorts<'_> {
        RunnerPorts {
            log: &self.log,
            sandbox: &self.sandbox,
            seals: &self.seals,
            kept: &self.seals,
            access: &self.access,
            logs: &self.logs,
            clock: &self.clock,
            payloads: &self.payloads,
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    init_tracing();
    let config = overture_aws::config::from_env().await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&config);
    let kms = aws_sdk_kms::Client::new(&config);
    let s3 = overture_aws::s3::client(&config);
    let clock = Arc::new(SystemClock);
    let key = setting("OVERTURE_KMS_KEY")?;
    let bucket = setting("OVERTURE_PAYLOADS_BUCKET")?;
    let custody = Arc::new(KmsTokenCustody::new(
        kms.clone(),
        dynamodb.clone(),
        setting("OVERTURE_CUSTODY_TABLE")?,
        key.clone(),
    ));
    let mut sandbox =
        Bubblewrap::new(PathBuf::from(setting("OVERTURE_WORK_DIR")?).join("sandboxes"));
    if let Ok(program) = std::env::var("OVERTURE_ENGINE_PROGRAM") {
        sandbox = sandbox.with_engine_program(PathBuf::from(program));
    }
    let adapters = Arc::new(Adapters {
        log: DynamoDeployments::new(
            dynamodb.clone(),
            setting("OVERTURE_EVENTS_TABLE")?,
            clock.clone(),
        ),
        sandbox,
        seals: KmsSeals::new(
            kms,
            dynamodb,
            setting("OVERTURE_SEALS_TABLE")?,
            key,
            custody.clone(),
            KeptStates::new(s3.clone(), bucket.clone()),
        ),
        access: CloudAccess::new(custody),
        logs: S3AttemptLogs::new(s3.clone(), bucket.clone()),
        clock: SystemClock,
        payloads: S3Payloads::new(s3, bucket),
        queue: SqsQueue::new(
            aws_sdk_sqs::Client::new(&config),
            setting("OVERTURE_JOBS_QUEUE_URL")?,
            clock,
        ),
    });
    lambda_runtime::run(service_fn(move |event: LambdaEvent<SqsEvent>| {
        let adapters = Arc::clone(&adapters);
        async move {
            let response: SqsBatchResponse = on_job_messages(
                &event.payload,
                &adapters.ports(),
                &adapters.queue,
                &adapters.queue,
            )
            .await;
            Ok::<_, lambda_runtime::Error>(response)
        }
    }))
    .await
}
