//! The poller against the local AWS emulator and `cargo lambda watch`: a stack made as
//! `make local-aws` makes it, a deployment requested on its log, and nothing else invoking the
//! functions: the projector's view of it appears and the orchestrator's first job lands on the
//! jobs queue, both through the poller reading the triggers of the stack. And, with a stand-in
//! for `cargo lambda watch` that fails some items once: a stream batch is taken up again at its
//! failed record, a failed job comes back (its receive count one higher) and a job done does not.

use std::collections::BTreeMap;
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use overture_aws::dynamodb::DynamoDeployments;
use overture_aws::read_models::DynamoReadModels;
use overture_domain::blueprint::parse;
use overture_events::{DeploymentEvent, DeploymentId};
use overture_kit::SystemClock;
use overture_kit::{Cause, DeploymentLog};
use overture_local_aws::poller::{Invoker, Poller};
use overture_local_aws::{setup, triggers};
use overture_projector::DeploymentViews;

const REGION: &str = "eu-west-1";
/// How long the functions may take to answer first: `cargo lambda watch` builds them then.
const FIRST_DELIVERY: Duration = Duration::from_secs(900);

/// A deployment of one `noop` step, requested by `ada` of `tenant` from `local.yaml`.
fn local_request(tenant: &str) -> DeploymentEvent {
    DeploymentEvent::DeploymentRequested {
        triggered_by: None,
        tenant: tenant.into(),
        requested_by: "ada".into(),
        trigger: "cli".into(),
        source: "local.yaml".into(),
        blueprint: parse("name: local\nsteps:\n  build: { run: noop }\n")
            .expect("valid")
            .snapshot,
        blueprint_hash: "h".into(),
        params: BTreeMap::new(),
        cloud: None,
        name: None,
    }
}

/// A poller of the emulator's streams and queues, handing what it reads to `invoker`, with no
/// checkpoints kept.
fn poller(
    config: &aws_config::SdkConfig,
    sqs: &aws_sdk_sqs::Client,
    invoker: Invoker,
    queue_pollers: usize,
) -> Poller {
    Poller {
        streams: aws_sdk_dynamodbstreams::Client::new(config),
        sqs: sqs.clone(),
        invoker,
        queue_pollers,
        checkpoints: None,
    }
}

/// A child in its own process group, ended (the group, by its id) when dropped.
struct Started(Child);

impl Drop for Started {
    fn drop(&mut self) {
        if let Ok(group) = i32::try_from(self.0.id()) {
            // SAFETY: signals the process group this test made for the child it started. SIGKILL:
            // the emulator keeps nothing, and a teardown must not wait on it.
            unsafe { libc::kill(-group, libc::SIGKILL) };
        }
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

fn start(command: &mut Command) -> Started {
    command
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../../.."))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0);
    Started(
        command
            .spawn()
            .expect("started (scripts/setup.sh installs it)"),
    )
}

fn listening(port: u16) {
    let start = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "nothing listens on {port}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The local AWS emulator on a free port, once it listens: its endpoint, and the SDK's settings
/// for it.
async fn emulator() -> (Started, String, aws_config::SdkConfig) {
    let port = free_port();
    let started = start(Command::new("python3").args([
        "scripts/aws-emulator.py",
        "--port",
        &port.to_string(),
    ]));
    listening(port);
    let endpoint = format!("http://127.0.0.1:{port}");
    let config = overture_aws::config::for_endpoint(&endpoint, REGION).await;
    (started, endpoint, config)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_requested_deployment_reaches_the_projector_and_the_orchestrator_through_the_poller() {
    let (_emulator, endpoint, config) = emulator().await;

    let stack = "overture-poller";
    let outputs = setup::stack(&config, stack, &[]).await.expect("the stack");
    let settings = setup::settings(&config, stack, &outputs)
        .await
        .expect("its settings");
    // A second set-up finds the stack made.
    assert_eq!(
        setup::stack(&config, stack, &[])
            .await
            .expect("found again"),
        outputs
    );
    let jobs = settings["OVERTURE_JOBS_QUEUE_URL"].clone();
    assert!(jobs.starts_with(&endpoint), "the emulator's URL: {jobs}");

    let watch_port = free_port();
    let _watch = start(
        Command::new("cargo")
            .args(["lambda", "watch", "--ignore-changes"])
            .args(["--invoke-address", "127.0.0.1"])
            .args(["--invoke-port", &watch_port.to_string()])
            .envs(&settings)
            .envs([
                ("AWS_ENDPOINT_URL", endpoint.as_str()),
                ("AWS_REGION", REGION),
                ("AWS_ACCESS_KEY_ID", "overture-local"),
                ("AWS_SECRET_ACCESS_KEY", "overture-local"),
                ("AWS_EC2_METADATA_DISABLED", "true"),
            ]),
    );

    // The runner is left out: the job it would take stays on the queue for the test to see.
    let lambda = aws_sdk_lambda::Client::new(&config);
    let sqs = aws_sdk_sqs::Client::new(&config);
    let only = ["orchestrator".to_owned(), "projector".to_owned()];
    let found = triggers::read(&lambda, &sqs, stack, Some(&only))
        .await
        .expect("the triggers");
    let mut functions: Vec<&str> = found.iter().map(|t| t.function.as_str()).collect();
    functions.sort_unstable();
    assert_eq!(functions, ["orchestrator", "projector"]);
    let poller = poller(
        &config,
        &sqs,
        Invoker::new(&format!("http://127.0.0.1:{watch_port}"), FIRST_DELIVERY).expect("a client"),
        1,
    );
    let polling = tokio::spawn(async move { poller.run(found).await });

    let dynamodb = aws_sdk_dynamodb::Client::new(&config);
    let log = DynamoDeployments::new(
        dynamodb.clone(),
        settings["OVERTURE_EVENTS_TABLE"].clone(),
        Arc::new(SystemClock),
    );
    let deployment = DeploymentId::from_uuid(uuid::Uuid::now_v7());
    let requested = local_request("local-tenant");
    let cause = Cause::new("submit", deployment, uuid::Uuid::now_v7());
    log.append(deployment, "local-tenant", None, vec![requested], &cause)
        .await
        .expect("requested");

    let views = DynamoReadModels::new(
        dynamodb,
        settings["OVERTURE_DEPLOYMENTS_TABLE"].clone(),
        settings["OVERTURE_TENANTS_TABLE"].clone(),
    );
    let started = Instant::now();
    let (mut viewed, mut queued) = (false, false);
    while !(viewed && queued) {
        assert!(
            started.elapsed() < FIRST_DELIVERY,
            "delivered within {FIRST_DELIVERY:?}: view {viewed}, job {queued}"
        );
        assert!(!polling.is_finished(), "the poller stopped: {polling:?}");
        if !viewed {
            viewed = views
                .view(deployment)
                .await
                .expect("read")
                .is_some_and(|view| view.tenant == "local-tenant");
        }
        if !queued {
            let received = sqs
                .receive_message()
                .queue_url(&jobs)
                .wait_time_seconds(5)
                .send()
                .await
                .expect("receive");
            queued = received.messages().iter().any(|m| {
                m.body()
                    .is_some_and(|b| b.contains("build") && b.contains(&deployment.to_string()))
            });
        }
    }
    polling.abort();
}

/// One invocation as the stand-in for `cargo lambda watch` received it.
struct Invocation {
    function: String,
    event: serde_json::Value,
}

/// Answers the invoke API in place of `cargo lambda watch`, with `answer` deciding each
/// invocation's `batchItemFailures`, and hands every invocation to the test.
async fn stand_in_functions(
    answer: fn(&str, &serde_json::Value) -> Vec<String>,
) -> (String, tokio::sync::mpsc::UnboundedReceiver<Invocation>) {
    use axum::extract::{Path, State};
    use axum::routing::post;
    let (sender, received) = tokio::sync::mpsc::unbounded_channel();
    let app = axum::Router::new()
        .route(
            "/2015-03-31/functions/{function}/invocations",
            post(
                move |State(sender): State<tokio::sync::mpsc::UnboundedSender<Invocation>>,
                      Path(function): Path<String>,
                      axum::Json(event): axum::Json<serde_json::Value>| async move {
                    let failed: Vec<serde_json::Value> = answer(&function, &event)
                        .into_iter()
                        .map(|id| serde_json::json!({ "itemIdentifier": id }))
                        .collect();
                    let _ = sender.send(Invocation { function, event });
                    axum::Json(serde_json::json!({ "batchItemFailures": failed }))
                },
            ),
        )
        .with_state(sender);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let address = listener.local_addr().expect("its address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{address}"), received)
}

/// The runner fails the job whose body says so on its first delivery; the projector fails
/// the second record of its first batch of two or more.
fn fail_once(function: &str, event: &serde_json::Value) -> Vec<String> {
    let records = event["Records"].as_array().cloned().unwrap_or_default();
    match function {
        "runner" => records
            .iter()
            .filter(|r| {
                r["body"] == "fail-once" && r["attributes"]["ApproximateReceiveCount"] == "1"
            })
            .filter_map(|r| r["messageId"].as_str().map(str::to_owned))
            .collect(),
        "projector" if records.len() >= 2 => records[1]["dynamodb"]["SequenceNumber"]
            .as_str()
            .map(str::to_owned)
            .into_iter()
            .collect(),
        _ => Vec::new(),
    }
}

async fn next(received: &mut tokio::sync::mpsc::UnboundedReceiver<Invocation>) -> Invocation {
    tokio::time::timeout(Duration::from_secs(60), received.recv())
        .await
        .expect("an invocation within a minute")
        .expect("the stand-in runs")
}

#[tokio::test(flavor = "multi_thread")]
async fn failed_items_come_back_and_the_others_are_done() {
    let (_emulator, _, config) = emulator().await;
    let stack = "overture-failures";
    // Long enough for a handled job to be deleted before it would show again, short enough
    // for the failed one to come back soon.
    let outputs = setup::stack(&config, stack, &[("JobsVisibilityTimeout", "5")])
        .await
        .expect("the stack");
    let settings = setup::settings(&config, stack, &outputs)
        .await
        .expect("its settings");

    let (functions, mut received) = stand_in_functions(fail_once).await;
    let lambda = aws_sdk_lambda::Client::new(&config);
    let sqs = aws_sdk_sqs::Client::new(&config);
    let only = ["runner".to_owned(), "projector".to_owned()];
    let found = triggers::read(&lambda, &sqs, stack, Some(&only))
        .await
        .expect("the triggers");
    let poller = poller(
        &config,
        &sqs,
        Invoker::new(&functions, Duration::from_secs(60)).expect("a client"),
        2,
    );
    let polling = tokio::spawn(async move { poller.run(found).await });

    // Two events of one command: one stream batch of two records for the projector.
    let log = DynamoDeployments::new(
        aws_sdk_dynamodb::Client::new(&config),
        settings["OVERTURE_EVENTS_TABLE"].clone(),
        Arc::new(SystemClock),
    );
    let deployment = DeploymentId::from_uuid(uuid::Uuid::now_v7());
    let requested = local_request("t");
    let sealed = DeploymentEvent::CredentialsSealed {
        seal: "seal".into(),
        secrets: Vec::new(),
        ssh_public_key: None,
        token: false,
    };
    log.append(
        deployment,
        "t",
        None,
        vec![requested, sealed],
        &Cause::new("submit", deployment, uuid::Uuid::now_v7()),
    )
    .await
    .expect("appended");
    let jobs = &settings["OVERTURE_JOBS_QUEUE_URL"];
    for body in ["done-at-once", "fail-once"] {
        sqs.send_message()
            .queue_url(jobs)
            .message_body(body)
            .send()
            .await
            .expect("sent");
    }

    let mut stream_batches: Vec<Vec<String>> = Vec::new();
    let mut deliveries: Vec<(String, String)> = Vec::new();
    while stream_batches.len() < 2 || deliveries.len() < 3 {
        assert!(!polling.is_finished(), "the poller stopped: {polling:?}");
        let invocation = next(&mut received).await;
        let records = invocation.event["Records"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if invocation.function == "projector" {
            stream_batches.push(
                records
                    .iter()
                    .filter_map(|r| r["dynamodb"]["SequenceNumber"].as_str().map(str::to_owned))
                    .collect(),
            );
        } else {
            for record in records {
                let body = record["body"].as_str().unwrap_or_default().to_owned();
                let count = record["attributes"]["ApproximateReceiveCount"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                assert!(
                    record["receiptHandle"]
                        .as_str()
                        .is_some_and(|h| !h.is_empty()),
                    "a real receipt handle"
                );
                deliveries.push((body, count));
            }
        }
    }
    // The stream batch is taken up again at its failed record, not from its start.
    assert_eq!(stream_batches[0].len(), 2, "{stream_batches:?}");
    assert_eq!(
        stream_batches[1],
        stream_batches[0][1..],
        "{stream_batches:?}"
    );
    // The job done is not delivered again; the failed one comes back, counted.
    deliveries.sort();
    assert_eq!(
        deliveries,
        [
            ("done-at-once".to_owned(), "1".to_owned()),
            ("fail-once".to_owned(), "1".to_owned()),
            ("fail-once".to_owned(), "2".to_owned()),
        ]
    );
    polling.abort();
}

async fn requested_on(log: &DynamoDeployments) {
    let deployment = DeploymentId::from_uuid(uuid::Uuid::now_v7());
    let requested = local_request("t");
    log.append(
        deployment,
        "t",
        None,
        vec![requested],
        &Cause::new("submit", deployment, uuid::Uuid::now_v7()),
    )
    .await
    .expect("appended");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_poller_started_again_goes_on_where_the_last_one_stopped() {
    let (_emulator, _, config) = emulator().await;
    let stack = "overture-restart";
    let outputs = setup::stack(&config, stack, &[]).await.expect("the stack");
    let log = DynamoDeployments::new(
        aws_sdk_dynamodb::Client::new(&config),
        outputs["EventsTable"].clone(),
        Arc::new(SystemClock),
    );
    let (functions, mut received) = stand_in_functions(|_, _| Vec::new()).await;
    let checkpoints = tempfile::tempdir().expect("a directory");
    let poller = || async {
        let lambda = aws_sdk_lambda::Client::new(&config);
        let sqs = aws_sdk_sqs::Client::new(&config);
        let found = triggers::read(&lambda, &sqs, stack, Some(&["projector".to_owned()]))
            .await
            .expect("the triggers");
        let poller = Poller {
            streams: aws_sdk_dynamodbstreams::Client::new(&config),
            sqs,
            invoker: Invoker::new(&functions, Duration::from_secs(60)).expect("a client"),
            queue_pollers: 1,
            checkpoints: Some(checkpoints.path().to_owned()),
        };
        (poller, found)
    };
    let sequences = |invocation: &Invocation| -> Vec<String> {
        invocation.event["Records"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["dynamodb"]["SequenceNumber"].as_str().map(str::to_owned))
            .collect()
    };

    let (started, found) = poller().await;
    let first = tokio::spawn(async move { started.run(found).await });
    requested_on(&log).await;
    let done = sequences(&next(&mut received).await);
    assert_eq!(done.len(), 1);
    // A shard's batches go one at a time: once the next is delivered, the first was answered
    // and its position kept.
    requested_on(&log).await;
    let next_one = sequences(&next(&mut received).await);
    assert_eq!(next_one.len(), 1);
    assert_ne!(next_one, done);
    first.abort();
    let _ = first.await;

    let (started, found) = poller().await;
    let second = tokio::spawn(async move { started.run(found).await });
    requested_on(&log).await;
    let after = sequences(&next(&mut received).await);
    assert!(!after.is_empty());
    assert!(
        !after.contains(&done[0]),
        "the record answered before is not delivered again: {done:?} then {after:?}"
    );
    second.abort();
}
