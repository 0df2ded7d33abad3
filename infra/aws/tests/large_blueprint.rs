//! The serverless form end to end on the local AWS emulator: a blueprint with a mebibyte of
//! files is submitted, its files go to S3 and its `DeploymentRequested` fits one DynamoDB item;
//! the same event with the files inline, as events carried them before, would not. And a
//! blueprint whose first steps, scheduled with the request, would overflow one transaction is
//! recorded all the same: the request alone, its steps left to the orchestrator.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use overture_aws::dynamodb::{create_events_table, DynamoDeployments, MAX_EVENTS_PER_APPEND};
use overture_aws::s3::{client, create_payloads_bucket, S3Payloads};
use overture_domain::secret::{SecretString, SecretValues};
use overture_events::{DeploymentEvent, DeploymentId};
use overture_kit::payload::StorePayloads;
use overture_kit::SystemClock;
use overture_kit::{Cause, DeploymentLog, LogError, ReadStream};
use overture_submit::{submit, SealError, SealSecrets, Submission, SubmitPorts};

const TABLE: &str = "overture-events-large";
const BUCKET: &str = "overture-payloads-large";

struct NoSeal;

#[async_trait]
impl SealSecrets for NoSeal {
    async fn seal(
        &self,
        _: DeploymentId,
        _: &str,
        _: &SecretValues,
        _: Option<&SecretString>,
    ) -> Result<String, SealError> {
        Err(SealError::Failed(
            "this blueprint has nothing to seal".into(),
        ))
    }
}

#[tokio::test]
async fn a_mebibyte_of_files_goes_to_s3_and_deployment_requested_fits_dynamodb() {
    let config = overture_aws::config::for_endpoint(support::emulator(), "eu-west-1").await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&config);
    create_events_table(&dynamodb, TABLE)
        .await
        .expect("the events table");
    let log = DynamoDeployments::new(dynamodb, TABLE, Arc::new(SystemClock));
    let s3 = client(&config);
    create_payloads_bucket(&s3, BUCKET)
        .await
        .expect("the bucket");
    let payloads = S3Payloads::new(s3, BUCKET);

    let files: BTreeMap<String, String> = (0..4)
        .map(|i| {
            (
                format!("infra/part-{i}.tf"),
                format!("# {i}\n").repeat(62_000),
            )
        })
        .chain([("infra/main.tf".to_owned(), "# main\n".to_owned())])
        .collect();
    assert!(files.values().map(String::len).sum::<usize>() > 990_000);
    let id = submit(
        Submission {
            triggered_by: None,
            source: "big.yaml".into(),
            text: "name: big\nsteps:\n  infra: { run: terraform, with: { dir: infra } }\n".into(),
            tenant: "acme".into(),
            requested_by: "ada".into(),
            trigger: "test".into(),
            params: BTreeMap::new(),
            secrets: SecretValues::new(),
            files: files.clone(),
            cloud: None,
            name: None,
        },
        &SubmitPorts {
            log: &log,
            seals: &NoSeal,
            payloads: &payloads,
            clock: &SystemClock,
        },
    )
    .await
    .expect("recorded on DynamoDB");

    let recorded = log.read_stream(id, 0).await.expect("read");
    let requested = DeploymentEvent::from_parts(&recorded[0].event_type, recorded[0].data.clone())
        .expect("DeploymentRequested");
    let DeploymentEvent::DeploymentRequested { blueprint, .. } = &requested else {
        panic!("{requested:?}");
    };
    for (path, text) in &files {
        let stored = &blueprint.stored_files[path];
        assert_eq!(
            payloads.get(&stored.sha256).await.expect("on S3"),
            text.as_bytes()
        );
    }

    // The same event with the files inline is what DynamoDB could not hold.
    let mut inline = requested.clone();
    if let DeploymentEvent::DeploymentRequested { blueprint, .. } = &mut inline {
        blueprint.stored_files.clear();
        blueprint.files = files;
    }
    let other = DeploymentId::from_uuid(uuid::Uuid::now_v7());
    let refused = log
        .append(
            other,
            "acme",
            None,
            vec![inline],
            &Cause::new("tester", other, uuid::Uuid::now_v7()),
        )
        .await;
    assert!(
        matches!(refused, Err(LogError::TooLarge { .. })),
        "{refused:?}"
    );
}

#[tokio::test]
async fn a_request_whose_first_steps_overflow_a_transaction_is_recorded_alone() {
    let config = overture_aws::config::for_endpoint(support::emulator(), "eu-west-1").await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&config);
    let table = "overture-events-wide";
    create_events_table(&dynamodb, table)
        .await
        .expect("the events table");
    let log = DynamoDeployments::new(dynamodb, table, Arc::new(SystemClock));
    let payloads = S3Payloads::new(client(&config), BUCKET);
    let submit_steps = |steps: usize| {
        let mut text = String::from("name: wide\nsteps:\n");
        for i in 0..steps {
            text.push_str(&format!("  s{i:03}: {{ run: noop }}\n"));
        }
        Submission {
            triggered_by: None,
            source: "wide.yaml".into(),
            text,
            tenant: "acme".into(),
            requested_by: "ada".into(),
            trigger: "test".into(),
            params: BTreeMap::new(),
            secrets: SecretValues::new(),
            files: BTreeMap::new(),
            cloud: None,
            name: None,
        }
    };
    let ports = SubmitPorts {
        log: &log,
        seals: &NoSeal,
        payloads: &payloads,
        clock: &SystemClock,
    };

    // The request and every first step fill one transaction exactly.
    let fits = submit(submit_steps(MAX_EVENTS_PER_APPEND - 1), &ports)
        .await
        .expect("recorded");
    let recorded = log.read_stream(fits, 0).await.expect("read");
    assert_eq!(recorded.len(), MAX_EVENTS_PER_APPEND);

    // One step more, and the request goes alone.
    let alone = submit(submit_steps(MAX_EVENTS_PER_APPEND), &ports)
        .await
        .expect("recorded");
    let recorded = log.read_stream(alone, 0).await.expect("read");
    let types: Vec<&str> = recorded.iter().map(|r| r.event_type.as_str()).collect();
    assert_eq!(types, ["DeploymentRequested"]);
}
