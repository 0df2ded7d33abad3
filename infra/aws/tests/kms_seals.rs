//! A deployment's secrets sealed on AWS, against the local AWS emulator: a KMS data key
//! combined with the user's token, so neither opens the seal alone; bound to tenant and
//! deployment; gone, token and all, after the purge; never in the table in clear.

mod support;

use std::sync::Arc;

use aws_sdk_dynamodb::types::AttributeValue;
use overture_aws::custody::{create_custody_table, KmsTokenCustody};
use overture_aws::seals::{create_seals_table, KmsSeals, SealsError};
use overture_domain::secret::{SecretString, SecretValues};
use overture_events::DeploymentId;
use overture_kit::TokenCustody;
use secrecy::ExposeSecret;

const SEALS: &str = "overture-seals";
const CUSTODY: &str = "overture-seal-custody";
const SECRET: &str = "db-password-5e1f";
const TOKEN: &str = "gAAAAAB-users-token-for-seals";

struct Fixture {
    seals: KmsSeals,
    custody: Arc<KmsTokenCustody>,
    dynamodb: aws_sdk_dynamodb::Client,
}

/// A client of its own, as each function would have.
async fn fixture() -> Fixture {
    let config = overture_aws::config::for_endpoint(support::emulator(), "eu-west-1").await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&config);
    let kms = aws_sdk_kms::Client::new(&config);
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
        seals: KmsSeals::new(kms, dynamodb.clone(), SEALS, key, custody.clone()),
        custody,
        dynamodb,
    }
}

fn secrets() -> SecretValues {
    [("db".to_owned(), SecretString::from(SECRET))].into()
}

fn deployment() -> DeploymentId {
    DeploymentId::from_uuid(uuid::Uuid::now_v7())
}

#[tokio::test]
async fn secrets_sealed_with_a_token_open_in_another_function_while_the_token_is_kept() {
    let (submit, runner) = (fixture().await, fixture().await);
    let id = deployment();
    submit
        .seals
        .seal_secrets(id, "acme", &secrets(), Some(&SecretString::from(TOKEN)))
        .await
        .expect("sealed");
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
    let id = deployment();
    fixture
        .seals
        .seal_secrets(id, "acme", &secrets(), None)
        .await
        .expect("sealed");
    assert!(fixture.seals.open_secrets(id, "acme").await.is_ok());
    assert!(
        matches!(
            fixture.seals.open_secrets(id, "globex").await,
            Err(SealsError::DoesNotOpen { .. })
        ),
        "another tenant"
    );

    let item = fixture
        .dynamodb
        .get_item()
        .table_name(SEALS)
        .key("deployment", AttributeValue::S(id.to_string()))
        .send()
        .await
        .expect("read");
    let mut moved = item.item().expect("sealed").clone();
    let elsewhere = deployment();
    moved.insert(
        "deployment".into(),
        AttributeValue::S(elsewhere.to_string()),
    );
    fixture
        .dynamodb
        .put_item()
        .table_name(SEALS)
        .set_item(Some(moved))
        .send()
        .await
        .expect("copy");
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
    let id = deployment();
    fixture
        .seals
        .seal_secrets(id, "acme", &secrets(), Some(&SecretString::from(TOKEN)))
        .await
        .expect("sealed");
    for table in [SEALS, CUSTODY] {
        let scanned = fixture
            .dynamodb
            .scan()
            .table_name(table)
            .send()
            .await
            .expect("scan");
        for needle in [SECRET, TOKEN] {
            assert!(
                !support::holds_bytes(scanned.items(), needle.as_bytes()),
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
