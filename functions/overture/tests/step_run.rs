//! `overture step-run`, the step task's entrypoint, as a Fargate task runs it: the runner's
//! [`FargateSteps`] starts an attempt against the local AWS emulator (it seals the job into S3
//! and starts the task, which the emulator's ECS records but runs no container for), the real
//! `overture step-run` process stands in for the container with the task's AWS settings in its
//! environment, and [`FargateSteps::wait`] reads back what it left, as the runner does.

#[path = "../../../infra/aws/tests/support/ecs.rs"]
mod ecs;
use ecs::{never, step_cluster, Log, StepCluster};
#[path = "../../../infra/aws/tests/support/mod.rs"]
mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Output;
use std::time::Duration;

use overture_aws::fargate::StartedStep;
use overture_events::DeploymentId;
use overture_runner::{OutputsFile, SandboxExit, SandboxJob};
use secrecy::SecretString;

const REGION: &str = "eu-west-1";
const CLUSTER: &str = "overture-steps";
const FAMILY: &str = "overture-step";
const BUCKET: &str = "overture-step-run";
const TOKEN: &str = "gAAAAAB-users-cloud-token-5c1f";
const PASSWORD: &str = "db-password-in-a-file-93be";
/// The task role's credentials path, as ECS sets it in the container's environment.
const CREDENTIALS_URI: &str = "/v2/credentials/8d1e5a4c-task-role";
/// Whom the commands run as when the test runs as root: uids no process of this machine has,
/// one per test, since the tests run side by side and the entrypoint kills every process of
/// its step's user (in a task, the only step there is).
const FIRST_UID: u32 = 64120;

async fn fixture() -> StepCluster {
    step_cluster(REGION, CLUSTER, FAMILY, BUCKET).await
}

/// A Terraform step's job as the runner prepares it: a secret in a variable, one in a file.
fn job(deployment: DeploymentId, command: &str, log: Log) -> SandboxJob {
    SandboxJob {
        id: format!("{deployment}-network-1"),
        command: command.to_owned(),
        env: vec![
            ("OVERTURE_DEPLOYMENT".to_owned(), deployment.to_string()),
            ("OVERTURE_STEP".to_owned(), "network".to_owned()),
            ("OVERTURE_ATTEMPT".to_owned(), "1".to_owned()),
            ("TF_IN_AUTOMATION".to_owned(), "1".to_owned()),
        ],
        secret_env: vec![("OS_TOKEN".to_owned(), SecretString::from(TOKEN))],
        files: vec![(
            "vars/terraform.tfvars".into(),
            format!("db_password = \"{PASSWORD}\"\n").into_bytes(),
        )],
        collect: vec!["terraform.tfstate".into(), "seen.env".into()],
        network: true,
        engine_program: false,
        timeout: Duration::from_secs(3600),
        output_limit: 64 * 1024,
        log: Some(Box::new(log)),
        masked: vec![SecretString::from(TOKEN), SecretString::from(PASSWORD)],
        limits: Default::default(),
        network_policy: None,
    }
}

fn input_key(started: &StartedStep) -> String {
    format!("{}input.sealed", started.attempt().prefix())
}

/// A work directory the step's user can reach: the temporary directory is private to root.
fn work_dir() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
        .expect("opened to the step's user");
    let work = dir.path().join("work");
    (dir, work)
}

fn running_as_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Runs `overture step-run` as the task's container would, with the task's AWS settings (and
/// the task role's credentials path) in its environment.
async fn step_run(input: &str, work: &Path, uid: u32) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_overture"))
        .args([
            "step-run",
            "--bucket",
            BUCKET,
            "--input",
            input,
            "--work-dir",
        ])
        .arg(work)
        .args(["--user", &uid.to_string()])
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("AWS_ENDPOINT_URL", support::emulator())
        .env("AWS_REGION", REGION)
        .env("AWS_ACCESS_KEY_ID", "overture-local")
        .env("AWS_SECRET_ACCESS_KEY", "overture-local")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", CREDENTIALS_URI)
        .kill_on_drop(true)
        .output()
        .await
        .expect("overture step-run runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn assert_keeps_secrets(output: &Output) {
    for secret in [TOKEN, PASSWORD, CREDENTIALS_URI] {
        assert!(
            !text(&output.stderr).contains(secret),
            "stderr shows {secret}: {}",
            text(&output.stderr)
        );
    }
}

#[tokio::test]
async fn the_step_runs_with_its_variables_and_files_but_no_aws_credentials_and_its_result_comes_back(
) {
    let fixture = fixture().await;
    let log = Log::default();
    let command = r#"
        echo "Applying as uid $(id -u) in $PWD"
        env > seen.env
        echo "the token is ${#OS_TOKEN} characters long"
        grep -c db_password vars/terraform.tfvars
        echo "token $OS_TOKEN"; cat vars/terraform.tfvars
        printf 'network_id=net-42\n' >> "$OVERTURE_OUTPUTS"
        printf '{"serial":1}' > terraform.tfstate
        echo "Apply complete! Resources: 1 added." >&2
    "#;
    let deployment = DeploymentId::from_uuid(uuid::Uuid::now_v7());
    let started = fixture
        .steps
        .start(job(deployment, command, log.clone()))
        .await
        .expect("started");
    let (_dir, work) = work_dir();

    let ran = step_run(&input_key(&started), &work, FIRST_UID).await;
    assert_eq!(ran.status.code(), Some(0), "{}", text(&ran.stderr));
    assert_keeps_secrets(&ran);

    let result = fixture.steps.wait(started, never()).await.expect("stopped");
    // The emulator's ECS reports exit code 0 for every task; the process's code is above.
    assert_eq!(result.exit, SandboxExit::Code(0));
    let uid = if running_as_root() {
        FIRST_UID.to_string()
    } else {
        // SAFETY: getuid has no preconditions.
        unsafe { libc::getuid() }.to_string()
    };
    let expected = format!(
        "Applying as uid {uid} in {}\nthe token is {} characters long\n1\ntoken ***\n\
         db_password = \"***\"\nApply complete! Resources: 1 added.\n",
        work.display(),
        TOKEN.len()
    );
    assert_eq!(
        log.text(),
        expected,
        "the attempt's log is the command's output"
    );
    assert_eq!(
        text(&ran.stdout),
        expected,
        "CloudWatch Logs gets it all as it comes, the secrets masked"
    );
    assert_eq!(
        result.outputs_file,
        OutputsFile::Read(b"network_id=net-42\n".to_vec())
    );
    let collected: std::collections::BTreeMap<_, _> = result.collected.into_iter().collect();
    assert_eq!(
        collected.get(Path::new("terraform.tfstate")),
        Some(&b"{\"serial\":1}".to_vec())
    );
    let seen = text(
        collected
            .get(Path::new("seen.env"))
            .expect("its environment"),
    );
    let mut names: Vec<&str> = seen
        .lines()
        .filter_map(|line| line.split_once('=').map(|(name, _)| name))
        // What the shell sets itself.
        .filter(|name| !["PWD", "OLDPWD", "SHLVL", "_"].contains(name))
        .collect();
    names.sort_unstable();
    // Nothing but the job's variables and the three the task sets.
    assert_eq!(
        names,
        [
            "HOME",
            "OS_TOKEN",
            "OVERTURE_ATTEMPT",
            "OVERTURE_DEPLOYMENT",
            "OVERTURE_OUTPUTS",
            "OVERTURE_STEP",
            "PATH",
            "TF_IN_AUTOMATION",
        ],
        "{seen}"
    );
    assert!(seen.contains(&format!("OS_TOKEN={TOKEN}\n")));
    assert!(!seen.contains("AWS_"), "{seen}");
}

#[tokio::test]
async fn a_failing_command_gives_its_exit_code_and_its_output_still_comes_back() {
    let fixture = fixture().await;
    let log = Log::default();
    let deployment = DeploymentId::from_uuid(uuid::Uuid::now_v7());
    let started = fixture
        .steps
        .start(job(
            deployment,
            "echo 'Error: Quota exceeded for instances' >&2; exit 3",
            log.clone(),
        ))
        .await
        .expect("started");
    let (_dir, work) = work_dir();

    let ran = step_run(&input_key(&started), &work, FIRST_UID + 1).await;
    assert_eq!(ran.status.code(), Some(3), "{}", text(&ran.stderr));

    let result = fixture.steps.wait(started, never()).await.expect("stopped");
    assert_eq!(log.text(), "Error: Quota exceeded for instances\n");
    assert_eq!(result.outputs_file, OutputsFile::Read(Vec::new()));
    assert!(
        result.collected.is_empty(),
        "the step left no file to collect"
    );
}

#[tokio::test]
async fn a_command_past_its_timeout_is_killed_with_what_it_left_running() {
    let fixture = fixture().await;
    let log = Log::default();
    let deployment = DeploymentId::from_uuid(uuid::Uuid::now_v7());
    let mut job = job(
        deployment,
        "echo started; sleep 600 & sleep 600",
        log.clone(),
    );
    // Long enough for `echo started` to come first even on a busy machine.
    job.timeout = Duration::from_millis(1000);
    let started = fixture.steps.start(job).await.expect("started");
    let (_dir, work) = work_dir();

    // The background `sleep` holds the output open too: the process ends only once it is gone.
    let ran = step_run(&input_key(&started), &work, FIRST_UID + 2).await;
    assert_eq!(
        ran.status.code(),
        Some(128 + libc::SIGKILL),
        "{}",
        text(&ran.stderr)
    );
    let said = "overture: the command ran past its timeout (1000 ms) and was killed\n";
    assert_eq!(text(&ran.stdout), format!("started\n{said}"));

    // The runner's own clock has run out by now too; it reads back what the task left.
    let result = fixture.steps.wait(started, never()).await.expect("stopped");
    assert_eq!(result.exit, SandboxExit::TimedOut);
    assert_eq!(log.text(), format!("started\n{said}"));
}

#[tokio::test]
async fn an_input_that_does_not_open_is_the_entrypoint_failing_and_shows_no_secret() {
    let fixture = fixture().await;
    let deployment = DeploymentId::from_uuid(uuid::Uuid::now_v7());
    let started = fixture
        .steps
        .start(job(deployment, "echo should not run", Log::default()))
        .await
        .expect("started");
    // The same sealed bytes under another attempt's name: KMS opens the data key only for the
    // attempt it was made for.
    let copied = format!("steps/{deployment}/network/9/input.sealed");
    fixture
        .s3
        .copy_object()
        .bucket(BUCKET)
        .copy_source(format!("{BUCKET}/{}", input_key(&started)))
        .key(&copied)
        .send()
        .await
        .expect("copied");
    let (_dir, work) = work_dir();

    let ran = step_run(&copied, &work, FIRST_UID + 3).await;
    assert_eq!(ran.status.code(), Some(125), "{}", text(&ran.stderr));
    let said = text(&ran.stderr);
    assert!(
        said.starts_with("overture step-run: KMS Decrypt failed"),
        "{said}"
    );
    assert_keeps_secrets(&ran);
    assert!(ran.stdout.is_empty(), "{}", text(&ran.stdout));
    assert!(!work.exists(), "nothing was placed");

    let ran = step_run(
        &format!("steps/{deployment}/input.sealed"),
        &work,
        FIRST_UID + 3,
    )
    .await;
    assert_eq!(ran.status.code(), Some(125));
    assert!(
        text(&ran.stderr).contains("is not of the form steps/<deployment>/<step>/<attempt>/"),
        "{}",
        text(&ran.stderr)
    );

    // Neither run left a result: the runner sees none.
    let result = fixture.steps.wait(started, never()).await.expect("stopped");
    assert!(
        String::from_utf8_lossy(&result.output).starts_with("the step task left no result"),
        "{}",
        String::from_utf8_lossy(&result.output)
    );
}

#[tokio::test]
async fn nothing_the_command_started_outlives_it_not_even_in_a_session_of_its_own() {
    // Only root can run the command as a user of its own, whose every process can be found.
    if !running_as_root() {
        return;
    }
    let fixture = fixture().await;
    let uid = FIRST_UID + 4;
    let deployment = DeploymentId::from_uuid(uuid::Uuid::now_v7());
    let started = fixture
        .steps
        .start(job(
            deployment,
            // The command ends only once its detached process runs in a session of its own.
            "setsid sh -c 'echo $$ > detached.pid; exec sleep 600' > /dev/null 2>&1 < /dev/null &
             until [ -s detached.pid ]; do :; done; echo detached",
            Log::default(),
        ))
        .await
        .expect("started");
    let (_dir, work) = work_dir();

    let ran = step_run(&input_key(&started), &work, uid).await;
    assert_eq!(ran.status.code(), Some(0), "{}", text(&ran.stderr));
    assert_eq!(text(&ran.stdout), "detached\n");
    let left: Vec<String> = std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter(|entry| entry.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter(|entry| {
            use std::os::unix::fs::MetadataExt;
            entry.metadata().is_ok_and(|meta| meta.uid() == uid)
        })
        .map(|entry| std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default())
        // A zombie is dead, waiting for this machine's init to reap it.
        .filter(|stat| {
            stat.rsplit_once(") ")
                .is_some_and(|(_, rest)| !rest.starts_with('Z'))
        })
        .collect();
    assert!(
        left.is_empty(),
        "processes of the step's user left: {left:?}"
    );
    fixture.steps.wait(started, never()).await.expect("stopped");
}
