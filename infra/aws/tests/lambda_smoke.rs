//! The function binaries as AWS runs them: started by `cargo lambda watch` (the Lambda runtime
//! API, locally) and sent one real event of their trigger, against the local AWS emulator: the
//! orchestrator and the projector, each sent a DynamoDB stream record of a requested deployment;
//! the runner, sent the SQS message of a step's first attempt as it was received from the queue;
//! the timer, sent a timer at a passed grace deadline; the dead letters, sent a dead-lettered job;
//! the submit function, sent requests through its function URL unsigned (refused) and as Lambda
//! hands them on once their signature is checked (with the signer); and the api function, the
//! HTTP API's reads and a cancel through its function URL with tokens of the local cloud's
//! Keystone.

mod support;

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use overture_aws::custody::{create_custody_table, KmsTokenCustody};
use overture_aws::dynamodb::{create_events_table, DynamoDeployments};
use overture_aws::kept::KeptStates;
use overture_aws::leases::{create_leases_table, DynamoLeases};
use overture_aws::logs::S3AttemptLogs;
use overture_aws::read_models::{create_read_model_tables, DynamoReadModels};
use overture_aws::s3::create_payloads_bucket;
use overture_aws::seals::{create_seals_table, KmsSeals};
use overture_aws::sqs::{create_queue, SqsQueue};
use overture_domain::blueprint::parse;
use overture_events::{DeploymentEvent, DeploymentId, Envelope, ErrorClass};
use overture_kit::SystemClock;
use overture_kit::{Cause, DeploymentLog, ReadStream};
use overture_openstack::CloudAccess;
use overture_orchestrator::queued::QueueOn;
use overture_orchestrator::{orchestrate, OrchestratorPorts, Since};
use overture_projector::DeploymentViews;
use overture_kit::query::AttemptLog;
use serde_json::{json, Value};

/// How long the first invocation may take: `cargo lambda watch` builds the function first.
const FIRST_INVOCATION: Duration = Duration::from_secs(600);
const EVENTS: &str = "smoke-events";
const PAYLOADS: &str = "smoke-payloads";

/// `cargo lambda watch` in its own process group, ended (the group, by its id) when dropped;
/// what it and the functions print is kept in `output` (removed when dropped).
struct Watch {
    child: Child,
    port: u16,
    output: std::path::PathBuf,
}

impl Drop for Watch {
    fn drop(&mut self) {
        if let Ok(group) = i32::try_from(self.child.id()) {
            // SAFETY: signals the process group this test made for the child it started.
            unsafe { libc::kill(-group, libc::SIGTERM) };
        }
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.output);
    }
}

/// Starts `cargo lambda watch` on a free port of 127.0.0.1, the functions pointed at the
/// emulator and given `settings`, as the stack gives them.
fn watch(settings: &[(&str, &str)]) -> Watch {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let output = std::env::temp_dir().join(format!("overture-lambda-watch-{port}.log"));
    let printed = std::fs::File::create(&output).expect("the watch's output file");
    let mut command = Command::new("cargo");
    command
        .args(["lambda", "watch", "--ignore-changes"])
        .args([
            "--invoke-address",
            "127.0.0.1",
            "--invoke-port",
            &port.to_string(),
        ])
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .envs([
            ("AWS_ENDPOINT_URL", support::emulator()),
            ("AWS_REGION", "eu-west-1"),
            ("AWS_ACCESS_KEY_ID", "overture-local"),
            ("AWS_SECRET_ACCESS_KEY", "overture-local"),
            ("AWS_EC2_METADATA_DISABLED", "true"),
        ])
        .envs(settings.iter().copied())
        .stdin(Stdio::null())
        .stdout(printed.try_clone().expect("the output file"))
        .stderr(printed)
        .process_group(0);
    let child = command
        .spawn()
        .expect("cargo lambda (scripts/setup.sh installs it)");
    Watch {
        child,
        port,
        output,
    }
}

/// POSTs `body` to `path` on the watch, once it listens (cargo lambda starts listening a moment
/// after it starts; the first call also waits for the function's build).
async fn post(port: u16, path: &str, body: &Value) -> reqwest::Response {
    let url = format!("http://127.0.0.1:{port}{path}");
    let client = reqwest::Client::new();
    let started = Instant::now();
    loop {
        match client
            .post(&url)
            .json(body)
            .timeout(FIRST_INVOCATION)
            .send()
            .await
        {
            Ok(answer) => return answer,
            Err(error) if error.is_connect() && started.elapsed() < FIRST_INVOCATION => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(error) => panic!("POST {path} failed: {error}"),
        }
    }
}

/// Invokes `function` with `event` and returns its answer, which must be a success.
async fn invoke(watch: &Watch, function: &str, event: &Value) -> Value {
    let path = format!("/2015-03-31/functions/{function}/invocations");
    let answer = post(watch.port, &path, event).await;
    let status = answer.status();
    let body: Value = answer.json().await.expect("a JSON answer");
    assert!(status.is_success(), "{function}: {status}: {body}");
    body
}

/// A deployment of one `noop` step requested on the log, as submit records it; its first event.
async fn requested(log: &DynamoDeployments) -> (DeploymentId, Envelope) {
    requested_with(log, "name: smoke\nsteps:\n  build: { run: noop }\n").await
}

/// A deployment of `blueprint` requested on the log, as submit records it; its first event.
async fn requested_with(log: &DynamoDeployments, blueprint: &str) -> (DeploymentId, Envelope) {
    requested_in(log, blueprint, None).await
}

/// The same, made with a token of `cloud`'s account.
async fn requested_in(
    log: &DynamoDeployments,
    blueprint: &str,
    cloud: Option<overture_events::CloudAccount>,
) -> (DeploymentId, Envelope) {
    let deployment = DeploymentId::from_uuid(uuid::Uuid::now_v7());
    let requested = DeploymentEvent::DeploymentRequested {
        triggered_by: None,
        tenant: "smoke-tenant".into(),
        requested_by: "ada".into(),
        trigger: "cli".into(),
        source: "smoke.yaml".into(),
        blueprint: parse(blueprint).expect("valid").snapshot,
        blueprint_hash: "h".into(),
        params: BTreeMap::new(),
        cloud,
        name: None,
    };
    let cause = Cause::new("submit", deployment, uuid::Uuid::now_v7());
    log.append(deployment, "smoke-tenant", None, vec![requested], &cause)
        .await
        .expect("requested");
    let first = log
        .read_stream(deployment, 0)
        .await
        .expect("read")
        .remove(0);
    (deployment, first)
}

/// The stream batch DynamoDB delivers for that event: its item's new image.
fn stream_batch(envelope: &Envelope) -> Value {
    let revision = envelope.revision.to_string();
    json!({
        "Records": [{
            "eventID": "1",
            "eventName": "INSERT",
            "eventVersion": "1.1",
            "eventSource": "aws:dynamodb",
            "awsRegion": "eu-west-1",
            "dynamodb": {
                "ApproximateCreationDateTime": 1800000000,
                "Keys": {
                    "stream": { "S": envelope.stream },
                    "revision": { "N": revision }
                },
                "NewImage": {
                    "stream": { "S": envelope.stream },
                    "revision": { "N": revision },
                    "id": { "S": envelope.id.to_string() },
                    "type": { "S": envelope.event_type },
                    "data": { "S": envelope.data.to_string() },
                    "metadata": { "S": serde_json::to_string(&envelope.metadata).expect("json") }
                },
                "SequenceNumber": "100",
                "SizeBytes": 100,
                "StreamViewType": "NEW_IMAGE"
            },
            "eventSourceARN": "arn:aws:dynamodb:eu-west-1:123456789012:table/smoke-events/stream/1"
        }]
    })
}

async fn events_log(dynamodb: &aws_sdk_dynamodb::Client) -> DynamoDeployments {
    create_events_table(dynamodb, EVENTS).await.expect("table");
    DynamoDeployments::new(dynamodb.clone(), EVENTS, Arc::new(SystemClock))
}

#[tokio::test]
async fn the_orchestrator_lambda_moves_a_deployment_on_from_a_stream_record() {
    let config = overture_aws::config::for_endpoint(support::emulator(), "eu-west-1").await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&config);
    let sqs = aws_sdk_sqs::Client::new(&config);
    let kms = aws_sdk_kms::Client::new(&config);
    let log = events_log(&dynamodb).await;
    create_custody_table(&dynamodb, "smoke-custody")
        .await
        .expect("table");
    create_leases_table(&dynamodb, "smoke-leases")
        .await
        .expect("table");
    create_seals_table(&dynamodb, "smoke-seals")
        .await
        .expect("table");
    let queue = create_queue(&sqs, "smoke-jobs").await.expect("queue");
    let timers = create_queue(&sqs, "smoke-timers").await.expect("queue");
    create_payloads_bucket(&overture_aws::s3::client(&config), PAYLOADS)
        .await
        .expect("bucket");
    create_read_model_tables(&dynamodb, ORCHESTRATOR_VIEWS, ORCHESTRATOR_TENANTS)
        .await
        .expect("tables");
    let key = support::kms_key(&kms).await;
    let (deployment, first) = requested(&log).await;

    let watch = watch(&[
        ("OVERTURE_EVENTS_TABLE", EVENTS),
        ("OVERTURE_DEPLOYMENTS_TABLE", ORCHESTRATOR_VIEWS),
        ("OVERTURE_TENANTS_TABLE", ORCHESTRATOR_TENANTS),
        ("OVERTURE_CUSTODY_TABLE", "smoke-custody"),
        ("OVERTURE_LEASES_TABLE", "smoke-leases"),
        ("OVERTURE_SEALS_TABLE", "smoke-seals"),
        ("OVERTURE_KMS_KEY", key),
        ("OVERTURE_JOBS_QUEUE_URL", &queue),
        ("OVERTURE_PAYLOADS_BUCKET", PAYLOADS),
        ("OVERTURE_TIMERS_QUEUE_URL", &timers),
    ]);
    let answer = invoke(&watch, "orchestrator", &stream_batch(&first)).await;
    assert_eq!(answer["batchItemFailures"], json!([]), "{answer}");

    // It scheduled `build` and queued its first attempt.
    let loaded = log.load(deployment).await.expect("load");
    assert_eq!(
        loaded.state.steps["build"].status,
        overture_domain::StepStatus::Scheduled
    );
    let received = sqs
        .receive_message()
        .queue_url(&queue)
        .wait_time_seconds(5)
        .send()
        .await
        .expect("receive");
    let bodies: Vec<&str> = received
        .messages()
        .iter()
        .filter_map(|m| m.body())
        .collect();
    assert!(
        bodies
            .iter()
            .any(|b| b.contains("build") && b.contains(&deployment.to_string())),
        "the attempt was queued: {bodies:?}"
    );
}

#[tokio::test]
async fn the_projector_lambda_folds_a_stream_record_into_the_read_models() {
    let config = overture_aws::config::for_endpoint(support::emulator(), "eu-west-1").await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&config);
    let log = events_log(&dynamodb).await;
    create_read_model_tables(&dynamodb, "smoke-deployments", "smoke-tenants")
        .await
        .expect("tables");
    // Where it would wake deployments that need a service; this record registers none.
    let sqs = aws_sdk_sqs::Client::new(&config);
    let timers = create_queue(&sqs, "smoke-projector-timers")
        .await
        .expect("queue");
    let (deployment, first) = requested(&log).await;

    let watch = watch(&[
        ("OVERTURE_EVENTS_TABLE", EVENTS),
        ("OVERTURE_DEPLOYMENTS_TABLE", "smoke-deployments"),
        ("OVERTURE_TENANTS_TABLE", "smoke-tenants"),
        ("OVERTURE_TIMERS_QUEUE_URL", &timers),
    ]);
    let batch = stream_batch(&first);
    let answer = invoke(&watch, "projector", &batch).await;
    assert_eq!(answer["batchItemFailures"], json!([]), "{answer}");
    let again = invoke(&watch, "projector", &batch).await;
    assert_eq!(again["batchItemFailures"], json!([]), "{again}");

    let views = DynamoReadModels::new(dynamodb, "smoke-deployments", "smoke-tenants");
    let view = views
        .view(deployment)
        .await
        .expect("read")
        .expect("the deployment's view");
    assert_eq!(view.tenant, "smoke-tenant");
    assert_eq!(view.revision, 0);
    let tenant = views
        .tenant("smoke-tenant")
        .await
        .expect("read")
        .expect("the tenant's summary");
    assert_eq!(
        (tenant.total, tenant.running),
        (1, 1),
        "counted once, though delivered twice"
    );
}

/// A deployment of two steps on the log: `lint` failed for good a minute ago while `build` ran,
/// and the grace period given to `build` ended a second ago.
async fn past_its_grace_deadline(log: &DynamoDeployments) -> DeploymentId {
    let deployment = DeploymentId::from_uuid(uuid::Uuid::now_v7());
    let now = chrono::Utc::now();
    let minute_ago = now - chrono::TimeDelta::minutes(1);
    let step = |name: &str| name.to_owned();
    let history = vec![
        DeploymentEvent::DeploymentRequested {
            triggered_by: None,
            tenant: "smoke-tenant".into(),
            requested_by: "ada".into(),
            trigger: "cli".into(),
            source: "smoke.yaml".into(),
            blueprint: parse(
                "name: smoke\nsteps:\n  build: { run: noop }\n  lint: { run: noop }\n",
            )
            .expect("valid")
            .snapshot,
            blueprint_hash: "h".into(),
            params: BTreeMap::new(),
            cloud: None,
            name: None,
        },
        DeploymentEvent::StepScheduled {
            step: step("build"),
            attempt: 1,
            not_before: minute_ago,
        },
        DeploymentEvent::StepScheduled {
            step: step("lint"),
            attempt: 1,
            not_before: minute_ago,
        },
        DeploymentEvent::StepStarted {
            step: step("build"),
            attempt: 1,
            sandbox: "build-1".into(),
            lease_until: Some(now + chrono::TimeDelta::minutes(10)),
            fingerprint: None,
        },
        DeploymentEvent::StepStarted {
            step: step("lint"),
            attempt: 1,
            sandbox: "lint-1".into(),
            lease_until: Some(now + chrono::TimeDelta::minutes(10)),
            fingerprint: None,
        },
        DeploymentEvent::StepAttemptFailed {
            step: step("lint"),
            attempt: 1,
            error_class: ErrorClass::StepFailed,
            exit_code: Some(1),
            message: "boom".into(),
            duration_ms: 1,
        },
        DeploymentEvent::StepFailed {
            step: step("lint"),
            attempts: 1,
            error_class: ErrorClass::StepFailed,
        },
        DeploymentEvent::FailureGracePeriodStarted {
            failed_step: step("lint"),
            deadline: now - chrono::TimeDelta::seconds(1),
        },
    ];
    let cause = Cause::new("runner", deployment, uuid::Uuid::now_v7());
    log.append(deployment, "smoke-tenant", None, history, &cause)
        .await
        .expect("recorded");
    deployment
}

/// An SQS batch of one message, as Lambda delivers it from `queue`.
fn sqs_batch(queue: &str, body: &str, receives: u32) -> Value {
    json!({
        "Records": [{
            "messageId": "m-1",
            "receiptHandle": "receipt-m-1",
            "body": body,
            "md5OfBody": "00000000000000000000000000000000",
            "attributes": {
                "ApproximateReceiveCount": receives.to_string(),
                "SentTimestamp": "1800000000000",
                "SenderId": "AROAIWPX5BD2BHG722MW4:overture-orchestrator",
                "ApproximateFirstReceiveTimestamp": "1800000000100"
            },
            "messageAttributes": {},
            "eventSourceARN": format!("arn:aws:sqs:eu-west-1:123456789012:{queue}"),
            "eventSource": "aws:sqs",
            "awsRegion": "eu-west-1"
        }]
    })
}

/// The read models' tables the orchestrator's functions read the service registry from.
const ORCHESTRATOR_VIEWS: &str = "smoke-orchestrator-deployments";
const ORCHESTRATOR_TENANTS: &str = "smoke-orchestrator-tenants";

/// The tables, queues and key the orchestrator's functions are given, and their settings.
struct OrchestratorStack {
    log: DynamoDeployments,
    sqs: aws_sdk_sqs::Client,
    jobs: String,
    timers: String,
    key: &'static str,
}

impl OrchestratorStack {
    async fn new() -> Self {
        let config = overture_aws::config::for_endpoint(support::emulator(), "eu-west-1").await;
        let dynamodb = aws_sdk_dynamodb::Client::new(&config);
        let sqs = aws_sdk_sqs::Client::new(&config);
        let kms = aws_sdk_kms::Client::new(&config);
        let log = events_log(&dynamodb).await;
        create_custody_table(&dynamodb, "smoke-custody")
            .await
            .expect("table");
        create_leases_table(&dynamodb, "smoke-leases")
            .await
            .expect("table");
        create_seals_table(&dynamodb, "smoke-seals")
            .await
            .expect("table");
        // Queues of its own: another test receiving from them would hide what this one queued.
        let own = &uuid::Uuid::now_v7().simple().to_string()[20..];
        let jobs = create_queue(&sqs, &format!("smoke-jobs-{own}"))
            .await
            .expect("queue");
        let timers = create_queue(&sqs, &format!("smoke-timers-{own}"))
            .await
            .expect("queue");
        create_payloads_bucket(&overture_aws::s3::client(&config), PAYLOADS)
            .await
            .expect("bucket");
        create_read_model_tables(&dynamodb, ORCHESTRATOR_VIEWS, ORCHESTRATOR_TENANTS)
            .await
            .expect("tables");
        let key = support::kms_key(&kms).await;
        Self {
            log,
            sqs,
            jobs,
            timers,
            key,
        }
    }

    fn watch(&self) -> Watch {
        watch(&[
            ("OVERTURE_EVENTS_TABLE", EVENTS),
            ("OVERTURE_DEPLOYMENTS_TABLE", ORCHESTRATOR_VIEWS),
            ("OVERTURE_TENANTS_TABLE", ORCHESTRATOR_TENANTS),
            ("OVERTURE_CUSTODY_TABLE", "smoke-custody"),
            ("OVERTURE_LEASES_TABLE", "smoke-leases"),
            ("OVERTURE_SEALS_TABLE", "smoke-seals"),
            ("OVERTURE_KMS_KEY", self.key),
            ("OVERTURE_JOBS_QUEUE_URL", &self.jobs),
            ("OVERTURE_TIMERS_QUEUE_URL", &self.timers),
            ("OVERTURE_PAYLOADS_BUCKET", PAYLOADS),
        ])
    }

    async fn types(&self, deployment: DeploymentId) -> Vec<String> {
        self.log
            .read_stream(deployment, 0)
            .await
            .expect("read")
            .into_iter()
            .map(|e| e.event_type)
            .collect()
    }
}

#[tokio::test]
async fn the_timer_lambda_ends_a_deployment_whose_grace_deadline_has_passed() {
    let stack = OrchestratorStack::new().await;
    let deployment = past_its_grace_deadline(&stack.log).await;
    let wake = overture_orchestrator::queued::wake_job(
        deployment,
        chrono::Utc::now() - chrono::TimeDelta::seconds(1),
        uuid::Uuid::now_v7(),
    )
    .expect("a timer");
    let body = wake.to_message().expect("its message");

    let watch = stack.watch();
    let answer = invoke(&watch, "timer", &sqs_batch("smoke-timers", &body, 1)).await;
    assert_eq!(answer["batchItemFailures"], json!([]), "{answer}");

    let types = stack.types(deployment).await;
    assert_eq!(
        types[8..],
        ["StepAbandoned", "SecretsPurged", "DeploymentFailed"],
        "build, still running at the deadline, is abandoned and the deployment ends: {types:?}"
    );

    // A batch none of whose messages can ever be handled fails the invocation, and the error
    // Lambda reports names that class, not a Rust type.
    let path = "/2015-03-31/functions/timer/invocations";
    let answer = post(
        watch.port,
        path,
        &sqs_batch("smoke-timers", "not a timer", 1),
    )
    .await;
    assert!(!answer.status().is_success(), "{}", answer.status());
    let error: Value = answer.json().await.expect("a JSON answer");
    assert_eq!(error["errorType"], "NonRetryable", "{error}");
}

#[tokio::test]
async fn the_dead_letters_lambda_records_a_dead_lettered_attempt_and_queues_its_retry() {
    let stack = OrchestratorStack::new().await;
    let (deployment, _) = requested(&stack.log).await;
    let scheduled = DeploymentEvent::StepScheduled {
        step: "build".into(),
        attempt: 1,
        not_before: chrono::Utc::now(),
    };
    let cause = Cause::new("orchestrator", deployment, uuid::Uuid::now_v7());
    stack
        .log
        .append(deployment, "smoke-tenant", Some(0), vec![scheduled], &cause)
        .await
        .expect("scheduled");
    let attempt = overture_orchestrator::WaitingAttempt {
        step: "build".into(),
        attempt: 1,
        not_before: chrono::Utc::now(),
    };
    let job =
        overture_orchestrator::queued::attempt_jobs(deployment, &[attempt], cause.causation_id)
            .expect("a job")
            .remove(0);
    let body = job.to_message().expect("its message");

    let watch = stack.watch();
    let answer = invoke(
        &watch,
        "dead-letters",
        &sqs_batch("smoke-jobs-dlq", &body, 6),
    )
    .await;
    assert_eq!(answer["batchItemFailures"], json!([]), "{answer}");

    let types = stack.types(deployment).await;
    assert_eq!(
        types[2..],
        [
            "StepJobDeadLettered",
            "StepAttemptFailed",
            "StepRetryScheduled"
        ],
        "{types:?}"
    );
    let received = stack
        .sqs
        .receive_message()
        .queue_url(&stack.jobs)
        .max_number_of_messages(10)
        .wait_time_seconds(5)
        .send()
        .await
        .expect("receive");
    let retry = format!("run/{deployment}/build/2");
    assert!(
        received
            .messages()
            .iter()
            .filter_map(|m| m.body())
            .any(|b| b.contains(&retry)),
        "the retry was queued: {:?}",
        received.messages()
    );
}

/// The SQS event Lambda delivers for `message`, as it was received from the queue named `queue`.
fn sqs_event(message: &aws_sdk_sqs::types::Message, queue: &str) -> Value {
    let attributes: serde_json::Map<String, Value> = message
        .attributes()
        .into_iter()
        .flatten()
        .map(|(name, value)| (name.as_str().to_owned(), Value::from(value.as_str())))
        .collect();
    json!({
        "Records": [{
            "messageId": message.message_id(),
            "receiptHandle": message.receipt_handle(),
            "body": message.body(),
            "attributes": attributes,
            "messageAttributes": {},
            "md5OfBody": message.md5_of_body(),
            "eventSource": "aws:sqs",
            "eventSourceARN": format!("arn:aws:sqs:eu-west-1:123456789012:{queue}"),
            "awsRegion": "eu-west-1"
        }]
    })
}

/// A runner's tables, bucket, queue and key, with one deployment of `blueprint` whose first
/// attempt the orchestrator has queued, as its Lambda would.
struct RunnerStack {
    log: DynamoDeployments,
    sqs: aws_sdk_sqs::Client,
    s3: aws_sdk_s3::Client,
    queue: String,
    queue_name: String,
    key: &'static str,
    work_dir: std::path::PathBuf,
    deployment: DeploymentId,
}

impl RunnerStack {
    async fn new(blueprint: &str) -> Self {
        let config = overture_aws::config::for_endpoint(support::emulator(), "eu-west-1").await;
        let dynamodb = aws_sdk_dynamodb::Client::new(&config);
        let sqs = aws_sdk_sqs::Client::new(&config);
        let kms = aws_sdk_kms::Client::new(&config);
        let s3 = overture_aws::s3::client(&config);
        let log = events_log(&dynamodb).await;
        create_custody_table(&dynamodb, "smoke-runner-custody")
            .await
            .expect("table");
        create_leases_table(&dynamodb, "smoke-leases")
            .await
            .expect("table");
        create_seals_table(&dynamodb, "smoke-runner-seals")
            .await
            .expect("table");
        create_payloads_bucket(&s3, PAYLOADS).await.expect("bucket");
        // A queue of its own: another test receiving from it would hide what this one queued.
        let queue_name = format!(
            "smoke-runner-jobs-{}",
            &uuid::Uuid::now_v7().simple().to_string()[20..]
        );
        let queue = create_queue(&sqs, &queue_name).await.expect("queue");
        let key = support::kms_key(&kms).await;
        let (deployment, _) = requested_with(&log, blueprint).await;

        let clock = Arc::new(SystemClock);
        let custody = Arc::new(KmsTokenCustody::new(
            kms.clone(),
            dynamodb.clone(),
            "smoke-runner-custody",
            key,
        ));
        let seals = KmsSeals::new(
            kms,
            dynamodb.clone(),
            "smoke-runner-seals",
            key,
            custody.clone(),
            KeptStates::new(s3.clone(), PAYLOADS),
        );
        let work = QueueOn::one(SqsQueue::new(sqs.clone(), &queue, clock.clone()));
        create_read_model_tables(
            &dynamodb,
            "smoke-runner-deployments",
            "smoke-runner-tenants",
        )
        .await
        .expect("tables");
        let registry = overture_orchestrator::RegistryDirectory(DynamoReadModels::new(
            dynamodb.clone(),
            "smoke-runner-deployments",
            "smoke-runner-tenants",
        ));
        let ports = OrchestratorPorts {
            log: &log,
            work: &work,
            secrets: &seals,
            access: &CloudAccess::new(
                custody,
                Arc::new(DynamoLeases::new(dynamodb.clone(), "smoke-leases")),
            ),
            services: &registry,
            clock: clock.as_ref(),
        };
        orchestrate(deployment, uuid::Uuid::now_v7(), Since::Unknown, &ports)
            .await
            .expect("orchestrated");
        let work_dir =
            std::env::temp_dir().join(format!("overture-smoke-{}", uuid::Uuid::new_v4()));
        Self {
            log,
            sqs,
            s3,
            queue,
            queue_name,
            key,
            work_dir,
            deployment,
        }
    }

    /// The next message of the queue, as the trigger receives it, waiting up to `within`.
    async fn next_message(&self, within: Duration) -> aws_sdk_sqs::types::Message {
        let started = Instant::now();
        loop {
            let received = self
                .sqs
                .receive_message()
                .queue_url(&self.queue)
                .message_system_attribute_names(aws_sdk_sqs::types::MessageSystemAttributeName::All)
                .wait_time_seconds(5)
                .send()
                .await
                .expect("receive");
            if let Some(message) = received.messages().first() {
                return message.clone();
            }
            assert!(
                started.elapsed() < within,
                "no message on the queue within {within:?}"
            );
        }
    }

    fn watch(&self) -> Watch {
        watch(&[
            ("OVERTURE_EVENTS_TABLE", EVENTS),
            ("OVERTURE_CUSTODY_TABLE", "smoke-runner-custody"),
            ("OVERTURE_LEASES_TABLE", "smoke-leases"),
            ("OVERTURE_SEALS_TABLE", "smoke-runner-seals"),
            ("OVERTURE_KMS_KEY", self.key),
            ("OVERTURE_JOBS_QUEUE_URL", &self.queue),
            ("OVERTURE_PAYLOADS_BUCKET", PAYLOADS),
            (
                "OVERTURE_WORK_DIR",
                self.work_dir.to_str().expect("a UTF-8 path"),
            ),
        ])
    }

    async fn types(&self) -> Vec<String> {
        self.log
            .read_stream(self.deployment, 0)
            .await
            .expect("read")
            .into_iter()
            .map(|envelope| envelope.event_type)
            .collect()
    }
}

impl Drop for RunnerStack {
    fn drop(&mut self) {
        // A runner killed mid-step leaves its sandbox's cgroup and its workspace mounted, as a
        // crashed engine would; the embedded engine's `resume` clears them, and so does this.
        let sandboxes = overture_sandbox::Bubblewrap::new(self.work_dir.join("sandboxes"));
        let _ = sandboxes.kill_leftovers();
        let _ = sandboxes.unmount_leftovers();
        let _ = std::fs::remove_dir_all(&self.work_dir);
    }
}

#[tokio::test]
async fn the_runner_lambda_runs_a_steps_attempt_from_its_job_message() {
    let stack = RunnerStack::new(
        "name: smoke\nsteps:\n  build: { run: script, with: { command: echo hello } }\n",
    )
    .await;
    let message = stack.next_message(Duration::from_secs(10)).await;
    let watch = stack.watch();
    let answer = invoke(&watch, "runner", &sqs_event(&message, &stack.queue_name)).await;
    assert_eq!(answer["batchItemFailures"], json!([]), "{answer}");

    let types = stack.types().await;
    assert!(
        types.iter().any(|t| t == "StepSucceeded"),
        "the attempt's success is recorded: {types:?}"
    );
    let events = stack
        .log
        .read_stream(stack.deployment, 0)
        .await
        .expect("read");
    let started = events
        .iter()
        .find(|e| e.event_type == "StepStarted")
        .expect("started");
    let fingerprint = &started.data["fingerprint"];
    assert!(
        fingerprint["hash"].as_str().is_some_and(|h| h.len() == 64)
            && fingerprint["parts"]["settings"].is_string(),
        "the start records what the attempt runs with: {}",
        started.data
    );
    let output = S3AttemptLogs::new(stack.s3.clone(), PAYLOADS)
        .read(stack.deployment, "build", AttemptLog::Attempt(1))
        .await
        .expect("read")
        .expect("the attempt's log");
    assert_eq!(String::from_utf8_lossy(&output), "hello\n");
}

/// The runner's process ends mid-step (its `cargo lambda watch` is stopped, the sandbox with
/// it): the job's message, hidden until the attempt's lease ends (its 5 s timeout and a minute),
/// comes back then, and a new runner records the attempt as interrupted and its retry.
#[tokio::test]
async fn a_runner_killed_mid_step_leaves_its_job_to_come_back_and_the_attempt_interrupted() {
    let stack = RunnerStack::new(
        "name: smoke\nsteps:\n  build: { run: script, timeout: 5s, with: { command: sleep 30 } }\n",
    )
    .await;
    let message = stack.next_message(Duration::from_secs(10)).await;
    let first = stack.watch();
    let event = sqs_event(&message, &stack.queue_name);
    let port = first.port;
    // Its answer is never read: the runner is killed before it gives one.
    let invocation = tokio::spawn(async move {
        post(port, "/2015-03-31/functions/runner/invocations", &event).await
    });
    let started = Instant::now();
    while !stack.types().await.iter().any(|t| t == "StepStarted") {
        assert!(
            started.elapsed() < FIRST_INVOCATION,
            "the attempt never started"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop(first);
    // Its request ends with the watch; nothing waits for it.
    invocation.abort();

    // The job comes back; the attempt is found interrupted only once its lease has ended.
    // Delivered before then (the runner died before it hid the job for the attempt's lease,
    // so only the queue's visibility timeout kept it), it is put off until then.
    let second = stack.watch();
    let mut early = 0;
    loop {
        let again = stack.next_message(Duration::from_secs(150)).await;
        assert_eq!(again.body(), message.body(), "the same job");
        let answer = invoke(&second, "runner", &sqs_event(&again, &stack.queue_name)).await;
        if answer["batchItemFailures"] == json!([]) {
            break;
        }
        early += 1;
        assert!(early < 3, "put off again and again: {answer}");
    }

    let events = stack
        .log
        .read_stream(stack.deployment, 0)
        .await
        .expect("read");
    let failed = events
        .iter()
        .find(|e| e.event_type == "StepAttemptFailed")
        .expect("the attempt's end is recorded");
    assert_eq!(failed.data["error_class"], "interrupted", "{}", failed.data);
    assert_eq!(failed.data["attempt"], 1);
    let started = events
        .iter()
        .find(|e| e.event_type == "StepStarted")
        .expect("started");
    let lease: chrono::DateTime<chrono::Utc> =
        serde_json::from_value(started.data["lease_until"].clone()).expect("a lease");
    assert!(
        failed.metadata.recorded_at >= lease,
        "found interrupted at {}, before its lease ended at {lease}",
        failed.metadata.recorded_at
    );
    assert!(
        events.iter().any(|e| e.event_type == "StepRetryScheduled"),
        "an interrupted attempt is retried: {:?}",
        stack.types().await
    );
}

/// POSTs `body` to the submit function's URL as `cargo lambda watch` serves it: with no auth at
/// all, so the function is handed no signer (as with a function URL whose auth type is NONE).
async fn post_unsigned_to_submit(watch: &Watch, body: &Value) -> (u16, Value) {
    let answer = post(watch.port, "/lambda-url/submit/deployments", body).await;
    let status = answer.status().as_u16();
    let text = answer.text().await.expect("an answer");
    (
        status,
        serde_json::from_str(&text).unwrap_or_else(|_| panic!("JSON: {status} {text}")),
    )
}

/// The account and the ARN of the signer Lambda verified, as the submit URL's `AWS_IAM` auth
/// hands them to the function.
const SIGNER_ACCOUNT: &str = "123456789012";
const SIGNER: &str = "arn:aws:iam::123456789012:user/smoke-deployer";

/// Invokes the submit function with the event Lambda makes of a POST of `body` through its URL
/// once the request's signature is checked: the signer in `requestContext.authorizer.iam`. The
/// status and the JSON answer.
async fn post_signed_to_submit(watch: &Watch, body: &Value) -> (u16, Value) {
    let event = json!({
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": "/deployments",
        "rawQueryString": "",
        "headers": { "content-type": "application/json", "host": "abc.lambda-url.eu-west-1.on.aws" },
        "requestContext": {
            "accountId": "anonymous",
            "apiId": "abc",
            "domainName": "abc.lambda-url.eu-west-1.on.aws",
            "domainPrefix": "abc",
            "http": { "method": "POST", "path": "/deployments", "protocol": "HTTP/1.1",
                      "sourceIp": "192.0.2.1", "userAgent": "overture" },
            "requestId": uuid::Uuid::now_v7().to_string(),
            "routeKey": "$default",
            "stage": "$default",
            "time": "01/Jan/2030:00:00:00 +0000",
            "timeEpoch": 1_893_456_000_000_u64,
            "authorizer": { "iam": {
                "accessKey": "AKIASMOKE", "accountId": SIGNER_ACCOUNT, "callerId": "AIDASMOKE",
                "cognitoIdentity": null, "principalOrgId": null,
                "userArn": SIGNER, "userId": "AIDASMOKE"
            } }
        },
        "body": body.to_string(),
        "isBase64Encoded": false
    });
    let answer = invoke(watch, "submit", &event).await;
    let status = u16::try_from(answer["statusCode"].as_u64().expect("a status")).expect("HTTP");
    let text = answer["body"].as_str().expect("a body");
    (
        status,
        serde_json::from_str(text).unwrap_or_else(|_| panic!("JSON: {status} {text}")),
    )
}

/// The events table of the submit function's test.
const SUBMIT_EVENTS: &str = "smoke-submit-events";

/// Every item of the submit function's events table.
async fn recorded_items(dynamodb: &aws_sdk_dynamodb::Client) -> usize {
    dynamodb
        .scan()
        .table_name(SUBMIT_EVENTS)
        .send()
        .await
        .expect("scan")
        .items()
        .len()
}

#[tokio::test]
async fn the_submit_lambda_refuses_an_unsigned_request_and_records_a_signed_one() {
    const SECRET: &[u8] = b"smoke-secret-value-0042";
    let config = overture_aws::config::for_endpoint(support::emulator(), "eu-west-1").await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&config);
    let kms = aws_sdk_kms::Client::new(&config);
    // A table of its own: the other tests of this binary record on theirs meanwhile.
    create_events_table(&dynamodb, SUBMIT_EVENTS)
        .await
        .expect("table");
    let log = DynamoDeployments::new(dynamodb.clone(), SUBMIT_EVENTS, Arc::new(SystemClock));
    create_custody_table(&dynamodb, "smoke-custody")
        .await
        .expect("table");
    create_seals_table(&dynamodb, "smoke-seals")
        .await
        .expect("table");
    create_payloads_bucket(&overture_aws::s3::client(&config), "smoke-payloads")
        .await
        .expect("bucket");
    let key = support::kms_key(&kms).await;

    let watch = watch(&[
        ("OVERTURE_EVENTS_TABLE", SUBMIT_EVENTS),
        ("OVERTURE_CUSTODY_TABLE", "smoke-custody"),
        ("OVERTURE_SEALS_TABLE", "smoke-seals"),
        ("OVERTURE_PAYLOADS_BUCKET", "smoke-payloads"),
        ("OVERTURE_KMS_KEY", key),
        // The function's own logging at its most talkative, to show the secret is never in it.
        ("OVERTURE_LOG", "debug"),
    ]);
    let blueprint = "name: hello\nsecrets: [api_token]\nsteps:\n  compose: { run: script, with: { command: 'echo hello' } }\n  publish:\n    run: script\n    needs: [compose]\n    with: { command: 'echo {{ secrets.api_token }}' }\n";
    let request = json!({
        "source": "hello/blueprint.yaml",
        "blueprint": blueprint,
        "secrets": { "api_token": std::str::from_utf8(SECRET).expect("text") },
    });

    // As it was found: a request with no credential, naming a tenant and a requester, got 201.
    // Now the function itself refuses any request AWS did not verify the signer of.
    let mut as_found = request.clone();
    as_found["tenant"] = json!("smoke-tenant");
    as_found["requested_by"] = json!("ada");
    for body in [&as_found, &request] {
        let (status, answer) = post_unsigned_to_submit(&watch, body).await;
        assert_eq!(status, 403, "{answer}");
        assert_eq!(answer["error"], "forbidden", "{answer}");
    }
    assert_eq!(
        recorded_items(&dynamodb).await,
        0,
        "nothing is recorded for an unsigned request"
    );

    // Signed, but naming whom it acts as: refused, nothing recorded.
    let (status, answer) = post_signed_to_submit(&watch, &as_found).await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["problems"][0]["field"], "tenant", "{answer}");
    assert_eq!(recorded_items(&dynamodb).await, 0, "nothing recorded");

    let (status, answer) = post_signed_to_submit(&watch, &request).await;
    assert_eq!(status, 201, "{answer}");
    let deployment: DeploymentId = answer["deployment"]
        .as_str()
        .expect("the id")
        .parse()
        .expect("a deployment id");
    let recorded = log.read_stream(deployment, 0).await.expect("read");
    let first = recorded.first().expect("DeploymentRequested");
    assert_eq!(first.event_type, "DeploymentRequested", "{recorded:?}");
    // Whom it acts as is who signed: the tenant is the signer's account, the requester its ARN.
    assert_eq!(first.data["tenant"], SIGNER_ACCOUNT, "{:?}", first.data);
    assert_eq!(first.data["requested_by"], SIGNER, "{:?}", first.data);
    for table in [SUBMIT_EVENTS, "smoke-seals"] {
        let items = dynamodb
            .scan()
            .table_name(table)
            .send()
            .await
            .expect("scan");
        assert!(
            !support::holds_bytes(items.items(), SECRET),
            "the secret's bytes are in {table}"
        );
    }

    let broken = blueprint.replace("needs: [compose]", "needs: [missing]");
    let (status, answer) = post_signed_to_submit(
        &watch,
        &json!({
            "source": "hello/blueprint.yaml",
            "blueprint": broken,
            "secrets": { "api_token": "x" },
        }),
    )
    .await;
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("hello/blueprint.yaml: steps.publish.needs: ")),
        "{answer}"
    );
    let printed = std::fs::read(&watch.output).expect("the function's output");
    assert!(
        !printed.is_empty() && !printed.windows(SECRET.len()).any(|w| w == SECRET),
        "the secret's bytes are in the function's log"
    );
}

/// GETs `path` from the api function's URL, as `cargo lambda watch` serves it, with `token`;
/// the status and the JSON answer.
async fn get_from_api(watch: &Watch, path: &str, token: Option<&str>) -> (u16, Value) {
    let url = format!("http://127.0.0.1:{}/lambda-url/api{path}", watch.port);
    let client = reqwest::Client::new();
    let started = Instant::now();
    let answer = loop {
        let mut request = client.get(&url).timeout(FIRST_INVOCATION);
        if let Some(token) = token {
            request = request.header("X-Auth-Token", token);
        }
        match request.send().await {
            Ok(answer) => break answer,
            Err(error) if error.is_connect() && started.elapsed() < FIRST_INVOCATION => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(error) => panic!("GET {path} failed: {error}"),
        }
    };
    let status = answer.status().as_u16();
    let text = answer.text().await.expect("an answer");
    (
        status,
        serde_json::from_str(&text).unwrap_or_else(|_| panic!("JSON: {status} {text}")),
    )
}

/// Reads the streamed answer on into `streamed` until it holds `text`; the stream must not end
/// before.
async fn read_until(stream: &mut reqwest::Response, streamed: &mut String, text: &str) {
    while !streamed.contains(text) {
        let chunk = stream
            .chunk()
            .await
            .expect("a chunk")
            .unwrap_or_else(|| panic!("the stream ended before {text}: {streamed}"));
        streamed.push_str(&String::from_utf8_lossy(&chunk));
    }
}

/// A local cloud of the test's own, brought down and cleaned up when dropped after a panic.
struct LocalCloud {
    running: Option<overture_cloud::Running>,
    dir: tempfile::TempDir,
}

impl LocalCloud {
    async fn up() -> Self {
        let dir = tempfile::tempdir().expect("temporary directory");
        let running = overture_cloud::start(overture_cloud::CloudConfig::new(dir.path()))
            .await
            .expect("the local cloud starts (run as root)");
        Self {
            running: Some(running),
            dir,
        }
    }

    fn running(&self) -> &overture_cloud::Running {
        self.running.as_ref().expect("the cloud is up")
    }
}

impl Drop for LocalCloud {
    fn drop(&mut self) {
        if let Some(running) = self.running.take() {
            drop(running);
            if let Err(error) = overture_cloud::clean_up(self.dir.path()) {
                eprintln!("cleaning up the test cloud failed: {error}");
            }
        }
    }
}

/// A token of `project` (made if new) from the local cloud's admin API, and the project's id.
async fn cloud_token(cloud: &overture_cloud::Running, project: &str) -> (String, String) {
    let http = reqwest::Client::new();
    let admin = |path: String, body: Value| {
        http.post(format!("{}{path}", cloud.url()))
            .header("X-Admin-Token", cloud.admin_token())
            .json(&body)
            .send()
    };
    let made = admin("/admin/projects".into(), json!({ "name": project }))
        .await
        .expect("the admin API answers");
    assert!(made.status().is_success(), "{}", made.status());
    let made: Value = made.json().await.expect("JSON");
    let project_id = made["project"]["id"]
        .as_str()
        .expect("the project's id")
        .to_owned();
    let token: Value = admin(
        format!("/admin/projects/{project}/tokens"),
        json!({ "expires_in_seconds": 3600 }),
    )
    .await
    .expect("the admin API answers")
    .json()
    .await
    .expect("JSON");
    let token = token["token"].as_str().expect("a token").to_owned();
    (token, project_id)
}

#[tokio::test]
async fn the_api_lambda_answers_a_tenant_its_own_deployments_and_records_a_cancel() {
    let config = overture_aws::config::for_endpoint(support::emulator(), "eu-west-1").await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&config);
    let log = events_log(&dynamodb).await;
    create_custody_table(&dynamodb, "smoke-api-custody")
        .await
        .expect("table");
    create_seals_table(&dynamodb, "smoke-api-seals")
        .await
        .expect("table");
    let key = support::kms_key(&aws_sdk_kms::Client::new(&config)).await;
    create_read_model_tables(&dynamodb, "smoke-api-deployments", "smoke-api-tenants")
        .await
        .expect("tables");
    create_payloads_bucket(&overture_aws::s3::client(&config), PAYLOADS)
        .await
        .expect("bucket");
    // The local cloud needs root (namespaces, bridges); its Keystone checks the tokens.
    let mut cloud = LocalCloud::up().await;
    let (own, own_project) = cloud_token(cloud.running(), "smoke-tenant").await;
    let (other, _) = cloud_token(cloud.running(), "smoke-other").await;

    // Recorded as before tenants were project ids: the project's name as the tenant, its id in
    // the account. It is read as the project id's.
    let account = overture_events::CloudAccount {
        auth_url: cloud.running().auth_url().to_owned(),
        project_id: own_project.clone(),
        project: "smoke-tenant".into(),
        domain: "Default".into(),
        user: "smoke-tenant".into(),
        endpoints: vec![],
    };
    let (deployment, first) = requested_in(
        &log,
        "name: smoke\nsteps:\n  build: { run: noop }\n",
        Some(account),
    )
    .await;
    let views = DynamoReadModels::new(dynamodb, "smoke-api-deployments", "smoke-api-tenants");
    overture_projector::project_stream(deployment, &[first], &log, &views)
        .await
        .expect("projected");

    let trigger_events = create_queue(
        &aws_sdk_sqs::Client::new(&config),
        "smoke-api-trigger-events",
    )
    .await
    .expect("queue");
    let watch = watch(&[
        ("OVERTURE_TRIGGER_EVENTS_QUEUE_URL", &trigger_events),
        ("OVERTURE_EVENTS_TABLE", EVENTS),
        ("OVERTURE_DEPLOYMENTS_TABLE", "smoke-api-deployments"),
        ("OVERTURE_TENANTS_TABLE", "smoke-api-tenants"),
        ("OVERTURE_PAYLOADS_BUCKET", PAYLOADS),
        ("OVERTURE_CUSTODY_TABLE", "smoke-api-custody"),
        ("OVERTURE_SEALS_TABLE", "smoke-api-seals"),
        ("OVERTURE_KMS_KEY", key),
        ("OVERTURE_AUTH_URL", cloud.running().auth_url()),
    ]);
    let (status, answer) = get_from_api(&watch, "/healthz", None).await;
    assert_eq!((status, &answer), (200, &json!({"status": "ok"})));
    let (status, answer) = get_from_api(&watch, "/openapi.json", None).await;
    assert_eq!(status, 200, "{answer}");
    assert!(
        answer["paths"]["/v1/deployments/{id}"].is_object(),
        "{answer}"
    );

    let path = format!("/v1/deployments/{deployment}");
    let (status, answer) = get_from_api(&watch, &path, None).await;
    assert_eq!(
        (status, answer["code"].as_str()),
        (401, Some("unauthorized"))
    );
    let (status, answer) = get_from_api(&watch, &path, Some("gAAAAA-not-a-token")).await;
    assert_eq!(
        (status, answer["code"].as_str()),
        (401, Some("unauthorized"))
    );

    let (status, answer) = get_from_api(&watch, &path, Some(&own)).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["id"], json!(deployment.to_string()), "{answer}");
    assert_eq!(answer["tenant"], json!(own_project), "{answer}");
    assert_eq!(answer["status"], json!("running"), "{answer}");
    let (status, answer) = get_from_api(&watch, "/v1/deployments", Some(&own)).await;
    assert_eq!(status, 200, "{answer}");
    assert!(
        answer.as_array().is_some_and(|rows| rows
            .iter()
            .any(|r| r["id"] == json!(deployment.to_string()))),
        "{answer}"
    );

    // Another tenant's deployment answers as one that does not exist.
    let (status, answer) = get_from_api(&watch, &path, Some(&other)).await;
    assert_eq!(
        (status, answer["code"].as_str()),
        (404, Some("not_found")),
        "{answer}"
    );

    // The events as Server-Sent Events, streamed: the request's event arrives while the
    // deployment runs, and the cancel below arrives on the same stream once recorded.
    let mut stream = reqwest::Client::new()
        .get(format!(
            "http://127.0.0.1:{}/lambda-url/api{path}/events",
            watch.port
        ))
        .header("X-Auth-Token", &own)
        .header("Accept", "text/event-stream")
        .timeout(FIRST_INVOCATION)
        .send()
        .await
        .expect("the stream starts");
    assert_eq!(stream.status().as_u16(), 200);
    let mut streamed = String::new();
    read_until(&mut stream, &mut streamed, "DeploymentRequested").await;

    // A cancel is recorded on the log (the stream would carry it out), and answered with the
    // deployment as the log stands.
    let cancel = reqwest::Client::new()
        .post(format!(
            "http://127.0.0.1:{}/lambda-url/api{path}/cancel",
            watch.port
        ))
        .header("X-Auth-Token", &own)
        .send()
        .await
        .expect("an answer");
    assert_eq!(cancel.status().as_u16(), 202);
    let answer: Value = cancel.json().await.expect("JSON");
    assert_eq!(answer["id"], json!(deployment.to_string()), "{answer}");
    let recorded = log.read_stream(deployment, 0).await.expect("read");
    assert_eq!(
        recorded.last().map(|e| e.event_type.as_str()),
        Some("CancellationRequested"),
        "{recorded:?}"
    );
    read_until(&mut stream, &mut streamed, "CancellationRequested").await;
    drop(stream);
    let printed = std::fs::read(&watch.output).expect("the function's output");
    assert!(
        !printed.windows(own.len()).any(|w| w == own.as_bytes()),
        "the token is in the function's log"
    );

    drop(watch);
    if let Some(running) = cloud.running.take() {
        running.shutdown().await.expect("the cloud shuts down");
    }
}
