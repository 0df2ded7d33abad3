//! What a deployment asks of AWS, counted on the local AWS form, and what that costs.
//!
//! `scripts/local-aws.sh up` (what `make local-aws` runs) starts the emulator, the stack, the
//! functions under `cargo lambda watch` and the poller, on ports and in a directory of the
//! benchmark's own. One `examples/hello-world` deployment warms the functions up (they are
//! built on their first invocation); then [`DEPLOYMENTS`] more run one after the other through
//! `overture --backend aws deploy`, and the counts of those are read back: the Lambda
//! invocations the poller made (`invocations.json`), and every request the functions made of the
//! emulator with the DynamoDB request units they would cost (`GET /overture/requests`, by the
//! app id each client sets). The command line's own reads, while it follows a deployment, are
//! counted apart and left out: they cost what watching costs, not what deploying does.
//!
//! Prices are AWS's list prices in us-east-1 (on-demand DynamoDB, standard SQS, x86 Lambda,
//! Fargate), as of 2026; the counts are measured, the prices are the only figures taken from
//! elsewhere, and Lambda's duration is the one estimate (see [`LAMBDA_GB_SECONDS`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Context;
use overture_aws::emulator::{self, AppRequests};

/// Deployments counted, after the warm-up.
pub const DEPLOYMENTS: usize = 5;
/// The steps of `examples/hello-world`.
pub const STEPS: usize = 4;

/// $ per Lambda request.
const LAMBDA_REQUEST: f64 = 0.20 / 1e6;
/// $ per GB-second of Lambda (x86).
const LAMBDA_GB_SECOND: f64 = 0.000_016_666_7;
/// The one estimate: GB-seconds per invocation (256 MB for 100 ms). The local functions'
/// durations say nothing of Lambda's (the local runner runs the step itself), so this is
/// assumed, not measured; at this size it is about as much again as the request price.
const LAMBDA_GB_SECONDS: f64 = 0.25 * 0.1;
/// $ per DynamoDB write request unit, on demand.
const DYNAMODB_WRITE_UNIT: f64 = 0.625 / 1e6;
/// $ per DynamoDB read request unit, on demand.
const DYNAMODB_READ_UNIT: f64 = 0.125 / 1e6;
/// $ per SQS request (standard queue, each 64 KB chunk).
const SQS_REQUEST: f64 = 0.40 / 1e6;
/// $ per KMS request.
const KMS_REQUEST: f64 = 0.03 / 1e4;
/// $ per S3 PUT, COPY, POST or LIST request.
const S3_WRITE: f64 = 0.005 / 1e3;
/// $ per S3 GET and every other request.
const S3_READ: f64 = 0.0004 / 1e3;
/// $ per step on Fargate: 0.25 vCPU and 0.5 GB for the one-minute minimum.
const FARGATE_STEP: f64 = (0.25 * 0.040_48 + 0.5 * 0.004_445) / 60.0;
/// $ per Step Functions Standard state transition.
const STEP_FUNCTIONS_TRANSITION: f64 = 0.025 / 1e3;
/// State transitions of hello-world as a Standard state machine: compose, a Parallel state
/// with its two branches' tasks, publish, the purge, and the final Succeed state, each entered
/// once, plus the start.
const STEP_FUNCTIONS_TRANSITIONS: f64 = 8.0;

/// What the counted deployments asked of AWS, in all.
#[derive(Clone, Debug)]
pub struct AwsCosts {
    /// Deployments counted.
    pub deployments: usize,
    /// How long each took, from `overture deploy` to its end, on average.
    pub wall: Duration,
    /// Lambda invocations, by function.
    pub invocations: BTreeMap<String, u64>,
    /// The functions' requests.
    pub functions: AppRequests,
}

impl AwsCosts {
    fn per_deployment(&self, count: u64) -> f64 {
        count as f64 / self.deployments as f64
    }

    /// Lambda invocations per deployment.
    pub fn invocations(&self) -> f64 {
        self.per_deployment(self.invocations.values().sum())
    }

    /// DynamoDB write request units per deployment.
    pub fn write_units(&self) -> f64 {
        self.per_deployment(self.functions.dynamodb_write_units)
    }

    /// DynamoDB read request units per deployment.
    pub fn read_units(&self) -> f64 {
        self.per_deployment(self.functions.dynamodb_read_units)
    }

    /// SQS requests per deployment: the functions' own (sends, visibility changes), and for
    /// each message sent one receive and one delete, as the trigger makes them on AWS (the
    /// local poller's receives include its empty long polls, which AWS bills per queue and
    /// hour, not per deployment).
    pub fn sqs_requests(&self) -> f64 {
        let own = self.functions.count("sqs", |_| true);
        let messages = self
            .functions
            .count("sqs", |op| op == "SendMessage" || op == "SendMessageBatch");
        self.per_deployment(own + 2 * messages)
    }

    /// KMS requests per deployment.
    pub fn kms_requests(&self) -> f64 {
        self.per_deployment(self.functions.count("kms", |_| true))
    }

    /// S3 writes (PUT, POST, DELETE, LIST) and reads per deployment.
    pub fn s3_requests(&self) -> (f64, f64) {
        let writes = self
            .functions
            .count("s3", |op| matches!(op, "PUT" | "POST" | "DELETE"));
        let reads = self.functions.count("s3", |_| true) - writes;
        (self.per_deployment(writes), self.per_deployment(reads))
    }

    /// The orchestration's cost of 1,000 deployments: functions, tables, queues, keys, objects.
    pub fn per_thousand(&self) -> f64 {
        let (s3_writes, s3_reads) = self.s3_requests();
        let one = self.invocations() * (LAMBDA_REQUEST + LAMBDA_GB_SECONDS * LAMBDA_GB_SECOND)
            + self.write_units() * DYNAMODB_WRITE_UNIT
            + self.read_units() * DYNAMODB_READ_UNIT
            + self.sqs_requests() * SQS_REQUEST
            + self.kms_requests() * KMS_REQUEST
            + s3_writes * S3_WRITE
            + s3_reads * S3_READ;
        one * 1000.0
    }

    /// The steps' own compute on Fargate, for 1,000 deployments.
    pub fn steps_per_thousand(&self) -> f64 {
        FARGATE_STEP * STEPS as f64 * 1000.0
    }

    /// Step Functions Standard's transitions alone, for 1,000 deployments.
    pub fn step_functions_per_thousand(&self) -> f64 {
        STEP_FUNCTIONS_TRANSITION * STEP_FUNCTIONS_TRANSITIONS * 1000.0
    }
}

/// The local AWS form of the benchmark, stopped (by the script, by PID) when dropped.
struct LocalAws {
    state: tempfile::TempDir,
    ports: (u16, u16),
    settings: Vec<(String, String)>,
}

impl LocalAws {
    fn up(root: &Path) -> anyhow::Result<Self> {
        let state = tempfile::tempdir().context("a state directory")?;
        let mut local = Self {
            state,
            ports: (free_port()?, free_port()?),
            settings: Vec::new(),
        };
        // Dropped on every path from here: what did start is stopped.
        let up = local.script(root, "up")?;
        anyhow::ensure!(
            up.status.success(),
            "scripts/local-aws.sh up failed: {}",
            String::from_utf8_lossy(&up.stderr)
        );
        let exports = std::fs::read_to_string(local.state.path().join("local-aws.env"))
            .context("reading the settings local-aws.sh wrote")?;
        local.settings = exports
            .lines()
            .filter_map(|line| line.strip_prefix("export "))
            .filter_map(|line| line.split_once('='))
            .map(|(name, value)| (name.to_owned(), value.trim_matches('\'').to_owned()))
            .collect();
        Ok(local)
    }

    fn script(&self, root: &Path, command: &str) -> anyhow::Result<std::process::Output> {
        Command::new(root.join("scripts/local-aws.sh"))
            .arg(command)
            .current_dir(root)
            .env("OVERTURE_LOCAL_STATE", self.state.path().join("local-aws"))
            .env("OVERTURE_LOCAL_AWS_PORT", self.ports.0.to_string())
            .env("OVERTURE_LOCAL_LAMBDA_PORT", self.ports.1.to_string())
            .env("OVERTURE_LOCAL_STACK", "overture-bench")
            .output()
            .context("running scripts/local-aws.sh")
    }

    fn setting(&self, name: &str) -> anyhow::Result<&str> {
        self.settings
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, value)| value.as_str())
            .with_context(|| format!("{name} is not among the local AWS settings"))
    }

    fn invocations(&self) -> anyhow::Result<BTreeMap<String, u64>> {
        let file = self.state.path().join("local-aws/invocations.json");
        match std::fs::read(&file) {
            Ok(bytes) => serde_json::from_slice(&bytes).context("reading invocations.json"),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
            Err(error) => Err(error).context("reading invocations.json"),
        }
    }

    /// Deploys hello-world with `overture --backend aws`, its requests marked as the command
    /// line's.
    fn deploy(&self, overture: &Path, blueprint: &Path) -> anyhow::Result<()> {
        let output = Command::new(overture)
            .args(["--backend", "aws", "deploy"])
            .arg(blueprint)
            .args(["--json", "--secret", "api_token=OVERTURE_BENCH_TOKEN"])
            .envs(self.settings.iter().map(|(n, v)| (n, v)))
            .env("OVERTURE_BENCH_TOKEN", "bench-token")
            .env("AWS_SDK_UA_APP_ID", "overture-cli")
            .output()
            .context("running overture deploy")?;
        anyhow::ensure!(
            output.status.success(),
            "overture --backend aws deploy failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        Ok(())
    }
}

impl Drop for LocalAws {
    fn drop(&mut self) {
        let root = workspace_root();
        if let Err(error) = self.script(&root, "down") {
            eprintln!("local-aws.sh down: {error:#}");
        }
    }
}

pub(crate) fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .context("a free port")?
        .port())
}

/// Runs the warm-up and [`DEPLOYMENTS`] counted deployments of hello-world on the local AWS form.
pub async fn aws_costs(overture: &Path) -> anyhow::Result<AwsCosts> {
    let root = workspace_root();
    let blueprint = root.join("examples/hello-world/blueprint.yaml");
    let local = LocalAws::up(&root)?;
    let endpoint = local.setting("AWS_ENDPOINT_URL")?.to_owned();
    local.deploy(overture, &blueprint)?;

    emulator::reset_requests(&endpoint).await?;
    let before = local.invocations()?;
    let started = Instant::now();
    for _ in 0..DEPLOYMENTS {
        local.deploy(overture, &blueprint)?;
    }
    let wall = started.elapsed() / DEPLOYMENTS as u32;
    let requests = emulator::requests(&endpoint).await?;
    let mut invocations = local.invocations()?;
    for (function, count) in &mut invocations {
        *count -= before.get(function).copied().unwrap_or(0);
    }
    Ok(AwsCosts {
        deployments: DEPLOYMENTS,
        wall,
        invocations,
        functions: requests.of("overture-functions"),
    })
}
