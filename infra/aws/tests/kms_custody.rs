//! The users' tokens in KMS custody, against the local AWS emulator: kept by one client, read
//! back by another, bound to their tenant and deployment, gone once forgotten, and nowhere in
//! the table in clear.

mod support;

use overture_aws::custody::{create_custody_table, KmsTokenCustody};
use overture_domain::secret::SecretString;
use overture_events::DeploymentId;
use overture_kit::{CustodyError, TokenCustody};
use secrecy::ExposeSecret;

const TABLE: &str = "overture-custody";
const TOKEN: &str = "gAAAAAB-users-keystone-token-7f3a";

struct Custody {
    custody: KmsTokenCustody,
    dynamodb: aws_sdk_dynamodb::Client,
}

/// A client of its own (as another function would be) on the emulator's key and table.
async fn custody() -> Custody {
    let config = overture_aws::config::for_endpoint(support::emulator(), "eu-west-1").await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&config);
    let kms = aws_sdk_kms::Client::new(&config);
    create_custody_table(&dynamodb, TABLE)
        .await
        .expect("the custody table");
    let alias = support::kms_key(&kms).await;
    Custody {
        custody: KmsTokenCustody::new(kms, dynamodb.clone(), TABLE, alias),
        dynamodb,
    }
}

fn deployment() -> DeploymentId {
    DeploymentId::from_uuid(uuid::Uuid::now_v7())
}

impl Custody {
    /// A new deployment of tenant `acme`, its token kept.
    async fn kept(&self) -> DeploymentId {
        let id = deployment();
        self.custody
            .keep(id, "acme", &SecretString::from(TOKEN))
            .await
            .expect("kept");
        id
    }
}

#[tokio::test]
async fn a_token_kept_by_one_function_is_read_back_by_another_and_forgotten_at_the_end() {
    let (submit, runner) = (custody().await, custody().await);
    let id = submit.kept().await;
    let token = runner
        .custody
        .token(id, "acme")
        .await
        .expect("read")
        .expect("there is one");
    assert_eq!(token.expose_secret(), TOKEN);

    runner.custody.forget(id).await.expect("forgotten");
    assert!(submit
        .custody
        .token(id, "acme")
        .await
        .expect("read")
        .is_none());
    runner
        .custody
        .forget(id)
        .await
        .expect("forgetting twice is harmless");
}

#[tokio::test]
async fn a_kept_token_opens_for_its_own_tenant_and_deployment_only() {
    let custody = custody().await;
    let id = custody.kept().await;
    let other_tenant = custody.custody.token(id, "globex").await;
    assert!(
        matches!(&other_tenant, Err(error @ CustodyError::Refused { .. }) if !error.is_retryable()),
        "{other_tenant:?}"
    );

    // The ciphertext copied to another deployment's item does not open there.
    let elsewhere = support::copied_to_another_deployment(&custody.dynamodb, TABLE, id).await;
    let moved = custody.custody.token(elsewhere, "acme").await;
    assert!(
        matches!(moved, Err(CustodyError::Refused { .. })),
        "{moved:?}"
    );
}

#[tokio::test]
async fn the_table_holds_no_token_in_clear() {
    let custody = custody().await;
    custody.kept().await;
    assert!(
        !support::table_holds(&custody.dynamodb, TABLE, TOKEN).await,
        "the table holds the token in clear"
    );
}
