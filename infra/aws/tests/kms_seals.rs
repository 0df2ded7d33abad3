//! A deployment's secrets sealed on AWS, against the local AWS emulator: a KMS data key
//! combined with the user's token, so neither opens the seal alone; bound to tenant and
//! deployment; gone, token and all, after the purge; never in the table in clear. What a step
//! keeps between attempts (a Terraform state) is sealed the same way in S3, and purged with
//! the secrets.

mod support;

use std::sync::Arc;

use overture_aws::custody::{create_custody_table, KmsTokenCustody};
use overture_aws::kept::KeptStates;
use overture_aws::s3::create_payloads_bucket;
use overture_aws::seals::{create_seals_table, KmsSeals, SealsError};
use overture_domain::secret::{SecretString, SecretValues};
use overture_events::DeploymentId;
use overture_kit::TokenCustody;
use secrecy::ExposeSecret;

const SEALS: &str = "overture-seals";
const CUSTODY: &str = "overture-seal-custody";
const SECRET: &str = "db-password-5e1f";
const TOKEN: &str = "gAAAAAB-users-token-for-seals";
const BUCKET: &str = "overture-seal-states";
/// A Terraform state, as a step keeps it: it names what it made, and holds secrets of its own.
const STATE: &str = r#"{"version":4,"serial":3,"lineage":"6a1f0c2e-state-lineage","resources":[{"type":"openstack_compute_instance_v2","instances":[{"attributes":{"admin_pass":"state-held-password-91c4"}}]}]}"#;

struct Fixture {
    seals: KmsSeals,
    custody: Arc<KmsTokenCustody>,
    dynamodb: aws_sdk_dynamodb::Client,
    s3: aws_sdk_s3::Client,
}

/// A client of its own, as each function would have.
async fn fixture() -> Fixture {
    let config = overture_aws::config::for_endpoint(support::emulator(), "eu-west-1").await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&config);
    let kms = aws_sdk_kms::Client::new(&config);
    let s3 = overture_aws::s3::client(&config);
    create_payloads_bucket(&s3, BUCKET).await.expect("bucket");
    create_seals_table(&dynamodb, SEALS).await.expect("table");
    create_custody_table(&dynamodb, CUSTODY)
        .await
        .expect("table");
    let key = support::kms_key(&kms).await;
    let custody = Arc::new(KmsTokenCustody::new(
        kms.clone(),
        dynamodb.clone(),
        CUSTODY,
        key,
    ));
    Fixture {
        seals: KmsSeals::new(
            kms,
            dynamodb.clone(),
            SEALS,
            key,
            custody.clone(),
            KeptStates::new(s3.clone(), BUCKET),
        ),
        custody,
        dynamodb,
        s3,
    }
}

fn secrets() -> SecretValues {
    [("db".to_owned(), SecretString::from(SECRET))].into()
}

fn deployment() -> DeploymentId {
    DeploymentId::from_uuid(uuid::Uuid::now_v7())
}

impl Fixture {
    /// A new deployment of tenant `acme`, its secrets sealed, with the user's token or not.
    async fn sealed(&self, token: Option<&str>) -> DeploymentId {
        let id = deployment();
        self.seals
            .seal_secrets(
                id,
                "acme",
                &secrets(),
                token.map(SecretString::from).as_ref(),
            )
            .await
            .expect("sealed");
        id
    }
}

#[tokio::test]
async fn secrets_sealed_with_a_token_open_in_another_function_while_the_token_is_kept() {
    let (submit, runner) = (fixture().await, fixture().await);
    let id = submit.sealed(Some(TOKEN)).await;
    let opened = runner.seals.open_secrets(id, "acme").await.expect("opens");
    assert_eq!(opened["db"].expose_secret(), SECRET);

    // KMS alone (the data key) does not open it once the token is let go of.
    runner.custody.forget(id).await.expect("forgotten");
    let without_token = runner.seals.open_secrets(id, "acme").await;
    assert!(
        matches!(&without_token, Err(error @ SealsError::DoesNotOpen { .. }) if !error.is_retryable()),
        "{without_token:?}"
    );
    // Nor does another token.
    runner
        .custody
        .keep(id, "acme", &SecretString::from("another-users-token"))
        .await
        .expect("kept");
    assert!(runner.seals.open_secrets(id, "acme").await.is_err());
}

#[tokio::test]
async fn a_seal_opens_for_its_own_tenant_and_deployment_only() {
    let fixture = fixture().await;
    let id = fixture.sealed(None).await;
    assert!(fixture.seals.open_secrets(id, "acme").await.is_ok());
    assert!(
        matches!(
            fixture.seals.open_secrets(id, "globex").await,
            Err(SealsError::DoesNotOpen { .. })
        ),
        "another tenant"
    );

    let elsewhere = support::copied_to_another_deployment(&fixture.dynamodb, SEALS, id).await;
    assert!(
        matches!(
            fixture.seals.open_secrets(elsewhere, "acme").await,
            Err(SealsError::DoesNotOpen { .. })
        ),
        "a seal moved to another deployment"
    );
}

#[tokio::test]
async fn the_purge_deletes_the_seal_and_the_token_and_nothing_was_ever_in_clear() {
    let fixture = fixture().await;
    let id = fixture.sealed(Some(TOKEN)).await;
    for table in [SEALS, CUSTODY] {
        for needle in [SECRET, TOKEN] {
            assert!(
                !support::table_holds(&fixture.dynamodb, table, needle).await,
                "{table} holds a secret in clear"
            );
        }
    }

    fixture.seals.purge_secrets(id).await.expect("purged");
    assert!(matches!(
        fixture.seals.open_secrets(id, "acme").await,
        Err(SealsError::Missing(_))
    ));
    assert!(fixture
        .custody
        .token(id, "acme")
        .await
        .expect("read")
        .is_none());
    fixture
        .seals
        .purge_secrets(id)
        .await
        .expect("purging twice is harmless");
}

/// Every object under `prefix`, its bytes.
async fn objects(s3: &aws_sdk_s3::Client, prefix: &str) -> Vec<Vec<u8>> {
    let listed = s3
        .list_objects_v2()
        .bucket(BUCKET)
        .prefix(prefix)
        .send()
        .await
        .expect("list");
    let mut bodies = Vec::new();
    for object in listed.contents() {
        let got = s3
            .get_object()
            .bucket(BUCKET)
            .key(object.key().expect("a key"))
            .send()
            .await
            .expect("get");
        bodies.push(
            got.body
                .collect()
                .await
                .expect("body")
                .into_bytes()
                .to_vec(),
        );
    }
    bodies
}

#[tokio::test]
async fn a_kept_state_opens_in_another_function_and_no_byte_of_it_is_stored_in_clear() {
    let (runner, next_runner) = (fixture().await, fixture().await);
    let id = runner.sealed(Some(TOKEN)).await;
    runner
        .seals
        .keep_state(id, "acme", "network", STATE.as_bytes())
        .await
        .expect("kept");

    let opened = next_runner.seals.kept_state(id, "acme", "network").await;
    assert_eq!(opened.expect("opens").as_deref(), Some(STATE.as_bytes()));
    assert_eq!(
        next_runner
            .seals
            .kept_state(id, "acme", "servers")
            .await
            .expect("read"),
        None,
        "a step that kept nothing"
    );

    let stored = objects(&runner.s3, &KeptStates::key(id, "network")).await;
    assert_eq!(stored.len(), 1, "one object for the step");
    // Not one run of 6 bytes of the state (much less a password in it) is in the object.
    for window in STATE.as_bytes().windows(6) {
        assert!(
            !stored[0].windows(6).any(|w| w == window),
            "the object holds {:?} in clear",
            String::from_utf8_lossy(window)
        );
    }

    assert!(
        next_runner
            .seals
            .kept_state(id, "globex", "network")
            .await
            .is_err(),
        "another tenant"
    );
    next_runner.custody.forget(id).await.expect("forgotten");
    let without_token = next_runner.seals.kept_state(id, "acme", "network").await;
    assert!(
        matches!(&without_token, Err(error @ SealsError::DoesNotOpen { .. }) if !error.is_retryable()),
        "KMS alone does not open it: {without_token:?}"
    );
    // Nor will it later: the runner's port says a retry cannot help.
    let through_port =
        overture_runner::KeepStepState::load(&next_runner.seals, id, "acme", "network").await;
    assert!(
        through_port.as_ref().is_err_and(|e| !e.is_retryable()),
        "{through_port:?}"
    );
}

#[tokio::test]
async fn a_state_kept_again_replaces_the_last_and_the_purge_deletes_it() {
    let fixture = fixture().await;
    let id = fixture.sealed(None).await;
    for (step, state) in [
        ("network", "serial 1"),
        ("network", "serial 2"),
        ("db", "x"),
    ] {
        fixture
            .seals
            .keep_state(id, "acme", step, state.as_bytes())
            .await
            .expect("kept");
    }
    let opened = fixture.seals.kept_state(id, "acme", "network").await;
    assert_eq!(opened.expect("opens").as_deref(), Some(&b"serial 2"[..]));

    fixture.seals.purge_secrets(id).await.expect("purged");
    for step in ["network", "db"] {
        assert_eq!(
            fixture
                .seals
                .kept_state(id, "acme", step)
                .await
                .expect("read"),
            None
        );
    }
    let prefix = KeptStates::key(id, "network").replace("network.sealed", "");
    assert!(objects(&fixture.s3, &prefix).await.is_empty());
}
