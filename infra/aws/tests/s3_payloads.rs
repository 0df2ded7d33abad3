//! The S3 payload store against the local AWS emulator: the payload-store contract that the
//! data directory's store keeps too, and a changed object refused as corrupt.

mod support;

use aws_sdk_s3::primitives::ByteStream;
use overture_aws::s3::{client, create_payloads_bucket, S3Payloads};
use overture_kit::payload::{PayloadError, StorePayloads};

const BUCKET: &str = "overture-payloads";

/// A client of its own, as a separate process would have.
async fn store() -> (S3Payloads, aws_sdk_s3::Client) {
    let config = overture_aws::config::for_endpoint(support::emulator(), "eu-west-1").await;
    let client = client(&config);
    create_payloads_bucket(&client, BUCKET)
        .await
        .expect("the payloads bucket");
    (S3Payloads::new(client.clone(), BUCKET), client)
}

async fn clients() -> (S3Payloads, S3Payloads) {
    (store().await.0, store().await.0)
}

overture_kit::payload_contract_tests!(clients());

#[tokio::test]
async fn a_changed_object_is_refused_as_corrupt() {
    let (payloads, client) = store().await;
    let hash = payloads
        .put(format!("# main.tf {}", uuid::Uuid::new_v4()).as_bytes())
        .await
        .expect("put");
    client
        .put_object()
        .bucket(BUCKET)
        .key(S3Payloads::key(&hash))
        .body(ByteStream::from_static(b"# changed"))
        .send()
        .await
        .expect("overwritten");
    match payloads.get(&hash).await {
        Err(error @ PayloadError::Corrupt { .. }) => assert!(!error.is_retryable()),
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

#[tokio::test]
async fn a_missing_bucket_is_refused_and_not_worth_retrying() {
    let (_, client) = store().await;
    let payloads = S3Payloads::new(client, "no-such-bucket-here");
    match payloads.put(b"x").await {
        Err(error @ PayloadError::Refused(_)) => {
            assert!(error.to_string().contains("no-such-bucket-here"), "{error}")
        }
        other => panic!("expected Refused, got {other:?}"),
    }
}
