//! The AWS form end to end: `scripts/local-aws.sh up` (what `make local-aws` runs) starts the
//! emulator, makes the stack in it through CloudFormation, serves every function under
//! `cargo lambda watch` and delivers the table's stream and the queues to them with the poller,
//! on ports and in a state directory of this test's own; `overture --backend aws` then deploys
//! through the submit function (its request signed with SigV4, which the local door of the
//! submit URL checks; an unsigned one is refused) and follows the deployment on the events table. The api function
//! starts, cancels and redrives deployments through its function URL, with tokens of a local
//! cloud's Keystone; `overture --backend aws` cancels, redrives and redeploys them too.
//!
//! The same blueprints run embedded too, and the two histories must have the same shape: for
//! every step, the same events in the same order. No byte of the secret may show in any table,
//! queue message, payload object or function log.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::local_cloud::LocalCloud;
use crate::support::{assert_deterministic, envelopes, step_events, text, types, Overture};

/// How long a deployment through the local AWS form may take, the functions' first builds
/// included.
const DEPLOYMENT_WITHIN: std::time::Duration = std::time::Duration::from_secs(600);

/// The secret hello-world publishes with, as the user's environment gives it.
const TOKEN_VARIABLE: &str = "OVERTURE_E2E_AWS_TOKEN";

/// A step that fails every time, retried once after a second: two attempts, then the
/// deployment fails.
const FLAKY: &str = "name: flaky
steps:
  prepare:
    run: script
    with: { command: echo ready }
  flaky:
    run: script
    needs: [prepare]
    retry: { step-failed: { times: 1, wait: 1s } }
    with: { command: 'echo failing; exit 3' }
";

/// A step that runs long enough to be cancelled while it runs.
const SLEEPY: &str = "name: sleepy
steps:
  wait:
    run: script
    with: { command: sleep 30 }
";

/// A step that fails while its secret says `closed`: redriven with another value, it carries on.
const GATE: &str = "name: gate
secrets: [gate]
steps:
  prepare:
    run: script
    with: { command: echo ready }
  gate:
    run: script
    needs: [prepare]
    with: { command: 'test \"{{ secrets.gate }}\" != closed' }
";

/// The secret the gate's step reads, as the user's environment gives it.
const GATE_VARIABLE: &str = "OVERTURE_E2E_GATE";

/// The local AWS form of this test, stopped (by the script, by PID) when dropped.
struct LocalAws {
    state: tempfile::TempDir,
    settings: BTreeMap<String, String>,
}

impl LocalAws {
    /// Starts the form, its api function checking callers' tokens with `auth_url`.
    fn up(auth_url: &str) -> Self {
        let state = tempfile::tempdir().expect("a state directory");
        let started = Self::script(state.path(), "up", Some(auth_url));
        if !started.status.success() {
            // What did start is stopped before the test fails.
            Self::script(state.path(), "down", None);
            panic!(
                "local-aws.sh up failed: {}\n{}",
                text(&started.stdout),
                text(&started.stderr)
            );
        }
        let exports = std::fs::read_to_string(state.path().join("local-aws.env"))
            .expect("local-aws.sh writes the settings");
        let settings = exports
            .lines()
            .filter_map(|line| line.strip_prefix("export "))
            .filter_map(|line| line.split_once('='))
            .map(|(name, value)| (name.to_owned(), value.trim_matches('\'').to_owned()))
            .collect();
        Self { state, settings }
    }

    /// Runs `scripts/local-aws.sh COMMAND` for the form whose state is under `state`, on free
    /// ports and a stack of its own.
    fn script(state: &Path, command: &str, auth_url: Option<&str>) -> Output {
        let ports = std::fs::read_to_string(state.join("ports"))
            .ok()
            .and_then(|text| {
                let (emulator, lambda) = text.trim().split_once(' ')?;
                Some((emulator.to_owned(), lambda.to_owned()))
            })
            .unwrap_or_else(|| {
                let ports = (free_port().to_string(), free_port().to_string());
                std::fs::write(state.join("ports"), format!("{} {}", ports.0, ports.1))
                    .expect("keep the ports");
                ports
            });
        let mut script = Command::new(root().join("scripts/local-aws.sh"));
        if let Some(url) = auth_url {
            script.env("OVERTURE_LOCAL_AUTH_URL", url);
        }
        script
            .arg(command)
            .current_dir(root())
            .env("OVERTURE_LOCAL_STATE", state.join("local-aws"))
            .env("OVERTURE_LOCAL_AWS_PORT", &ports.0)
            .env("OVERTURE_LOCAL_LAMBDA_PORT", &ports.1)
            .env("OVERTURE_LOCAL_STACK", "overture-e2e")
            .output()
            .expect("scripts/local-aws.sh runs")
    }

    /// `overture --backend aws ARGS`, with the settings `make local-aws` prints.
    fn overture(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_overture"));
        command
            .args(["--backend", "aws"])
            .args(args)
            .env_remove("OVERTURE_DATA_DIR")
            .env_remove("OVERTURE_TENANT")
            .envs(&self.settings);
        command
    }

    /// Deploys `file` with `--json` (and the secret, when given); the exit code and status.
    fn deploy(&self, file: &Path, secret: Option<&str>) -> (i32, Value, Output) {
        let mut command = self.overture(&["deploy", file.to_str().expect("utf-8"), "--json"]);
        if let Some(value) = secret {
            command
                .args(["--secret", &format!("api_token={TOKEN_VARIABLE}")])
                .env(TOKEN_VARIABLE, value);
        }
        let output = within(DEPLOYMENT_WITHIN, command);
        let status = serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
        (output.status.code().unwrap_or(-1), status, output)
    }

    fn events(&self, id: &str) -> Vec<Value> {
        let output = self
            .overture(&["events", id, "--json"])
            .output()
            .expect("overture runs");
        assert!(output.status.success(), "{}", text(&output.stderr));
        let events: Vec<Value> = text(&output.stdout)
            .lines()
            .map(|line| serde_json::from_str(line).expect("one envelope per line"))
            .collect();
        assert_deterministic(&events);
        events
    }

    /// Runs `overture --backend aws ARGS` and parses its stdout as JSON.
    fn json(&self, args: &[&str]) -> Value {
        let output = self.overture(args).output().expect("overture runs");
        assert!(
            output.status.success(),
            "{args:?}: {}",
            text(&output.stderr)
        );
        serde_json::from_slice(&output.stdout).expect("JSON on stdout")
    }

    /// Where `cargo lambda watch` serves the api function's URL.
    fn api_url(&self, path: &str) -> String {
        let ports = std::fs::read_to_string(self.state.path().join("ports")).expect("the ports");
        let (_, lambda) = ports.trim().split_once(' ').expect("two ports");
        format!("http://127.0.0.1:{lambda}/lambda-url/api{path}")
    }

    /// POSTs `body` to the api function's `path` with `token`; the status and the JSON answer.
    async fn post(&self, path: &str, token: &str, body: &Value) -> (u16, Value) {
        let answer = reqwest::Client::new()
            .post(self.api_url(path))
            .header("X-Auth-Token", token)
            .json(body)
            .timeout(DEPLOYMENT_WITHIN)
            .send()
            .await
            .unwrap_or_else(|e| panic!("POST {path}: {e}"));
        let status = answer.status().as_u16();
        let body = answer.text().await.expect("an answer");
        let json =
            serde_json::from_str(&body).unwrap_or_else(|_| panic!("POST {path}: {status} {body}"));
        (status, json)
    }

    /// Starts `blueprint` through the api function with `token` and `secrets`; the new
    /// deployment's id.
    async fn start(&self, token: &str, blueprint: &str, secrets: Value) -> String {
        let body = serde_json::json!({ "blueprint": blueprint, "secrets": secrets });
        let (status, answer) = self.post("/v1/deployments", token, &body).await;
        assert_eq!(status, 201, "{answer}");
        assert_eq!(answer["status"], "running", "{answer}");
        answer["id"].as_str().expect("an id").to_owned()
    }

    /// Reads the deployment's stream until it has ended (the stack drives it), within
    /// [`DEPLOYMENT_WITHIN`]; then its status object.
    async fn ended(&self, id: &str) -> Value {
        use overture_kit::DeploymentLog;
        let config =
            overture_aws::config::for_endpoint(self.setting("AWS_ENDPOINT_URL"), "eu-west-1").await;
        let log = overture_aws::dynamodb::DynamoDeployments::new(
            aws_sdk_dynamodb::Client::new(&config),
            self.setting("OVERTURE_EVENTS_TABLE"),
            std::sync::Arc::new(overture_kit::SystemClock),
        );
        let deployment = id.parse().expect("a deployment id");
        let started = std::time::Instant::now();
        while !log
            .load(deployment)
            .await
            .expect("the events table")
            .state
            .is_finished()
        {
            assert!(
                started.elapsed() < DEPLOYMENT_WITHIN,
                "deployment {id} has not ended within {DEPLOYMENT_WITHIN:?}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
        tokio::task::block_in_place(|| self.json(&["status", id, "--json"]))
    }

    fn setting(&self, name: &str) -> &str {
        self.settings
            .get(name)
            .unwrap_or_else(|| panic!("{name} is in the settings"))
    }

    /// Every function's and the poller's log, as written so far.
    fn logs(&self) -> Vec<(PathBuf, Vec<u8>)> {
        std::fs::read_dir(self.state.path().join("local-aws"))
            .expect("the state directory")
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            .filter(|path| path.extension().is_some_and(|e| e == "log"))
            .map(|path| {
                let bytes = std::fs::read(&path).expect("a log");
                (path, bytes)
            })
            .collect()
    }
}

impl Drop for LocalAws {
    fn drop(&mut self) {
        let stopped = Self::script(self.state.path(), "down", None);
        if !stopped.status.success() {
            eprintln!("local-aws.sh down: {}", text(&stopped.stderr));
        }
    }
}

/// POSTs a deployment request to the submit URL with no signature, as the request the defect
/// was found with: the door answers 403 and the events table stays empty.
async fn an_unsigned_submit_is_refused_and_records_nothing(aws: &LocalAws) {
    let request = serde_json::json!({
        "source": "hello.yaml",
        "blueprint": "name: hello\nsteps:\n  greet: { run: script, with: { command: echo hi } }\n",
        "tenant": "acme",
        "requested_by": "mallory",
    });
    let answer = reqwest::Client::new()
        .post(aws.setting("OVERTURE_SUBMIT_URL"))
        .json(&request)
        .timeout(DEPLOYMENT_WITHIN)
        .send()
        .await
        .expect("the submit URL answers");
    assert_eq!(answer.status().as_u16(), 403, "an unsigned request");
    let config =
        overture_aws::config::for_endpoint(aws.setting("AWS_ENDPOINT_URL"), "eu-west-1").await;
    let items = aws_sdk_dynamodb::Client::new(&config)
        .scan()
        .table_name(aws.setting("OVERTURE_EVENTS_TABLE"))
        .send()
        .await
        .expect("scan the events table");
    assert!(items.items().is_empty(), "recorded: {:?}", items.items());
}

/// Runs `command` to its end, or kills it (by its PID) and fails the test once `limit` has
/// passed: a deployment that stops moving must fail the test, not hang the suite.
fn within(limit: std::time::Duration, mut command: Command) -> Output {
    let mut child = command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("overture runs");
    let started = std::time::Instant::now();
    while child.try_wait().expect("its status").is_none() {
        if started.elapsed() > limit {
            let _ = child.kill();
            let output = child.wait_with_output().expect("its output");
            panic!(
                "not done within {limit:?}: {}\n{}",
                text(&output.stdout),
                text(&output.stderr)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    child.wait_with_output().expect("its output")
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port()
}

/// The shape of a history: for each step, its events (type and attempt) in order; and the
/// deployment's own events in order.
fn shape(events: &[Value]) -> BTreeMap<String, Vec<(String, u64)>> {
    let mut shape = BTreeMap::new();
    let steps: std::collections::BTreeSet<String> = events
        .iter()
        .filter_map(|e| e["data"]["step"].as_str().map(str::to_owned))
        .collect();
    for step in steps {
        shape.insert(step.clone(), step_events(events, &step));
    }
    let own: Vec<(String, u64)> = events
        .iter()
        .filter(|e| e["data"]["step"].is_null())
        .map(|e| (e["type"].as_str().unwrap_or_default().to_owned(), 0))
        .collect();
    shape.insert(String::new(), own);
    shape
}

/// Whether `haystack` holds `needle`'s bytes anywhere.
fn holds(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Everything the AWS form stored: every item of every table, every message still in a queue,
/// every object in the payloads bucket.
async fn everything_stored(aws: &LocalAws) -> Vec<(String, Vec<u8>)> {
    let config =
        overture_aws::config::for_endpoint(aws.setting("AWS_ENDPOINT_URL"), "eu-west-1").await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&config);
    let sqs = aws_sdk_sqs::Client::new(&config);
    let s3 = overture_aws::s3::client(&config);
    let mut stored = Vec::new();
    let tables = dynamodb.list_tables().send().await.expect("tables");
    for table in tables.table_names() {
        let items = dynamodb
            .scan()
            .table_name(table)
            .send()
            .await
            .expect("scan");
        stored.push((
            format!("table {table}"),
            format!("{:?}", items.items()).into_bytes(),
        ));
    }
    let queues = sqs.list_queues().send().await.expect("queues");
    for queue in queues.queue_urls() {
        let messages = sqs
            .receive_message()
            .queue_url(queue)
            .max_number_of_messages(10)
            .visibility_timeout(0)
            .send()
            .await
            .expect("receive");
        for message in messages.messages() {
            stored.push((
                format!("queue {queue}"),
                message.body().unwrap_or_default().as_bytes().to_vec(),
            ));
        }
    }
    let bucket = aws.setting("OVERTURE_PAYLOADS_BUCKET");
    let objects = s3
        .list_objects_v2()
        .bucket(bucket)
        .send()
        .await
        .expect("objects");
    for object in objects.contents() {
        let key = object.key().unwrap_or_default();
        let body = s3
            .get_object()
            .bucket(bucket)
            .key(key)
            .send()
            .await
            .expect("object")
            .body
            .collect()
            .await
            .expect("its bytes")
            .into_bytes()
            .to_vec();
        stored.push((format!("object {key}"), body));
    }
    stored
}

#[tokio::test(flavor = "multi_thread")]
async fn hello_world_and_a_retried_failure_run_through_the_functions_as_they_run_embedded() {
    // The local cloud's Keystone vouches for the api function's callers.
    let cloud = LocalCloud::up();
    let aws = LocalAws::up(&cloud.auth_url);
    let embedded = Overture::new();
    let token = format!("aws-e2e-{}", uuid::Uuid::new_v4().simple());
    let hello = root().join("examples/hello-world/blueprint.yaml");

    // As it was found: a request to the submit URL with no credential, naming its tenant and
    // requester, was recorded (201). The URL takes AWS_IAM auth: refused, nothing recorded.
    an_unsigned_submit_is_refused_and_records_nothing(&aws).await;

    // hello-world, through submit (the request signed with the local credentials), the
    // orchestrator, the runner and the projector.
    let (code, status, output) = tokio::task::block_in_place(|| aws.deploy(&hello, Some(&token)));
    assert_eq!(code, 0, "{status}\n{}", text(&output.stderr));
    assert_eq!(status["status"], "succeeded", "{status}");
    let id = status["id"].as_str().expect("an id").to_owned();
    let on_aws = tokio::task::block_in_place(|| aws.events(&id));
    // Whom it acts as is who signed the request: its account and its ARN.
    let requested = &envelopes(&on_aws)[0].data;
    assert_eq!(requested["tenant"], "123456789012", "{requested}");
    assert_eq!(
        requested["requested_by"], "arn:aws:iam::123456789012:user/overture-local",
        "{requested}"
    );

    let (code, status, output) = embedded.deploy_with_secret(&hello, "api_token", &token);
    assert_eq!(code, 0, "{status}\n{}", text(&output.stderr));
    let there = embedded.events(status["id"].as_str().expect("an id"));
    assert_eq!(shape(&on_aws), shape(&there), "AWS: {:?}", types(&on_aws));

    // The same answers from the read models as embedded: status and the list.
    let shown = tokio::task::block_in_place(|| {
        aws.overture(&["status", &id, "--json"])
            .output()
            .expect("status")
    });
    let shown: Value = serde_json::from_slice(&shown.stdout).expect("JSON");
    assert_eq!(shown["status"], "succeeded", "{shown}");
    assert_eq!(shown["steps"]["publish"]["status"], "succeeded", "{shown}");

    // Time travel reads the stream through the same query port: at every revision, the
    // projection of exactly that prefix; at the last, the status now; the graph likewise.
    tokio::task::block_in_place(|| {
        let records = envelopes(&on_aws);
        for revision in 0..records.len() {
            let at = revision.to_string();
            let then = aws.json(&["status", &id, "--at", &at, "--json"]);
            let view = overture_domain::projection::project(None, &records[..=revision])
                .expect("the prefix folds")
                .view
                .expect("a view");
            assert_eq!(
                then,
                serde_json::to_value(&view).expect("JSON"),
                "--at {at}"
            );
        }
        let last = (records.len() - 1).to_string();
        assert_eq!(aws.json(&["status", &id, "--at", &last, "--json"]), shown);
        let drawn = aws
            .overture(&["graph", &id, "--format", "dot", "--at", "0"])
            .output()
            .expect("graph");
        assert!(drawn.status.success(), "{}", text(&drawn.stderr));
        assert!(text(&drawn.stdout).contains("publish (pending)"));
        let drawn = aws
            .overture(&["graph", &id, "--format", "dot"])
            .output()
            .expect("graph");
        assert!(text(&drawn.stdout).contains("publish (succeeded)"));
    });

    // A failing step, retried once after its wait, then the deployment fails: exit 1.
    let flaky = embedded.blueprint("flaky.yaml", FLAKY);
    let (code, status, output) = tokio::task::block_in_place(|| aws.deploy(&flaky, None));
    assert_eq!(code, 1, "{status}\n{}", text(&output.stderr));
    assert_eq!(status["status"], "failed", "{status}");
    let on_aws = tokio::task::block_in_place(|| aws.events(status["id"].as_str().expect("id")));
    let (code, status, _) = embedded.deploy(&flaky, &[]);
    assert_eq!(code, 1);
    let there = embedded.events(status["id"].as_str().expect("an id"));
    assert_eq!(shape(&on_aws), shape(&there), "AWS: {:?}", types(&on_aws));
    assert_eq!(
        step_events(&on_aws, "flaky")
            .iter()
            .filter(|(kind, _)| kind == "StepStarted")
            .count(),
        2,
        "the failed attempt was retried once"
    );

    // Through the api function's URL, with a token of the local cloud: a deployment started
    // there runs to success, as the stack's stream drives it.
    let (_, cloud_token) = cloud.token("e2e-api");
    let hello_text = std::fs::read_to_string(&hello).expect("hello-world");
    let secret = serde_json::json!({ "api_token": token });
    let started = aws.start(&cloud_token, &hello_text, secret).await;
    let ended = aws.ended(&started).await;
    assert_eq!(ended["status"], "succeeded", "{ended}");
    // The tenant is the token's project id, its name beside it.
    assert_eq!(ended["tenant"], cloud.project("e2e-api")["id"], "{ended}");

    // A running deployment is cancelled; an ended one answers the domain's refusal.
    let sleepy = aws.start(&cloud_token, SLEEPY, serde_json::json!({})).await;
    let path = format!("/v1/deployments/{sleepy}/cancel");
    let (status, answer) = aws.post(&path, &cloud_token, &Value::Null).await;
    assert_eq!(status, 202, "{answer}");
    assert_eq!(aws.ended(&sleepy).await["status"], "cancelled");
    let (status, answer) = aws.post(&path, &cloud_token, &Value::Null).await;
    assert_eq!(
        (status, answer["code"].as_str()),
        (409, Some("conflict")),
        "{answer}"
    );

    // A failed deployment is redriven with its secret given again, and carries on from its
    // failed step: the one that succeeded does not run again.
    let open = format!("gate-{}", uuid::Uuid::new_v4().simple());
    let gate = aws
        .start(&cloud_token, GATE, serde_json::json!({ "gate": "closed" }))
        .await;
    assert_eq!(aws.ended(&gate).await["status"], "failed");
    let path = format!("/v1/deployments/{gate}/redrive");
    let body = serde_json::json!({ "secrets": { "gate": open } });
    let (status, answer) = aws.post(&path, &cloud_token, &body).await;
    assert_eq!(status, 202, "{answer}");
    assert_eq!(aws.ended(&gate).await["status"], "succeeded");
    let redriven = tokio::task::block_in_place(|| aws.events(&gate));
    let starts = |step: &str| {
        step_events(&redriven, step)
            .iter()
            .filter(|(kind, _)| kind == "StepStarted")
            .count()
    };
    assert_eq!(
        (starts("prepare"), starts("gate")),
        (1, 2),
        "{:?}",
        types(&redriven)
    );

    // `overture --backend aws cancel`: recorded with the operator's AWS credentials, carried out
    // by the stack; a second cancel is refused.
    let sleepy = aws.start(&cloud_token, SLEEPY, serde_json::json!({})).await;
    tokio::task::block_in_place(|| {
        let cancelled = within(
            DEPLOYMENT_WITHIN,
            aws.overture(&["cancel", &sleepy, "--reason", "e2e", "--json"]),
        );
        assert!(cancelled.status.success(), "{}", text(&cancelled.stderr));
        let view: Value = serde_json::from_slice(&cancelled.stdout).expect("JSON");
        assert_eq!(view["status"], "cancelled", "{view}");
        let again = aws
            .overture(&["cancel", &sleepy])
            .output()
            .expect("overture runs");
        assert_eq!(again.status.code(), Some(2), "{}", text(&again.stderr));
        assert!(
            text(&again.stderr).contains("has already ended (cancelled)"),
            "{}",
            text(&again.stderr)
        );
    });

    // `overture --backend aws redrive` and `redeploy` of a failed deployment, followed to their
    // end as `deploy` follows one.
    let gate_file = embedded.blueprint("gate.yaml", GATE);
    tokio::task::block_in_place(|| {
        let mut failing = aws.overture(&[
            "deploy",
            gate_file.to_str().expect("utf-8"),
            "--secret",
            &format!("gate={GATE_VARIABLE}"),
            "--json",
        ]);
        failing.env(GATE_VARIABLE, "closed");
        let failed = within(DEPLOYMENT_WITHIN, failing);
        assert_eq!(failed.status.code(), Some(1), "{}", text(&failed.stderr));
        let failed: Value = serde_json::from_slice(&failed.stdout).expect("JSON");
        let id = failed["id"].as_str().expect("an id");
        for command in ["redrive", "redeploy"] {
            let mut again = aws.overture(&[
                command,
                id,
                "--secret",
                &format!("gate={GATE_VARIABLE}"),
                "--json",
            ]);
            again.env(GATE_VARIABLE, &open);
            let output = within(DEPLOYMENT_WITHIN, again);
            assert!(
                output.status.success(),
                "{command}: {}",
                text(&output.stderr)
            );
            let view: Value = serde_json::from_slice(&output.stdout).expect("JSON");
            assert_eq!(view["status"], "succeeded", "{command}: {view}");
            let same = view["id"].as_str() == Some(id);
            assert_eq!(same, command == "redrive", "{command}: {view}");
        }
    });

    let api_tenant = cloud.project("e2e-api")["id"]
        .as_str()
        .expect("the project's id")
        .to_owned();
    a_published_trigger_file_deploys_once_per_event_and_chains(&aws, &cloud_token, &api_tenant)
        .await;

    // The secrets' and the token's bytes are nowhere: not in a table, a queue, an object, or a
    // log.
    for secret in [&token, &open, &cloud_token] {
        for (place, bytes) in everything_stored(&aws).await {
            assert!(!holds(&bytes, secret.as_bytes()), "a secret is in {place}");
        }
        for (path, bytes) in aws.logs() {
            assert!(
                !holds(&bytes, secret.as_bytes()),
                "a secret is in {}",
                path.display()
            );
        }
    }

    verify_names_an_item_changed_in_the_events_table(&aws, &id).await;
}

/// `overture --backend aws verify`: every stream of the events table is a whole chain, and so
/// is `id`'s; once an item of `id` is changed in the table, `verify` names it (exit 1).
async fn verify_names_an_item_changed_in_the_events_table(aws: &LocalAws, id: &str) {
    tokio::task::block_in_place(|| {
        let whole = within(DEPLOYMENT_WITHIN, aws.overture(&["verify"]));
        let said = text(&whole.stdout);
        assert!(whole.status.success(), "{}", text(&whole.stderr));
        assert!(said.contains("every chain whole"), "{said}");
        let one = within(DEPLOYMENT_WITHIN, aws.overture(&["verify", id]));
        let said = text(&one.stdout);
        assert!(one.status.success(), "{}", text(&one.stderr));
        assert!(
            said.starts_with(&format!("deployment {id}: ")) && said.contains("chain whole, head "),
            "{said}"
        );
    });

    // Who asked, changed in the table itself.
    let config =
        overture_aws::config::for_endpoint(aws.setting("AWS_ENDPOINT_URL"), "eu-west-1").await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&config);
    let table = aws.setting("OVERTURE_EVENTS_TABLE");
    let key = |name: &str, value: aws_sdk_dynamodb::types::AttributeValue| (name.to_owned(), value);
    let item = dynamodb
        .get_item()
        .table_name(table)
        .set_key(Some(
            [
                key(
                    "stream",
                    aws_sdk_dynamodb::types::AttributeValue::S(format!("deployment-{id}")),
                ),
                key(
                    "revision",
                    aws_sdk_dynamodb::types::AttributeValue::N("0".into()),
                ),
            ]
            .into(),
        ))
        .send()
        .await
        .expect("the deployment's first item")
        .item
        .expect("it exists");
    let mut metadata: Value =
        serde_json::from_str(item["metadata"].as_s().expect("the metadata as text")).expect("JSON");
    metadata["actor"] = Value::from("mallory");
    let mut edited = item.clone();
    edited.insert(
        "metadata".into(),
        aws_sdk_dynamodb::types::AttributeValue::S(metadata.to_string()),
    );
    dynamodb
        .put_item()
        .table_name(table)
        .set_item(Some(edited))
        .send()
        .await
        .expect("the item changed");

    tokio::task::block_in_place(|| {
        for args in [vec!["verify"], vec!["verify", id]] {
            let broken = within(DEPLOYMENT_WITHIN, aws.overture(&args));
            let said = text(&broken.stderr);
            assert_eq!(broken.status.code(), Some(1), "{args:?}: {said}");
            assert!(
                said.contains(&format!("deployment {id}, revision 0: "))
                    && said.contains("content was changed"),
                "{args:?}: {said}"
            );
        }
    });
}

/// Polls `look` every half second until it answers, or fails the test once `limit` has passed:
/// the functions work on their own time, and a chain that stops must fail, not hang.
fn until<T>(limit: std::time::Duration, what: &str, mut look: impl FnMut() -> Option<T>) -> T {
    let started = std::time::Instant::now();
    loop {
        if let Some(found) = look() {
            return found;
        }
        assert!(started.elapsed() < limit, "not within {limit:?}: {what}");
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
}

const RELEASE_TRIGGERS: &str = r#"triggers:
  - name: deploy-on-release
    on: { source: artifacts, type: release.published }
    where: { "data.channel": stable }
    deploy: app.yaml
    tenant: acme
    params: { version: "{{ event.data.version }}" }
  - name: smoke-after-app
    on: { source: overture, type: deployment.succeeded }
    where: { "data.blueprint": app }
    deploy: smoke.yaml
    tenant: acme
  - name: ping-for-the-api-tenant
    on: { source: api-tests, type: ping }
    deploy: smoke.yaml
    tenant: API_TENANT
"#;

const APP: &str = "name: app
params: { version: { default: none } }
steps:
  publish:
    run: script
    with: { command: 'echo publishing {{ params.version }}' }
";

const SMOKE: &str = "name: smoke\nsteps:\n  check: { run: noop }\n";

/// A published trigger file on the local AWS form: one event sent 20 times at once through
/// the queue starts one deployment (19 duplicates), whose end starts the chained one at depth
/// 1; events posted to the api function are queued for the caller's tenant only.
///
/// `api_tenant` is the token's project id: a trigger served to API callers names its tenant by
/// id, so that a same-named project of another domain cannot fire it.
async fn a_published_trigger_file_deploys_once_per_event_and_chains(
    aws: &LocalAws,
    token: &str,
    api_tenant: &str,
) {
    let dir = tempfile::tempdir().expect("a directory");
    let file = dir.path().join("triggers.yaml");
    let triggers = RELEASE_TRIGGERS.replace("tenant: API_TENANT", &format!("tenant: {api_tenant}"));
    std::fs::write(&file, &triggers).expect("the trigger file");
    std::fs::write(dir.path().join("app.yaml"), APP).expect("a blueprint");
    std::fs::write(dir.path().join("smoke.yaml"), SMOKE).expect("a blueprint");
    let path = file.to_str().expect("utf-8");

    tokio::task::block_in_place(|| {
        // A trigger file whose blueprint is missing is refused before anything is stored.
        std::fs::write(
            dir.path().join("broken.yaml"),
            triggers.replace("smoke.yaml", "gone.yaml"),
        )
        .expect("a broken file");
        let broken = dir.path().join("broken.yaml");
        let refused = aws
            .overture(&["triggers", "publish", broken.to_str().expect("utf-8")])
            .output()
            .expect("overture runs");
        assert_eq!(refused.status.code(), Some(2), "{}", text(&refused.stderr));
        assert!(
            text(&refused.stderr).contains("triggers.smoke-after-app.deploy"),
            "{}",
            text(&refused.stderr)
        );

        let published = aws
            .overture(&["triggers", "publish", path])
            .output()
            .expect("overture runs");
        assert!(published.status.success(), "{}", text(&published.stderr));

        // The same event, sent 20 times at once through the queue.
        let event = dir.path().join("release.json");
        std::fs::write(
            &event,
            r#"{"specversion": "1.0", "id": "release-7", "source": "artifacts",
                "type": "release.published", "data": {"channel": "stable", "version": "7.0"}}"#,
        )
        .expect("the event");
        let senders: Vec<_> = (0..20)
            .map(|_| {
                aws.overture(&["trigger", "send", event.to_str().expect("utf-8")])
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .expect("overture runs")
            })
            .collect();
        for sender in senders {
            let sent = sender.wait_with_output().expect("sent");
            assert!(sent.status.success(), "{}", text(&sent.stderr));
        }

        // Every delivery decided: one deployment, 19 duplicates; then the chain's smoke check.
        let log = until(
            DEPLOYMENT_WITHIN,
            "the release and the chained smoke check",
            || {
                let log = aws.json(&["triggers", "log", "--json"]);
                let decided = |trigger: &str, decision: &str| {
                    log.as_array()
                        .into_iter()
                        .flatten()
                        .filter(|d| d["trigger"] == trigger && d["decision"] == decision)
                        .count()
                };
                let release_done = decided("deploy-on-release", "deployed")
                    + decided("deploy-on-release", "duplicate")
                    == 20;
                (release_done && decided("smoke-after-app", "deployed") == 1).then_some(log)
            },
        );
        let deployed: Vec<&Value> = log
            .as_array()
            .expect("a list")
            .iter()
            .filter(|d| d["decision"] == "deployed")
            .collect();
        assert_eq!(deployed.len(), 2, "{log:#}");
        assert_eq!(deployed[0]["trigger"], "deploy-on-release", "{log:#}");

        for decision in deployed {
            let id = decision["deployment"].as_str().expect("an id");
            let status = until(DEPLOYMENT_WITHIN, "the triggered deployment's end", || {
                // No view until the projector has read its first events.
                let shown = aws.overture(&["status", id, "--json"]).output().ok()?;
                let status: Value = serde_json::from_slice(&shown.stdout).ok()?;
                (status["status"] != "running").then_some(status)
            });
            assert_eq!(status["status"], "succeeded", "{status}");
        }
        let smoke = log
            .as_array()
            .expect("a list")
            .iter()
            .find(|d| d["trigger"] == "smoke-after-app" && d["decision"] == "deployed")
            .and_then(|d| d["deployment"].as_str())
            .expect("the smoke check's deployment");
        let requested = aws.events(smoke).into_iter().next().expect("its request");
        assert_eq!(requested["type"], "DeploymentRequested");
        assert_eq!(
            requested["data"]["triggered_by"]["trigger"],
            "smoke-after-app"
        );
        assert_eq!(requested["data"]["triggered_by"]["source"], "overture");
        assert_eq!(requested["data"]["triggered_by"]["depth"], 1);
    });

    // Through the api function: queued for the caller's tenant, whose triggers alone deploy.
    let event = |source: &str, id: &str, kind: &str| {
        serde_json::json!({"specversion": "1.0", "id": id, "source": source, "type": kind,
                           "data": {"channel": "stable", "version": "8.0"}})
    };
    let (status, answer) = aws
        .post("/v1/events", token, &event("api-tests", "ping-1", "ping"))
        .await;
    assert_eq!(status, 202, "{answer}");
    assert!(answer["queued"].is_string(), "{answer}");
    // In binary mode, as the CloudEvents SDKs send by default: the function reads it as the
    // embedded server does, and queues it in the JSON format.
    let binary = reqwest::Client::new()
        .post(aws.api_url("/v1/events"))
        .header("X-Auth-Token", token)
        .header("ce-specversion", "1.0")
        .header("ce-id", "release-8")
        .header("ce-source", "artifacts")
        .header("ce-type", "release.published")
        .header("Content-Type", "application/json")
        .body(r#"{"channel": "stable", "version": "8.0"}"#)
        .timeout(DEPLOYMENT_WITHIN)
        .send()
        .await
        .expect("POST /v1/events in binary mode");
    assert_eq!(binary.status(), 202);
    let answer: Value = binary.json().await.expect("JSON");
    assert_eq!(answer["id"], "release-8", "{answer}");
    assert!(answer["queued"].is_string(), "{answer}");
    let (status, answer) = aws
        .post("/v1/events", token, &serde_json::json!({"id": 1}))
        .await;
    assert_eq!(status, 400, "{answer}");
    tokio::task::block_in_place(|| {
        let log = until(DEPLOYMENT_WITHIN, "the api's events decided", || {
            let log = aws.json(&["triggers", "log", "--json"]);
            let decided = |trigger: &str, id: &str| {
                log.as_array()?
                    .iter()
                    .find(|d| d["trigger"] == trigger && d["event_id"] == id)
                    .cloned()
            };
            Some((
                decided("ping-for-the-api-tenant", "ping-1")?,
                decided("deploy-on-release", "release-8")?,
            ))
        });
        assert_eq!(log.0["decision"], "deployed", "{:?}", log.0);
        assert_eq!(log.1["decision"], "refused", "{:?}", log.1);
        assert!(
            log.1["reason"]
                .as_str()
                .is_some_and(|r| r.contains(&format!("caller's tenant `{api_tenant}`"))),
            "{:?}",
            log.1
        );
    });
}
