//! The contract every payload store keeps ([`StorePayloads`]), as tests that each adapter's
//! suite runs against a real store with
//! [`payload_contract_tests!`](crate::payload_contract_tests).
//!
//! Each test takes two clients of one store (the submitter puts, a runner elsewhere gets) and
//! uses bytes of its own, so the tests share a store without a reset. What a reader does with a
//! damaged payload needs a way to damage one, so each adapter tests that itself.

use crate::payload::{payload_hash, PayloadError, StorePayloads};

/// Generates one `#[tokio::test]` per contract test. `$clients` is an expression (evaluated
/// anew in each test) of a future yielding two clients of one store.
#[macro_export]
macro_rules! payload_contract_tests {
    ($clients:expr) => {
        $crate::payload_contract_tests!(@each $clients;
            a_payload_reads_back_from_another_client_under_its_sha256,
            putting_the_same_bytes_again_returns_the_same_hash,
            an_unknown_hash_is_not_found_and_not_worth_retrying,
            a_name_that_is_no_hash_is_refused,
            an_empty_payload_and_a_mebibyte_read_back_whole,
        );
    };
    (@each $clients:expr; $($test:ident),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $test() {
                let (a, b) = $clients.await;
                $crate::payload_contract::$test(&a, &b).await;
            }
        )*
    };
}

/// Bytes no other test (nor an earlier run against the same store) puts.
fn unique(label: &str) -> Vec<u8> {
    format!("{label} {}", uuid::Uuid::new_v4()).into_bytes()
}

/// `put` returns the lowercase hex SHA-256, and another client gets the bytes by it.
pub async fn a_payload_reads_back_from_another_client_under_its_sha256(
    a: &impl StorePayloads,
    b: &impl StorePayloads,
) {
    let bytes = unique("resource \"terraform_data\" \"x\" {}");
    let hash = a.put(&bytes).await.expect("put");
    assert_eq!(hash, payload_hash(&bytes));
    assert_eq!(b.get(&hash).await.expect("get"), bytes);
}

/// A second put of the same bytes, from either client, succeeds and changes nothing.
pub async fn putting_the_same_bytes_again_returns_the_same_hash(
    a: &impl StorePayloads,
    b: &impl StorePayloads,
) {
    let bytes = unique("twice");
    let first = a.put(&bytes).await.expect("first put");
    let second = a.put(&bytes).await.expect("second put");
    let third = b.put(&bytes).await.expect("put from another client");
    assert_eq!((&first, &second), (&third, &third));
    assert_eq!(a.get(&first).await.expect("get"), bytes);
}

/// A hash nothing was put under is `NotFound`, which asking again will not change.
pub async fn an_unknown_hash_is_not_found_and_not_worth_retrying(
    a: &impl StorePayloads,
    _b: &impl StorePayloads,
) {
    let hash = payload_hash(&unique("never put"));
    match a.get(&hash).await {
        Err(error @ PayloadError::NotFound { .. }) => {
            assert!(!error.is_retryable());
            assert!(error.to_string().contains(&hash), "{error}");
        }
        other => panic!("expected NotFound, got {other:?}"),
    }
}

/// A name that is not 64 lowercase hex digits never reaches a path or a key.
pub async fn a_name_that_is_no_hash_is_refused(a: &impl StorePayloads, _b: &impl StorePayloads) {
    let hash = a.put(&unique("upper")).await.expect("put");
    for name in [
        "../../../etc/passwd".to_owned(),
        hash.to_uppercase(),
        format!("{hash}/x"),
        String::new(),
    ] {
        match a.get(&name).await {
            Err(PayloadError::InvalidHash(named)) => assert_eq!(named, name),
            other => panic!("`{name}`: expected InvalidHash, got {other:?}"),
        }
    }
}

/// Nothing and a mebibyte (the most a blueprint's files come to) both read back as they were.
pub async fn an_empty_payload_and_a_mebibyte_read_back_whole(
    a: &impl StorePayloads,
    b: &impl StorePayloads,
) {
    let empty = a.put(b"").await.expect("put nothing");
    assert!(b.get(&empty).await.expect("get nothing").is_empty());
    let mut large = unique("large");
    large.extend((0..1024 * 1024).map(|i: u32| (i % 251) as u8));
    let hash = a.put(&large).await.expect("put a mebibyte");
    assert_eq!(b.get(&hash).await.expect("get a mebibyte"), large);
}
