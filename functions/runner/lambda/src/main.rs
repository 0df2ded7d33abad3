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
//! run them. Such a runner first checks that the machine has what a sandbox needs
//! (`Bubblewrap::preflight`) and exits with code 3 naming what is missing; then, unless another
//! live runner uses the same work directory, it clears what a killed runner left there (its
//! sandboxes' processes, cgroups and workspaces, keeping a killed Terraform run's state) and
//! says so in a log line.

use std::path::{Path, PathBuf};
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
use overture_sandbox::{Bubblewrap, RootHold};

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
    let cluster = std::env::var("OVERTURE_STEP_CLUSTER").unwrap_or_default();
    // First of all: a machine that cannot run a sandbox is told before anything is built.
    let bubblewrap = match cluster.is_empty() {
        true => Some(bubblewrap()?),
        false => None,
    };
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
    let sandbox: Box<dyn RunSandboxed> = match &bubblewrap {
        Some(sandbox) => Box::new(sandbox.clone()),
        None => Box::new(FargateSteps::new(
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
    // Held for the process's life: a runner starting beside this one leaves its sandboxes be.
    let _hold = match &bubblewrap {
        Some(sandbox) => Some(clear_leftovers(sandbox, &adapters).await?),
        None => None,
    };
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

/// The bubblewrap sandbox under `$OVERTURE_WORK_DIR/sandboxes`; exits with code 3, naming what
/// is missing, on a machine that lacks what a sandbox needs.
fn bubblewrap() -> Result<Bubblewrap, lambda_runtime::Error> {
    let mut sandbox =
        Bubblewrap::new(PathBuf::from(setting("OVERTURE_WORK_DIR")?).join("sandboxes"));
    if let Ok(program) = std::env::var("OVERTURE_ENGINE_PROGRAM") {
        sandbox = sandbox.with_engine_program(PathBuf::from(program));
    }
    if let Err(unready) = sandbox.preflight() {
        // Every attempt would fail as a sandbox error and be retried in vain.
        eprintln!("error: {unready}");
        std::process::exit(3);
    }
    Ok(sandbox)
}

/// Clears what a killed runner left under the sandbox's root, unless another live runner uses
/// it, keeping a killed Terraform run's state as the embedded engine's recovery does.
async fn clear_leftovers(
    sandbox: &Bubblewrap,
    adapters: &Adapters,
) -> Result<RootHold, lambda_runtime::Error> {
    let hold = sandbox.hold_root()?;
    if !hold.alone() {
        tracing::info!("another live runner uses this work directory; its sandboxes are left be");
        return Ok(hold);
    }
    let mut cleared = sandbox.kill_leftovers()?;
    let states = sandbox.leftover_files(Path::new(overture_runner::terraform::STATE_FILE))?;
    for (id, state) in states {
        let kept = overture_runner::terraform::keep_leftover_state(
            &id,
            &state,
            &adapters.log,
            &adapters.seals,
        )
        .await?;
        if kept {
            tracing::info!(sandbox = %id, "kept the Terraform state a killed run left");
        }
    }
    cleared.workspaces = sandbox.remove_leftovers()?;
    if !cleared.is_empty() {
        tracing::warn!(%cleared, "cleared the sandboxes a killed runner left");
    }
    Ok(hold.share()?)
}
