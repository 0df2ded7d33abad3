//! The function binaries as AWS runs them: started by `cargo lambda watch` (the Lambda runtime
//! API, locally) and sent one real event of their trigger, against the local AWS emulator. Today:
//! the orchestrator, sent a DynamoDB stream record of a requested deployment.

mod support;

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use overture_aws::custody::create_custody_table;
use overture_aws::dynamodb::{create_events_table, DynamoDeployments};
use overture_aws::seals::create_seals_table;
use overture_aws::sqs::create_queue;
use overture_domain::blueprint::parse;
use overture_events::{DeploymentEvent, DeploymentId};
use overture_infra::clock::SystemClock;
use overture_kit::{Cause, DeploymentLog, ReadStream};
use serde_json::json;

/// How long the first invocation may take: `cargo lambda watch` builds the function first.
const FIRST_INVOCATION: Duration = Duration::from_secs(600);

/// `cargo lambda watch` in its own process group, ended (the group, by its id) when dropped.
struct Watch(Child);

impl Drop for Watch {
    fn drop(&mut self) {
        if let Ok(group) = i32::try_from(self.0.id()) {
            // SAFETY: signals the process group this test made for the child it started.
            unsafe { libc::kill(-group, libc::SIGTERM) };
        }
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

#[tokio::test]
async fn the_orchestrator_lambda_moves_a_deployment_on_from_a_stream_record() {
    let endpoint = support::emulator();
    let config = overture_aws::config::for_endpoint(endpoint, "eu-west-1").await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&config);
    let sqs = aws_sdk_sqs::Client::new(&config);
    let kms = aws_sdk_kms::Client::new(&config);
    create_events_table(&dynamodb, "smoke-events")
        .await
        .expect("table");
    create_custody_table(&dynamodb, "smoke-custody")
        .await
        .expect("table");
    create_seals_table(&dynamodb, "smoke-seals")
        .await
        .expect("table");
    let queue = create_queue(&sqs, "smoke-jobs").await.expect("queue");
    let key = support::kms_key(&kms).await;

    // A deployment requested on the log, as submit would record it.
    let log = DynamoDeployments::new(dynamodb.clone(), "smoke-events", Arc::new(SystemClock));
    let deployment = DeploymentId::from_uuid(uuid::Uuid::now_v7());
    let requested = DeploymentEvent::DeploymentRequested {
        tenant: "acme".into(),
        requested_by: "ada".into(),
        trigger: "cli".into(),
        source: "smoke.yaml".into(),
        blueprint: parse("name: smoke\nsteps:\n  build: { run: noop }\n")
            .expect("valid")
            .snapshot,
        blueprint_hash: "h".into(),
        params: BTreeMap::new(),
        cloud: None,
    };
    let cause = Cause::new("submit", deployment, uuid::Uuid::now_v7());
    log.append(deployment, "acme", None, vec![requested], &cause)
        .await
        .expect("requested");
    let envelope = log
        .read_stream(deployment, 0)
        .await
        .expect("read")
        .remove(0);

    let port = free_port();
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
            ("AWS_ENDPOINT_URL", endpoint),
            ("AWS_REGION", "eu-west-1"),
            ("AWS_ACCESS_KEY_ID", "overture-local"),
            ("AWS_SECRET_ACCESS_KEY", "overture-local"),
            ("AWS_EC2_METADATA_DISABLED", "true"),
            ("OVERTURE_EVENTS_TABLE", "smoke-events"),
            ("OVERTURE_CUSTODY_TABLE", "smoke-custody"),
            ("OVERTURE_SEALS_TABLE", "smoke-seals"),
            ("OVERTURE_KMS_KEY", key),
            ("OVERTURE_JOBS_QUEUE_URL", &queue),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0);
    let _watch = Watch(
        command
            .spawn()
            .expect("cargo lambda (scripts/setup.sh installs it)"),
    );

    let record = json!({
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
                    "revision": { "N": envelope.revision.to_string() }
                },
                "NewImage": {
                    "stream": { "S": envelope.stream },
                    "revision": { "N": envelope.revision.to_string() },
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
    });
    let url = format!("http://127.0.0.1:{port}/2015-03-31/functions/orchestrator/invocations");
    let client = reqwest::Client::new();
    let started = Instant::now();
    let answer = loop {
        match client
            .post(&url)
            .json(&record)
            .timeout(FIRST_INVOCATION)
            .send()
            .await
        {
            Ok(answer) => break answer,
            // cargo lambda is still starting to listen.
            Err(error) if error.is_connect() && started.elapsed() < FIRST_INVOCATION => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(error) => panic!("the invocation failed: {error}"),
        }
    };
    let status = answer.status();
    let body: serde_json::Value = answer.json().await.expect("a JSON answer");
    assert!(status.is_success(), "{status}: {body}");
    assert_eq!(body["batchItemFailures"], json!([]), "{body}");

    // The orchestrator scheduled `build` and queued its first attempt.
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
