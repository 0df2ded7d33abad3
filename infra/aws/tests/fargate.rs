//! Step attempts as ECS Fargate tasks, against the local AWS emulator's ECS, which records tasks
//! and walks each through its states as it is described (RUNNING to STOPPED, exit code 0) but
//! runs no container: the test stands in for the task's entrypoint where one is needed.

#[path = "support/ecs.rs"]
mod ecs;
use ecs::{never, step_cluster, Log, StepCluster};
mod support;

use std::time::Duration;

use overture_aws::fargate::{
    encode, open_input, seal_result, AttemptResult, FargateSteps, StepTasks,
};
use overture_events::DeploymentId;
use overture_runner::{OutputsFile, SandboxExit, SandboxJob};
use secrecy::SecretString;

const REGION: &str = "eu-west-1";
const CLUSTER: &str = "overture-steps";
const FAMILY: &str = "overture-step";
const BUCKET: &str = "overture-fargate-steps";
const TOKEN: &str = "gAAAAAB-users-cloud-token-7d3e";
const PASSWORD: &str = "db-password-in-a-file-41a9";

async fn fixture() -> StepCluster {
    step_cluster(REGION, CLUSTER, FAMILY, BUCKET).await
}

/// A step's job as the runner prepares it, with a secret in a variable and one in a file.
fn job(deployment: DeploymentId, attempt: u32, log: Log) -> SandboxJob {
    SandboxJob {
        id: format!("{deployment}-network-{attempt}"),
        command: "terraform apply -auto-approve".to_owned(),
        env: vec![
            ("OVERTURE_DEPLOYMENT".to_owned(), deployment.to_string()),
            ("OVERTURE_STEP".to_owned(), "network".to_owned()),
            ("OVERTURE_ATTEMPT".to_owned(), attempt.to_string()),
            ("TF_IN_AUTOMATION".to_owned(), "1".to_owned()),
        ],
        secret_env: vec![("OS_TOKEN".to_owned(), SecretString::from(TOKEN))],
        files: vec![(
            "terraform.tfvars".into(),
            format!("db_password = \"{PASSWORD}\"\n").into_bytes(),
        )],
        collect: vec!["terraform.tfstate".into()],
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

async fn describe(fixture: &StepCluster, task: &str) -> aws_sdk_ecs::types::Task {
    fixture
        .ecs
        .describe_tasks()
        .cluster(CLUSTER)
        .tasks(task)
        .send()
        .await
        .expect("described")
        .tasks()
        .first()
        .expect("the task")
        .clone()
}

#[tokio::test]
async fn an_attempt_is_one_fargate_task_in_the_step_subnets_told_only_where_its_input_is() {
    let fixture = fixture().await;
    let deployment = DeploymentId::from_uuid(uuid::Uuid::now_v7());
    let started = fixture
        .steps
        .start(job(deployment, 2, Log::default()))
        .await
        .expect("started");

    let task = describe(&fixture, started.task_arn()).await;
    assert!(task
        .cluster_arn()
        .expect("cluster")
        .ends_with(&format!("/{CLUSTER}")));
    assert!(task
        .task_definition_arn()
        .expect("definition")
        .contains(&format!("task-definition/{FAMILY}:")));
    assert_eq!(
        task.launch_type(),
        Some(&aws_sdk_ecs::types::LaunchType::Fargate)
    );
    assert_eq!(task.started_by(), Some("overture-runner"));
    let subnets: Vec<_> = task
        .attachments()
        .iter()
        .flat_map(|a| a.details())
        .filter(|d| d.name() == Some("subnetId"))
        .filter_map(|d| d.value())
        .collect();
    assert_eq!(subnets, [fixture.subnet.as_str()]);
    let overrides = task.overrides().expect("overrides").container_overrides();
    assert_eq!(overrides.len(), 1);
    assert_eq!(overrides[0].name(), Some("step"));
    let input = format!("steps/{deployment}/network/2/input.sealed");
    assert_eq!(
        overrides[0].command(),
        ["overture", "step-run", "--bucket", BUCKET, "--input", &input]
    );
    assert!(overrides[0].environment().is_empty());

    // Nothing anyone who may describe the task sees holds a secret (ECS's answer as it came, byte
    // for byte); the input in S3 is sealed.
    let shown = reqwest::Client::new()
        .post(support::emulator())
        .header("Authorization", ecs::authorization(REGION, "ecs"))
        .header(
            "X-Amz-Target",
            "AmazonEC2ContainerServiceV20141113.DescribeTasks",
        )
        .header("Content-Type", "application/x-amz-json-1.1")
        .body(serde_json::json!({"cluster": CLUSTER, "tasks": [started.task_arn()]}).to_string())
        .send()
        .await
        .expect("ECS answers")
        .text()
        .await
        .expect("its body");
    assert!(shown.contains(started.task_arn()), "{shown}");
    for secret in [TOKEN, PASSWORD, "terraform apply"] {
        assert!(!shown.contains(secret), "DescribeTasks shows {secret}");
    }
    let sealed = fixture
        .s3
        .get_object()
        .bucket(BUCKET)
        .key(&input)
        .send()
        .await
        .expect("the input is put")
        .body
        .collect()
        .await
        .expect("its bytes")
        .into_bytes();
    for secret in [TOKEN, PASSWORD] {
        assert!(!sealed.windows(secret.len()).any(|w| w == secret.as_bytes()));
    }

    // The task's entrypoint, with KMS's word for the attempt, opens the whole job.
    let (opened, _) = open_input(&fixture.kms, started.attempt(), &sealed)
        .await
        .expect("the entrypoint opens its input");
    assert_eq!(opened.command, "terraform apply -auto-approve");
    assert_eq!(
        opened.secret_env,
        [("OS_TOKEN".to_owned(), TOKEN.to_owned())]
    );
    assert_eq!(
        opened.files,
        [(
            "terraform.tfvars".into(),
            encode(format!("db_password = \"{PASSWORD}\"\n").as_bytes())
        )]
    );
    let mut other = started.attempt().clone();
    other.attempt = 3;
    assert!(
        open_input(&fixture.kms, &other, &sealed).await.is_err(),
        "the input opens for its own attempt only"
    );
}

#[tokio::test]
async fn a_task_that_stopped_by_itself_reports_its_container_exit_code_and_leaves_no_input() {
    let fixture = fixture().await;
    let deployment = DeploymentId::from_uuid(uuid::Uuid::now_v7());
    let log = Log::default();
    let started = fixture
        .steps
        .start(job(deployment, 1, log.clone()))
        .await
        .expect("started");
    let task = started.task_arn().to_owned();

    // The emulator moves the task one state on at each DescribeTasks and reports exit code 0:
    // the code comes from the emulator, not from a step that ran.
    let result = fixture.steps.wait(started, never()).await.expect("stopped");
    assert_eq!(result.exit, SandboxExit::Code(0));
    assert_eq!(
        describe(&fixture, &task).await.last_status(),
        Some("STOPPED")
    );
    assert_eq!(result.outputs_file, OutputsFile::Read(Vec::new()));
    assert!(
        log.text().starts_with("the step task left no result"),
        "{}",
        log.text()
    );
    let gone = fixture
        .s3
        .get_object()
        .bucket(BUCKET)
        .key(format!("steps/{deployment}/network/1/input.sealed"))
        .send()
        .await;
    assert!(
        gone.is_err(),
        "the sealed input is deleted with the attempt"
    );
}

#[tokio::test]
async fn what_the_task_left_comes_back_opened_as_the_attempt_result() {
    let fixture = fixture().await;
    let deployment = DeploymentId::from_uuid(uuid::Uuid::now_v7());
    let log = Log::default();
    let started = fixture
        .steps
        .start(job(deployment, 1, log.clone()))
        .await
        .expect("started");

    // The test does the entrypoint's part: open the input, seal a result under its data key.
    let input = format!("steps/{deployment}/network/1/input.sealed");
    let sealed = fixture
        .s3
        .get_object()
        .bucket(BUCKET)
        .key(&input)
        .send()
        .await
        .expect("input")
        .body
        .collect()
        .await
        .expect("bytes")
        .into_bytes();
    let (_, data_key) = open_input(&fixture.kms, started.attempt(), &sealed)
        .await
        .expect("opens");
    let result = AttemptResult {
        output: encode(b"Apply complete! Resources: 1 added.\n"),
        outputs_file: Ok(encode(b"network_id=net-42\n")),
        collected: vec![("terraform.tfstate".into(), encode(b"{\"serial\":1}"))],
    };
    fixture
        .s3
        .put_object()
        .bucket(BUCKET)
        .key(format!("steps/{deployment}/network/1/result.sealed"))
        .body(
            seal_result(&data_key, started.attempt(), &result)
                .expect("sealed")
                .into(),
        )
        .send()
        .await
        .expect("put");

    let result = fixture.steps.wait(started, never()).await.expect("stopped");
    assert_eq!(result.exit, SandboxExit::Code(0));
    assert_eq!(
        result.outputs_file,
        OutputsFile::Read(b"network_id=net-42\n".to_vec())
    );
    assert_eq!(
        result.collected,
        [("terraform.tfstate".into(), b"{\"serial\":1}".to_vec())]
    );
    assert_eq!(log.text(), "Apply complete! Resources: 1 added.\n");
}

#[tokio::test]
async fn an_abandoned_attempt_stops_its_task_and_says_why() {
    let fixture = fixture().await;
    let started = fixture
        .steps
        .start(job(
            DeploymentId::from_uuid(uuid::Uuid::now_v7()),
            1,
            Log::default(),
        ))
        .await
        .expect("started");
    let task = started.task_arn().to_owned();

    let result = fixture
        .steps
        .wait(started, Box::pin(std::future::ready(())))
        .await
        .expect("stopped");
    assert_eq!(result.exit, SandboxExit::Cancelled);
    let task = describe(&fixture, &task).await;
    assert_eq!(task.desired_status(), Some("STOPPED"));
    assert_eq!(
        task.stopped_reason(),
        Some("Overture abandoned the attempt")
    );
}

#[tokio::test]
async fn an_attempt_past_its_timeout_stops_its_task() {
    let fixture = fixture().await;
    let mut job = job(
        DeploymentId::from_uuid(uuid::Uuid::now_v7()),
        1,
        Log::default(),
    );
    job.timeout = Duration::ZERO;
    let started = fixture.steps.start(job).await.expect("started");
    let task = started.task_arn().to_owned();

    let result = fixture.steps.wait(started, never()).await.expect("stopped");
    assert_eq!(result.exit, SandboxExit::TimedOut);
    let task = describe(&fixture, &task).await;
    assert_eq!(
        task.stopped_reason(),
        Some("Overture stopped the attempt at its timeout")
    );
}

#[tokio::test]
async fn a_task_definition_ecs_does_not_know_is_refused_not_retried() {
    let fixture = fixture().await;
    let steps = FargateSteps::new(
        fixture.ecs.clone(),
        fixture.s3.clone(),
        fixture.kms.clone(),
        BUCKET,
        support::kms_key(&fixture.kms).await,
        StepTasks {
            cluster: CLUSTER.to_owned(),
            task_definition: "no-such-family".to_owned(),
            subnets: vec![fixture.subnet.clone()],
            security_groups: vec![fixture.group.clone()],
        },
    );
    let deployment = DeploymentId::from_uuid(uuid::Uuid::now_v7());
    let error = match steps.start(job(deployment, 1, Log::default())).await {
        Ok(_) => panic!("ECS has no such task definition"),
        Err(error) => error,
    };
    assert!(!error.retryable(), "{error}");
    let left = fixture
        .s3
        .get_object()
        .bucket(BUCKET)
        .key(format!("steps/{deployment}/network/1/input.sealed"))
        .send()
        .await;
    assert!(left.is_err(), "no sealed input is left behind");
}
