//! The runner as a Lambda, triggered by the jobs queue. Only wiring: the clients are built once
//! from the environment (the stack sets the variables), and each batch of job messages goes to
//! `overture_runner::on_job_messages`, whose answer names the messages SQS must keep
//! (`ReportBatchItemFailures`).
//!
//! On AWS (`OVERTURE_STEP_CLUSTER` set, as the stack sets it) each attempt runs as an ECS Fargate
//! task of its own (`overture_aws::fargate::FargateSteps`) on that cluster, with the task
//! definition `OVERTURE_STEP_TASK_DEFINITION`, in the subnets `OVERTURE_STEP_SUBNETS` and the
//! security groups `OVERTURE_STEP_SECURITY_GROUPS` (comma-separated; none, the VPC's default):
//! Lambda can make no namespaces and reuses its execution environment, so it is no sandbox.
//!
//! Without it each attempt runs in a bubblewrap sandbox, exactly as embedded, with its workspace
//! under `$OVERTURE_WORK_DIR/sandboxes`: that is how `cargo lambda watch` runs the runner locally.
//! `OVERTURE_ENGINE_PROGRAM`, when set, is the `overture` program shown to the steps the engine
//! carries out itself (`servers`); without it those steps are refused, as their sandbox cannot
//! run them.

use std::path::PathBuf;
use std::sync::Arc;

use aws_lambda_events::event::sqs::SqsEvent;
use lambda_runtime::{service_fn, LambdaEvent};
use overture_aws::custody::KmsTokenCustody;
use overture_aws::dynamodb::DynamoDeployments;
use overture_aws::fargate::{FargateSteps, StepTasks};
use overture_aws::function::{diagnostic, init_tracing, setting};
use overture_aws::kept::KeptStates;
use overture_aws::leases::DynamoLeases;
use overture_aws::logs::S3AttemptLogs;
use overture_aws::s3::S3Payloads;
use overture_aws::seals::KmsSeals;
use overture_aws::sqs::SqsQueue;
use overture_kit::SystemClock;
use overture_openstack::CloudAccess;
use overture_runner::{on_job_messages, LoopbackEgress, RunSandboxed, RunnerPorts};
use overture_sandbox::Bubblewrap;

/// The adapters, built once per execution environment.
struct Adapters {
    log: DynamoDeployments,
    sandbox: Box<dyn RunSandboxed>,
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
            sandbox: self.sandbox.as_ref(),
            seals: &self.seals,
            kept: &self.seals,
            access: &self.access,
            logs: &self.logs,
            clock: &self.clock,
            payloads: &self.payloads,
            // The API's tenants deploy here: none reaches the host's loopback (on Fargate a
            // task's loopback is its own, and a target there would not be the tenant's either).
            loopback: LoopbackEgress::Refused,
        }
    }
}

/// A comma-separated list setting; unset or empty, none.
fn list(name: &str) -> Vec<String> {
    std::env::var(name)
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(str::to_owned)
        .collect()
}

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    init_tracing();
    let config = overture_aws::config::from_env().await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&config);
    let dynamodb_leases = dynamodb.clone();
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
    let sandbox: Box<dyn RunSandboxed> = match std::env::var("OVERTURE_STEP_CLUSTER") {
        Ok(cluster) if !cluster.is_empty() => Box::new(FargateSteps::new(
            aws_sdk_ecs::Client::new(&config),
            s3.clone(),
            kms.clone(),
            bucket.clone(),
            key.clone(),
            StepTasks {
                cluster,
                task_definition: setting("OVERTURE_STEP_TASK_DEFINITION")?,
                subnets: list("OVERTURE_STEP_SUBNETS"),
                security_groups: list("OVERTURE_STEP_SECURITY_GROUPS"),
            },
        )),
        _ => {
            let mut sandbox =
                Bubblewrap::new(PathBuf::from(setting("OVERTURE_WORK_DIR")?).join("sandboxes"));
            if let Ok(program) = std::env::var("OVERTURE_ENGINE_PROGRAM") {
                sandbox = sandbox.with_engine_program(PathBuf::from(program));
            }
            Box::new(sandbox)
        }
    };
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
        access: CloudAccess::new(
            custody,
            Arc::new(DynamoLeases::new(
                dynamodb_leases,
                setting("OVERTURE_LEASES_TABLE")?,
            )),
        ),
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
            on_job_messages(
                &event.payload,
                &adapters.ports(),
                &adapters.queue,
                &adapters.queue,
            )
            .await
            .map_err(diagnostic)
        }
    }))
    .await
}
