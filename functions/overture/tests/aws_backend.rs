//! `overture --backend aws` reads the serverless form's tables and prints exactly what the
//! embedded engine prints for the same events: the events are written to DynamoDB in the local
//! AWS emulator and folded there by the projector's handler, the very same envelopes are written
//! to an embedded data directory, and the two programs' outputs are compared (the service
//! registry's among them).

#[path = "../../../infra/aws/tests/support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;

use overture_aws::dynamodb::{create_events_table, DynamoDeployments};
use overture_aws::read_models::{create_read_model_tables, DynamoReadModels};
use overture_domain::blueprint::parse;
use overture_events::{DeploymentEvent, DeploymentId, Timestamp};
use overture_infra::sqlite::{Database, EventLog, ExpectedRevision, NewEvent};
use overture_kit::SystemClock;
use overture_kit::{Cause, DeploymentLog, ReadStream};
use overture_local_aws::setup::{local_caller_arn, local_credentials, LOCAL_ACCOUNT};

const REGION: &str = "eu-west-1";
const EVENTS: &str = "cli-events";
const DEPLOYMENTS: &str = "cli-deployments";
const TENANTS: &str = "cli-tenants";

fn requested(tenant: &str) -> DeploymentEvent {
    DeploymentEvent::DeploymentRequested {
        triggered_by: None,
        tenant: tenant.into(),
        requested_by: "ada".into(),
        trigger: "cli".into(),
        source: "hello.yaml".into(),
        blueprint: parse("name: hello\nsteps:\n  build: { run: noop }\n")
            .expect("valid")
            .snapshot,
        blueprint_hash: "h".into(),
        params: BTreeMap::new(),
        cloud: None,
        name: None,
    }
}

/// A deployment that ran its one step and succeeded.
fn succeeded(tenant: &str) -> Vec<DeploymentEvent> {
    vec![
        requested(tenant),
        DeploymentEvent::StepScheduled {
            step: "build".into(),
            attempt: 1,
            not_before: Timestamp::UNIX_EPOCH,
        },
        DeploymentEvent::StepStarted {
            step: "build".into(),
            attempt: 1,
            sandbox: "sandbox-1".into(),
            lease_until: None,
            fingerprint: None,
        },
        DeploymentEvent::StepSucceeded {
            step: "build".into(),
            attempt: 1,
            outputs: BTreeMap::from([("greeting".into(), "hello".into())]),
            duration_ms: 1200,
        },
        DeploymentEvent::DeploymentSucceeded {},
    ]
}

/// Two deployments of two tenants, one ended and one running, on DynamoDB (folded into its read
/// models by the projector's handler) and in an embedded data directory: the same envelopes.
async fn the_same_deployments_on_both(data_dir: &Path) -> [DeploymentId; 2] {
    let config = overture_aws::config::for_endpoint(support::emulator(), REGION).await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&config);
    create_events_table(&dynamodb, EVENTS).await.expect("table");
    create_read_model_tables(&dynamodb, DEPLOYMENTS, TENANTS)
        .await
        .expect("tables");
    let log = DynamoDeployments::new(dynamodb.clone(), EVENTS, Arc::new(SystemClock));
    let views = DynamoReadModels::new(dynamodb, DEPLOYMENTS, TENANTS);
    let embedded = EventLog::new(
        Database::open(data_dir.join("overture.db"))
            .await
            .expect("database"),
    );

    let mut ids = Vec::new();
    for (tenant, events) in [
        ("acme", succeeded("acme")),
        (
            "globex",
            vec![
                requested("globex"),
                DeploymentEvent::ServiceRegistered {
                    service: "app".into(),
                    step: "build".into(),
                    host: "app-1".into(),
                    address: "10.0.0.9".into(),
                    port: 8000,
                },
            ],
        ),
    ] {
        let id = DeploymentId::from_uuid(uuid::Uuid::now_v7());
        let cause = Cause::new("ada", id, id.uuid());
        log.append(id, tenant, None, events, &cause)
            .await
            .expect("appended");
        let envelopes = log.read_stream(id, 0).await.expect("read");
        overture_projector::project_stream(id, &envelopes, &log, &views)
            .await
            .expect("projected");
        let copies = envelopes
            .into_iter()
            .map(|e| NewEvent {
                id: e.id,
                event_type: e.event_type,
                data: e.data,
                metadata: e.metadata,
            })
            .collect();
        embedded
            .append(&id.stream(), ExpectedRevision::NoStream, copies)
            .await
            .expect("copied");
        ids.push(id);
    }
    [ids[0], ids[1]]
}

fn overture(args: &[&str], env: &[(&str, &str)], data_dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_overture"))
        .args(args)
        .env_remove("OVERTURE_BACKEND")
        .env("OVERTURE_DATA_DIR", data_dir)
        .env("AWS_ACCESS_KEY_ID", "overture-local")
        .env("AWS_SECRET_ACCESS_KEY", "overture-local")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .envs(env.iter().copied())
        .output()
        .expect("overture runs")
}

fn aws_settings() -> Vec<(&'static str, &'static str)> {
    vec![
        ("OVERTURE_BACKEND", "aws"),
        ("AWS_ENDPOINT_URL", support::emulator()),
        ("AWS_REGION", REGION),
        ("OVERTURE_EVENTS_TABLE", EVENTS),
        ("OVERTURE_DEPLOYMENTS_TABLE", DEPLOYMENTS),
        ("OVERTURE_TENANTS_TABLE", TENANTS),
    ]
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[tokio::test]
async fn the_aws_backend_prints_what_the_embedded_engine_prints_for_the_same_events() {
    let dir = tempfile::tempdir().expect("a data directory");
    let [ended, running] = the_same_deployments_on_both(dir.path()).await;
    let (ended, running) = (ended.to_string(), running.to_string());
    let settings = aws_settings();
    // An instant between the step's start and its success, as the log recorded them.
    let events = overture(&["events", &ended, "--json"], &[], dir.path());
    let recorded: Vec<Timestamp> = text(&events.stdout)
        .lines()
        .map(|line| {
            let envelope: serde_json::Value = serde_json::from_str(line).expect("an envelope");
            envelope["metadata"]["recorded_at"]
                .as_str()
                .expect("a time")
                .parse()
                .expect("RFC 3339")
        })
        .collect();
    let started = recorded[2].to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true);

    let commands: Vec<Vec<&str>> = vec![
        vec!["status", &ended, "--json"],
        vec!["status", &running, "--json"],
        vec!["status", &ended],
        vec!["status", &ended, "--at", "0", "--json"],
        vec!["status", &ended, "--at", "2", "--json"],
        vec!["status", &ended, "--at", "4", "--json"],
        vec!["status", &ended, "--at", "3"],
        vec!["status", &ended, "--at", &started, "--json"],
        vec!["graph", &ended],
        vec!["graph", &ended, "--at", "2", "--format", "dot"],
        vec!["graph", &running, "--at", "0"],
        vec!["list", "--json"],
        vec!["list"],
        vec!["list", "--tenant", "acme", "--json"],
        vec!["list", "--status", "running", "--json"],
        vec!["tenants", "--json"],
        vec!["tenants"],
        vec!["events", &ended, "--json"],
        vec!["events", &ended],
        vec!["grants", "--json"],
        vec!["services", "--json"],
        vec!["services"],
        vec!["services", "--tenant", "globex"],
        vec!["replay", "--check"],
    ];
    for args in commands {
        let embedded = overture(&args, &[], dir.path());
        let aws = overture(&args, &settings, dir.path());
        assert_eq!(
            embedded.status.code(),
            Some(0),
            "{args:?} embedded: {}",
            text(&embedded.stderr)
        );
        assert_eq!(
            aws.status.code(),
            Some(0),
            "{args:?} aws: {}",
            text(&aws.stderr)
        );
        assert!(!embedded.stdout.is_empty(), "{args:?} printed nothing");
        assert_eq!(
            text(&aws.stdout),
            text(&embedded.stdout),
            "{args:?}: the backends differ"
        );
    }

    let services = overture(&["services", "--json"], &settings, dir.path());
    let services: serde_json::Value = serde_json::from_slice(&services.stdout).expect("JSON");
    assert_eq!(
        services["tenants"][0]["services"][0]["instances"][0]["member"], "10.0.0.9:8000",
        "{services}"
    );

    // Time travel folds the log, so it agrees with the stored view at the last revision and
    // refuses a revision past it alike on both.
    let now = overture(&["status", &ended, "--json"], &settings, dir.path());
    let then = overture(
        &["status", &ended, "--at", "4", "--json"],
        &settings,
        dir.path(),
    );
    assert_eq!(text(&then.stdout), text(&now.stdout));
    let then = overture(
        &["status", &ended, "--at", &started, "--json"],
        &[],
        dir.path(),
    );
    let then: serde_json::Value = serde_json::from_slice(&then.stdout).expect("JSON");
    assert!(then["revision"].as_u64() >= Some(2), "{then}");
    for env in [&[][..], &settings[..]] {
        let output = overture(&["status", &ended, "--at", "5"], env, dir.path());
        assert_eq!(output.status.code(), Some(2), "{}", text(&output.stderr));
        assert!(
            text(&output.stderr).contains("revisions 0 to 4"),
            "{}",
            text(&output.stderr)
        );
    }

    // Attempts' output is in the payloads bucket, which these settings do not name: bad input
    // that says which setting is missing, not a crash.
    let output = overture(&["logs", &ended, "build"], &settings, dir.path());
    assert_eq!(output.status.code(), Some(2), "{}", text(&output.stderr));
    assert!(
        text(&output.stderr).contains("set OVERTURE_PAYLOADS_BUCKET"),
        "{}",
        text(&output.stderr)
    );

    // An unknown deployment is bad input on both.
    let unknown = DeploymentId::from_uuid(uuid::Uuid::now_v7()).to_string();
    for env in [&[][..], &settings[..]] {
        let output = overture(&["status", &unknown, "--json"], env, dir.path());
        assert_eq!(output.status.code(), Some(2), "{}", text(&output.stderr));
        assert!(text(&output.stderr).contains(&unknown));
    }
}

#[tokio::test]
async fn the_aws_backend_names_a_missing_setting_and_refuses_what_it_does_not_do() {
    let dir = tempfile::tempdir().expect("a data directory");
    let settings = aws_settings();
    let without: Vec<_> = settings
        .iter()
        .copied()
        .filter(|(name, _)| *name != "OVERTURE_TENANTS_TABLE")
        .collect();
    let output = Command::new(env!("CARGO_BIN_EXE_overture"))
        .args(["tenants"])
        .env_remove("OVERTURE_TENANTS_TABLE")
        .env("OVERTURE_DATA_DIR", dir.path())
        .envs(without)
        .output()
        .expect("overture runs");
    assert_eq!(output.status.code(), Some(2));
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("OVERTURE_TENANTS_TABLE") && stderr.contains(".overture/local-aws.env"),
        "{stderr}"
    );

    for args in [
        &["resume"][..],
        &["cloud", "status"][..],
        &["replay"][..],
        &["destroy", "0190a0a0-0000-7000-8000-000000000000"][..],
    ] {
        let output = overture(args, &settings, dir.path());
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        assert!(
            text(&output.stderr).contains("only with the embedded backend"),
            "{args:?}: {}",
            text(&output.stderr)
        );
    }
}

/// `cargo lambda watch` serving the functions, in its own process group, ended (the group, by
/// its id) when dropped.
struct Watch {
    child: std::process::Child,
    port: u16,
}

impl Drop for Watch {
    fn drop(&mut self) {
        if let Ok(group) = i32::try_from(self.child.id()) {
            // SAFETY: signals the process group this test made for the child it started.
            unsafe { libc::kill(-group, libc::SIGTERM) };
        }
        let _ = self.child.wait();
    }
}

/// Starts `cargo lambda watch` on a free port of 127.0.0.1 with `settings`, and returns once it
/// listens.
fn watch(settings: &[(&str, &str)]) -> Watch {
    use std::os::unix::process::CommandExt;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let child = Command::new("cargo")
        .args(["lambda", "watch", "--ignore-changes"])
        .args([
            "--invoke-address",
            "127.0.0.1",
            "--invoke-port",
            &port.to_string(),
        ])
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .env("AWS_ACCESS_KEY_ID", "overture-local")
        .env("AWS_SECRET_ACCESS_KEY", "overture-local")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .envs(settings.iter().copied())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .spawn()
        .expect("cargo lambda (scripts/setup.sh installs it)");
    let watch = Watch { child, port };
    let started = std::time::Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(120),
            "cargo lambda watch never listened"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    watch
}

#[tokio::test]
async fn deploy_on_aws_submits_through_the_function_and_follows_the_log_to_the_end() {
    use std::io::{BufRead, Read};

    let config = overture_aws::config::for_endpoint(support::emulator(), REGION).await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&config);
    create_events_table(&dynamodb, EVENTS).await.expect("table");
    create_read_model_tables(&dynamodb, DEPLOYMENTS, TENANTS)
        .await
        .expect("tables");
    let key = support::kms_key(&aws_sdk_kms::Client::new(&config)).await;
    let mut settings = aws_settings();
    let watch = watch(
        &[
            settings.clone(),
            vec![
                ("OVERTURE_CUSTODY_TABLE", "cli-custody"),
                ("OVERTURE_SEALS_TABLE", "cli-seals"),
                ("OVERTURE_PAYLOADS_BUCKET", "cli-payloads"),
                ("OVERTURE_KMS_KEY", key),
            ],
        ]
        .concat(),
    );
    // The submit URL takes AWS_IAM auth; cargo lambda watch checks none, so the local door
    // stands in front of it, as `make local-aws` has it. On a thread of its own: this test
    // blocks its runtime reading the command's progress.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let door = listener.local_addr().expect("the door's address");
    listener.set_nonblocking(true).expect("non-blocking");
    let invoke = format!("http://127.0.0.1:{}", watch.port);
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("the door's runtime");
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).expect("the listener");
            let door = overture_local_aws::urls::Door {
                invoke,
                functions: vec!["submit".to_owned()],
                region: REGION.to_owned(),
                account: LOCAL_ACCOUNT.to_owned(),
                known: vec![(local_credentials(), local_caller_arn())],
                timeout: std::time::Duration::from_secs(300),
            };
            overture_local_aws::urls::serve(door, listener).await
        })
    });
    let url = format!("http://{door}/lambda-url/submit/deployments");
    settings.push(("OVERTURE_SUBMIT_URL", &url));
    let dir = tempfile::tempdir().expect("a directory");
    let blueprint = dir.path().join("hello.yaml");
    std::fs::write(&blueprint, "name: hello\nsteps:\n  build: { run: noop }\n").expect("blueprint");

    let mut deploy = Command::new(env!("CARGO_BIN_EXE_overture"))
        .args(["deploy", &blueprint.display().to_string(), "--json"])
        .env("OVERTURE_DATA_DIR", dir.path())
        .env("AWS_ACCESS_KEY_ID", "overture-local")
        .env("AWS_SECRET_ACCESS_KEY", "overture-local")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .envs(settings.iter().copied())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("overture runs");
    let mut progress = std::io::BufReader::new(deploy.stderr.take().expect("stderr"));
    let mut shown = String::new();
    let id: DeploymentId = loop {
        let mut line = String::new();
        let read = progress.read_line(&mut line).expect("stderr");
        assert!(
            read > 0,
            "overture ended before naming the deployment: {shown}"
        );
        shown.push_str(&line);
        if let Some(id) = line.trim().strip_prefix("deployment ") {
            break id.parse().expect("a deployment id");
        }
    };

    // The functions' part, played here: the step the submit scheduled runs and the deployment
    // ends.
    let log = DynamoDeployments::new(dynamodb, EVENTS, Arc::new(SystemClock));
    let recorded = log.load(id).await.expect("the submit's records");
    // The tenant is the signer's account, never one the caller names.
    let rest = succeeded(LOCAL_ACCOUNT).split_off(2);
    log.append(
        id,
        LOCAL_ACCOUNT,
        recorded.revision,
        rest,
        &Cause::new("runner", id, id.uuid()),
    )
    .await
    .expect("appended");

    let output = deploy.wait_with_output().expect("overture ends");
    progress
        .read_to_string(&mut shown)
        .expect("the rest of stderr");
    assert_eq!(output.status.code(), Some(0), "{shown}");
    let status: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON status");
    assert_eq!(status["id"], id.to_string());
    assert_eq!(status["status"], "succeeded", "{status}");
    assert_eq!(status["steps"]["build"]["status"], "succeeded", "{status}");
    assert!(
        shown.contains(&format!(
            "deployment of `hello` for tenant `{LOCAL_ACCOUNT}`"
        )) && shown.contains("build")
            && shown.contains("succeeded"),
        "the progress lines: {shown}"
    );
}
