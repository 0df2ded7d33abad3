//! The stack (`infra/aws/template.yaml`) created through CloudFormation in the local emulator,
//! and the adapters working on what it made: the log on its events table, the read models on
//! its deployments and tenants tables, a token kept in its custody table under its KMS key,
//! payloads in its bucket, jobs through its queue, and a job that keeps failing moved to its
//! dead-letter queue; the timers queue with a dead-letter queue of its own. With the functions' code in place, the whole template is created:
//! functions, triggers (with their batch sizes and partial batch failures), roles, the step
//! cluster and task definition.

mod support;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_sqs::types::QueueAttributeName;
use overture_aws::custody::KmsTokenCustody;
use overture_aws::dynamodb::DynamoDeployments;
use overture_aws::read_models::DynamoReadModels;
use overture_aws::s3::S3Payloads;
use overture_aws::sqs::SqsQueue;
use overture_aws::stack::{deploy_local, queue_url};
use overture_domain::secret::SecretString;
use overture_events::DeploymentId;
use overture_kit::queue::{Job, ReceiveJobs, SendJobs};
use overture_kit::SystemClock;
use overture_kit::TokenCustody;
use secrecy::ExposeSecret;

const REGION: &str = "eu-west-1";
/// CloudFormation in the emulator makes a stack in about a second.
const CREATE_WITHIN: Duration = Duration::from_secs(60);
/// Deliveries before the dead-letter queue, lowered so the test is quick.
const MAX_RECEIVES: u32 = 2;

struct Stack {
    config: aws_config::SdkConfig,
    outputs: HashMap<String, String>,
}

impl Stack {
    fn output(&self, name: &str) -> &str {
        self.outputs
            .get(name)
            .unwrap_or_else(|| panic!("the stack outputs {name}: {:?}", self.outputs))
    }
}

/// Every function of the stack, by the name of its binary and zip.
const FUNCTIONS: [&str; 7] = [
    "submit",
    "api",
    "orchestrator",
    "timer",
    "dead-letters",
    "runner",
    "projector",
];

fn stack_name() -> String {
    format!(
        "overture-{}",
        &uuid::Uuid::now_v7().simple().to_string()[20..]
    )
}

/// A stack of its own without the functions (no code to give them), with a one-second job
/// visibility so redeliveries come quickly.
async fn storage_stack() -> Stack {
    let config = overture_aws::config::for_endpoint(support::emulator(), REGION).await;
    let cloudformation = aws_sdk_cloudformation::Client::new(&config);
    let max_receives = MAX_RECEIVES.to_string();
    let outputs = deploy_local(
        &cloudformation,
        &stack_name(),
        &[
            ("Functions", "no"),
            ("CodeBucket", "unused-without-functions"),
            ("JobsVisibilityTimeout", "1"),
            ("JobsMaxReceiveCount", &max_receives),
        ],
        CREATE_WITHIN,
    )
    .await
    .expect("the stack is created");
    Stack { config, outputs }
}

#[tokio::test]
async fn the_log_and_the_read_models_work_on_the_stacks_tables() {
    let stack = storage_stack().await;
    let events = stack.output("EventsTable");
    let log = || {
        DynamoDeployments::new(
            aws_sdk_dynamodb::Client::new(&stack.config),
            events,
            Arc::new(SystemClock),
        )
    };
    overture_kit::contract::appended_events_read_back_from_another_client(&log(), &log()).await;
    overture_kit::contract::racing_writers_on_one_revision_have_exactly_one_winner(&log(), &log())
        .await;

    // Its stream carries new images, as the orchestrator and the projector read them.
    let table = aws_sdk_dynamodb::Client::new(&stack.config)
        .describe_table()
        .table_name(events)
        .send()
        .await
        .expect("the events table");
    let spec = table
        .table()
        .and_then(|t| t.stream_specification())
        .expect("a stream");
    assert!(spec.stream_enabled());
    assert_eq!(
        spec.stream_view_type(),
        Some(&aws_sdk_dynamodb::types::StreamViewType::NewImage)
    );
    assert_eq!(
        table.table().and_then(|t| t.latest_stream_arn()),
        Some(stack.output("EventsStreamArn"))
    );

    let views = || {
        DynamoReadModels::new(
            aws_sdk_dynamodb::Client::new(&stack.config),
            stack.output("DeploymentsTable"),
            stack.output("TenantsTable"),
        )
    };
    overture_projector::contract::a_replayed_record_changes_nothing(&views(), &views()).await;
}

#[tokio::test]
async fn bastion_leases_keep_their_contract_on_the_stacks_table() {
    let stack = storage_stack().await;
    let leases = overture_aws::leases::DynamoLeases::new(
        aws_sdk_dynamodb::Client::new(&stack.config),
        stack.output("LeasesTable"),
    );
    overture_kit::leases_contract::leases_keep_their_contract(&leases).await;
}

#[tokio::test]
async fn a_token_is_kept_under_the_stacks_key_and_payloads_go_to_its_bucket() {
    let stack = storage_stack().await;
    let custody = || {
        KmsTokenCustody::new(
            aws_sdk_kms::Client::new(&stack.config),
            aws_sdk_dynamodb::Client::new(&stack.config),
            stack.output("CustodyTable"),
            stack.output("KeyArn"),
        )
    };
    let (submit, runner) = (custody(), custody());
    let deployment = DeploymentId::from_uuid(uuid::Uuid::now_v7());
    submit
        .keep(deployment, "acme", &SecretString::from("users-token"))
        .await
        .expect("kept under the stack's key");
    let token = runner
        .token(deployment, "acme")
        .await
        .expect("read back")
        .expect("there is one");
    assert_eq!(token.expose_secret(), "users-token");
    // The alias the stack made names the same key.
    let by_alias = KmsTokenCustody::new(
        aws_sdk_kms::Client::new(&stack.config),
        aws_sdk_dynamodb::Client::new(&stack.config),
        stack.output("CustodyTable"),
        stack.output("KeyAlias"),
    );
    assert!(by_alias
        .token(deployment, "acme")
        .await
        .expect("read back")
        .is_some());
    runner.forget(deployment).await.expect("forgotten");

    let payloads = || {
        S3Payloads::new(
            overture_aws::s3::client(&stack.config),
            stack.output("PayloadsBucket"),
        )
    };
    overture_kit::payload_contract::a_payload_reads_back_from_another_client_under_its_sha256(
        &payloads(),
        &payloads(),
    )
    .await;
}

fn job(deployment: DeploymentId, key: &str) -> Job {
    Job {
        key: key.into(),
        deployment,
        body: serde_json::json!({ "kind": "test" }),
        due_at: chrono::Utc::now(),
    }
}

#[tokio::test]
async fn jobs_go_through_the_stacks_queue_and_one_that_keeps_failing_reaches_its_dlq() {
    let stack = storage_stack().await;
    let sqs = aws_sdk_sqs::Client::new(&stack.config);
    let jobs_url = queue_url(&sqs, stack.output("JobsQueueName"))
        .await
        .expect("the jobs queue");
    let dlq_url = queue_url(&sqs, stack.output("JobsDeadLetterQueueName"))
        .await
        .expect("its dead-letter queue");
    let queue = SqsQueue::new(sqs.clone(), &jobs_url, Arc::new(SystemClock));

    // The redrive policy names the dead-letter queue, as the template says.
    let attributes = sqs
        .get_queue_attributes()
        .queue_url(&jobs_url)
        .attribute_names(QueueAttributeName::RedrivePolicy)
        .send()
        .await
        .expect("the queue's attributes");
    let redrive: serde_json::Value = serde_json::from_str(
        attributes
            .attributes()
            .and_then(|a| a.get(&QueueAttributeName::RedrivePolicy))
            .expect("a redrive policy"),
    )
    .expect("JSON");
    assert_eq!(
        redrive["deadLetterTargetArn"],
        stack.output("JobsDeadLetterQueueArn")
    );
    assert_eq!(
        redrive["maxReceiveCount"].to_string(),
        MAX_RECEIVES.to_string()
    );
    // The timers queue has a dead-letter queue of its own.
    let timers_url = queue_url(&sqs, stack.output("TimersQueueName"))
        .await
        .expect("the timers queue");
    let attributes = sqs
        .get_queue_attributes()
        .queue_url(&timers_url)
        .attribute_names(QueueAttributeName::RedrivePolicy)
        .send()
        .await
        .expect("the timers queue's attributes");
    let redrive: serde_json::Value = serde_json::from_str(
        attributes
            .attributes()
            .and_then(|a| a.get(&QueueAttributeName::RedrivePolicy))
            .expect("a redrive policy"),
    )
    .expect("JSON");
    assert_eq!(
        redrive["deadLetterTargetArn"],
        stack.output("TimersDeadLetterQueueArn")
    );

    // A job handled and acknowledged is gone.
    let deployment = DeploymentId::from_uuid(uuid::Uuid::now_v7());
    queue
        .send(vec![job(deployment, "handled")])
        .await
        .expect("sent");
    let delivery = queue
        .receive(Duration::from_secs(30), Duration::from_secs(5))
        .await
        .expect("received")
        .expect("the job");
    assert_eq!(delivery.job.key, "handled");
    queue.ack(&delivery.receipt).await.expect("acknowledged");

    // A job whose handler fails every time (never acknowledged) comes back until SQS has
    // delivered it MAX_RECEIVES times, then moves to the dead-letter queue.
    queue
        .send(vec![job(deployment, "failing")])
        .await
        .expect("sent");
    let visibility = Duration::from_secs(1);
    let mut deliveries = 0;
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(30) {
        match queue
            .receive(visibility, Duration::from_secs(2))
            .await
            .expect("received")
        {
            Some(delivery) => {
                assert_eq!(delivery.job.key, "failing");
                deliveries += 1;
                assert_eq!(delivery.receive_count, deliveries);
            }
            None if deliveries >= MAX_RECEIVES => break,
            None => {}
        }
    }
    assert_eq!(deliveries, MAX_RECEIVES, "delivered until the redrive");
    let dead = SqsQueue::new(sqs, &dlq_url, Arc::new(SystemClock));
    let moved = dead
        .receive(Duration::from_secs(30), Duration::from_secs(5))
        .await
        .expect("received from the dead-letter queue")
        .expect("the failing job is there");
    assert_eq!(moved.job.key, "failing");
    assert!(queue
        .receive(visibility, Duration::from_secs(1))
        .await
        .expect("received")
        .is_none());
}

#[tokio::test]
async fn with_the_functions_code_the_whole_template_is_created() {
    let config = overture_aws::config::for_endpoint(support::emulator(), REGION).await;
    let s3 = overture_aws::s3::client(&config);
    let code = format!(
        "overture-code-{}",
        &uuid::Uuid::now_v7().simple().to_string()[20..]
    );
    overture_aws::s3::create_payloads_bucket(&s3, &code)
        .await
        .expect("the code bucket");
    for function in overture_aws::stack::functions() {
        s3.put_object()
            .bucket(&code)
            .key(format!("overture/{function}.zip"))
            .body(overture_aws::stack::stand_in_code().into())
            .send()
            .await
            .expect("the function's zip");
    }
    let cloudformation = aws_sdk_cloudformation::Client::new(&config);
    let name = stack_name();
    let outputs = deploy_local(
        &cloudformation,
        &name,
        &[
            ("CodeBucket", &code),
            ("StepImage", "public.ecr.aws/docker/library/busybox:latest"),
        ],
        CREATE_WITHIN,
    )
    .await
    .expect("the stack with its functions is created");
    assert!(outputs.contains_key("StepTaskDefinition"), "{outputs:?}");
    // Where `overture --backend aws deploy` submits: the submit function's own URL.
    let submit_url = outputs
        .get("SubmitUrl")
        .expect("the submit URL is an output");
    assert!(
        submit_url.starts_with("https://") && submit_url.contains(".lambda-url."),
        "{submit_url}"
    );
    assert!(
        outputs.contains_key("SubmitCallersPolicy"),
        "the policy that lets a deployer sign in is an output: {outputs:?}"
    );
    let api_url = outputs.get("ApiUrl").expect("the API's URL is an output");
    assert!(
        api_url.starts_with("https://") && api_url.contains(".lambda-url."),
        "{api_url}"
    );

    let resources = cloudformation
        .describe_stack_resources()
        .stack_name(&name)
        .send()
        .await
        .expect("the stack's resources");
    let made: HashMap<&str, &str> = resources
        .stack_resources()
        .iter()
        .filter(|r| {
            r.resource_status()
                .is_some_and(|s| s.as_str() == "CREATE_COMPLETE")
        })
        .filter_map(|r| Some((r.logical_resource_id()?, r.resource_type()?)))
        .collect();
    for (logical, kind) in [
        ("SubmitFunction", "AWS::Lambda::Function"),
        ("SubmitUrl", "AWS::Lambda::Url"),
        ("SubmitCallersPolicy", "AWS::IAM::ManagedPolicy"),
        ("ApiFunction", "AWS::Lambda::Function"),
        ("ApiUrl", "AWS::Lambda::Url"),
        ("ApiUrlInvoke", "AWS::Lambda::Permission"),
        ("ApiUrlFunctionInvoke", "AWS::Lambda::Permission"),
        ("OrchestratorFunction", "AWS::Lambda::Function"),
        ("RunnerFunction", "AWS::Lambda::Function"),
        ("ProjectorFunction", "AWS::Lambda::Function"),
        ("TimerFunction", "AWS::Lambda::Function"),
        ("DeadLettersFunction", "AWS::Lambda::Function"),
        ("EventsToOrchestrator", "AWS::Lambda::EventSourceMapping"),
        ("EventsToProjector", "AWS::Lambda::EventSourceMapping"),
        ("JobsToRunner", "AWS::Lambda::EventSourceMapping"),
        ("TimersToTimer", "AWS::Lambda::EventSourceMapping"),
        (
            "DeadLettersToDeadLetters",
            "AWS::Lambda::EventSourceMapping",
        ),
        ("SubmitRole", "AWS::IAM::Role"),
        ("ApiRole", "AWS::IAM::Role"),
        ("OrchestratorRole", "AWS::IAM::Role"),
        ("TimerRole", "AWS::IAM::Role"),
        ("DeadLettersRole", "AWS::IAM::Role"),
        ("RunnerRole", "AWS::IAM::Role"),
        ("ProjectorRole", "AWS::IAM::Role"),
        ("StepExecutionRole", "AWS::IAM::Role"),
        ("StepTaskRole", "AWS::IAM::Role"),
        ("StepCluster", "AWS::ECS::Cluster"),
        ("StepTask", "AWS::ECS::TaskDefinition"),
        ("JobsQueue", "AWS::SQS::Queue"),
        ("TimersQueue", "AWS::SQS::Queue"),
        ("TimersDeadLetterQueue", "AWS::SQS::Queue"),
        ("EventsTable", "AWS::DynamoDB::Table"),
        ("Key", "AWS::KMS::Key"),
    ] {
        assert_eq!(
            made.get(logical),
            Some(&kind),
            "{logical} is made: {made:?}"
        );
    }

    // The functions and their triggers as the template sets them.
    let lambda = aws_sdk_lambda::Client::new(&config);
    for function in FUNCTIONS {
        let found = lambda
            .get_function_configuration()
            .function_name(format!("{name}-{function}"))
            .send()
            .await
            .expect("the function");
        assert_eq!(found.handler(), Some("bootstrap"));
        assert_eq!(found.runtime().map(|r| r.as_str()), Some("provided.al2023"));
        let variables = found
            .environment()
            .and_then(|e| e.variables())
            .expect("its environment");
        assert_eq!(
            variables.get("OVERTURE_EVENTS_TABLE").map(String::as_str),
            outputs.get("EventsTable").map(String::as_str),
            "{function} names the stack's events table"
        );
        if ["orchestrator", "timer", "dead-letters"].contains(&function) {
            assert_eq!(
                variables
                    .get("OVERTURE_TIMERS_QUEUE_URL")
                    .map(String::as_str),
                outputs.get("TimersQueueUrl").map(String::as_str),
                "{function} sets timers on the stack's timers queue"
            );
        }
    }
    let triggers = lambda
        .list_event_source_mappings()
        .send()
        .await
        .expect("the triggers");
    let trigger = |function: &str, source: &str| {
        let arn_end = format!(":function:{name}-{function}");
        triggers
            .event_source_mappings()
            .iter()
            .find(|m| {
                m.function_arn().is_some_and(|arn| arn.ends_with(&arn_end))
                    && m.event_source_arn() == Some(source)
            })
            .unwrap_or_else(|| panic!("a trigger of {function} on {source}"))
    };
    for (function, source, batch) in [
        ("orchestrator", outputs["EventsStreamArn"].as_str(), 100),
        ("projector", outputs["EventsStreamArn"].as_str(), 500),
        ("runner", outputs["JobsQueueArn"].as_str(), 1),
        ("timer", outputs["TimersQueueArn"].as_str(), 10),
        (
            "dead-letters",
            outputs["JobsDeadLetterQueueArn"].as_str(),
            10,
        ),
    ] {
        let mapping = trigger(function, source);
        assert_eq!(mapping.batch_size(), Some(batch), "{function}'s batch size");
        assert_eq!(
            mapping.function_response_types(),
            [aws_sdk_lambda::types::FunctionResponseType::ReportBatchItemFailures],
            "{function} reports partial batch failures"
        );
    }
}

/// The template's resources, as YAML (CloudFormation's `!Ref` and `!GetAtt` as tagged values).
fn template_resources() -> serde_yaml_ng::Mapping {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/template.yaml"))
        .expect("infra/aws/template.yaml");
    let template: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).expect("YAML");
    template["Resources"]
        .as_mapping()
        .expect("the template's Resources")
        .clone()
}

#[test]
fn the_submit_url_takes_only_signed_requests_and_no_one_else_is_let_in() {
    let resources = template_resources();
    let submit_url = &resources["SubmitUrl"]["Properties"];
    assert_eq!(
        submit_url["AuthType"].as_str(),
        Some("AWS_IAM"),
        "Lambda checks the SigV4 signature of every request to the submit URL"
    );
    // No resource policy opens the submit function to anyone: its callers are let in by the
    // identity policy their account attaches to them.
    let submit_names = |value: &serde_yaml_ng::Value| {
        serde_yaml_ng::to_string(value)
            .expect("YAML")
            .contains("SubmitFunction")
    };
    for (name, resource) in &resources {
        if resource["Type"].as_str() == Some("AWS::Lambda::Permission")
            && submit_names(&resource["Properties"]["FunctionName"])
        {
            panic!(
                "{name:?} grants the submit function to {:?}",
                resource["Properties"]["Principal"]
            );
        }
    }
    // The other function URL checks every caller's cloud token itself (the api function's
    // routes); it is the only one left without AWS_IAM.
    let open: Vec<String> = resources
        .iter()
        .filter(|(_, r)| r["Type"].as_str() == Some("AWS::Lambda::Url"))
        .filter(|(_, r)| r["Properties"]["AuthType"].as_str() != Some("AWS_IAM"))
        .filter_map(|(name, _)| name.as_str().map(str::to_owned))
        .collect();
    assert_eq!(open, ["ApiUrl"], "function URLs without AWS_IAM auth");
    let policy = serde_yaml_ng::to_string(&resources["SubmitCallersPolicy"]).expect("YAML");
    for granted in [
        "lambda:InvokeFunctionUrl",
        "lambda:FunctionUrlAuthType: AWS_IAM",
        "lambda:InvokeFunction",
        "lambda:InvokedViaFunctionUrl",
    ] {
        assert!(
            policy.contains(granted),
            "the callers' policy says {granted}: {policy}"
        );
    }
}
