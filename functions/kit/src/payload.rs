//! The payload store: large, non-secret bytes kept by content hash outside the log.
//!
//! A log item has a size limit (400 KB on DynamoDB), and a blueprint's files may come to a
//! mebibyte, so `DeploymentRequested` names each file by its SHA-256 and the bytes live here
//! (the data directory embedded, S3 on AWS). The hash is the name: a put is idempotent, and a
//! get checks the bytes against the name it asked for, so a changed or damaged payload is
//! refused instead of run. Never put a secret here: payloads are neither sealed nor purged.
//!
//! - [`StorePayloads`]: the port; [`PayloadError`]: its typed failures.
//! - [`payload_hash`] and [`check_hash`]: the naming rule every adapter shares.
//! - [`MemoryPayloads`] (feature `memory`): payloads in memory, for handlers' own tests.
//! - `payload_contract` (feature `payload-contract`): the tests every adapter must pass, through
//!   [`payload_contract_tests!`](crate::payload_contract_tests).

use async_trait::async_trait;
use sha2::{Digest, Sha256};

/// Keeps payloads by the SHA-256 of their bytes.
#[async_trait]
pub trait StorePayloads: Send + Sync {
    /// Stores `bytes` and returns their hash (lowercase hex SHA-256). Storing the same bytes
    /// again is harmless and returns the same hash.
    async fn put(&self, bytes: &[u8]) -> Result<String, PayloadError>;

    /// The bytes stored under `hash`, checked against it.
    async fn get(&self, hash: &str) -> Result<Vec<u8>, PayloadError>;
}

/// Why a payload could not be stored or read.
#[derive(Debug, thiserror::Error)]
pub enum PayloadError {
    /// The name asked for is not a lowercase hex SHA-256; nothing was read.
    #[error("`{0}` is not a payload's name (64 lowercase hex digits)")]
    InvalidHash(String),
    /// Nothing is stored under this hash.
    #[error("no payload is stored under {hash}")]
    NotFound {
        /// The hash asked for.
        hash: String,
    },
    /// What is stored under this hash does not hash to it: it was changed or damaged.
    #[error("the payload stored under {hash} hashes to {actual}: it was changed or damaged")]
    Corrupt {
        /// The hash asked for.
        hash: String,
        /// The hash of the bytes found.
        actual: String,
    },
    /// The store refused the call (no such bucket, access denied); asking again will not help.
    #[error("the payload store refused: {0}")]
    Refused(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The store could not be reached or failed on its side; asking again later may help.
    #[error("the payload store failed: {0}")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl PayloadError {
    /// Whether trying the same call again later may succeed.
    pub const fn is_retryable(&self) -> bool {
        matches!(self, PayloadError::Unavailable(_))
    }
}

/// The name of `bytes` in every payload store: their SHA-256, lowercase hex.
pub fn payload_hash(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Refuses a name that is not 64 lowercase hex digits, before it reaches a path or a key.
pub fn check_hash(hash: &str) -> Result<(), PayloadError> {
    let valid = hash.len() == 64
        && hash
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if valid {
        Ok(())
    } else {
        Err(PayloadError::InvalidHash(hash.to_owned()))
    }
}

/// Checks that `bytes`, read under `hash`, hash to it.
pub fn verified(hash: &str, bytes: Vec<u8>) -> Result<Vec<u8>, PayloadError> {
    let actual = payload_hash(&bytes);
    if actual == hash {
        Ok(bytes)
    } else {
        Err(PayloadError::Corrupt {
            hash: hash.to_owned(),
            actual,
        })
    }
}

#[cfg(feature = "memory")]
pub use memory::MemoryPayloads;

#[cfg(feature = "memory")]
mod memory {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex, PoisonError};

    use async_trait::async_trait;

    use super::{check_hash, payload_hash, verified, PayloadError, StorePayloads};

    /// Payloads in memory; clones share them.
    #[derive(Clone, Debug, Default)]
    pub struct MemoryPayloads {
        stored: Arc<Mutex<HashMap<String, Vec<u8>>>>,
    }

    impl MemoryPayloads {
        /// Replaces what is stored under `hash` with `bytes`, whatever they hash to: for
        /// tests of what a reader does with a damaged payload.
        pub fn overwrite(&self, hash: &str, bytes: Vec<u8>) {
            self.lock().insert(hash.to_owned(), bytes);
        }

        /// How many payloads are stored.
        pub fn len(&self) -> usize {
            self.lock().len()
        }

        /// Whether none is.
        pub fn is_empty(&self) -> bool {
            self.len() == 0
        }

        fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<u8>>> {
            self.stored.lock().unwrap_or_else(PoisonError::into_inner)
        }
    }

    #[async_trait]
    impl StorePayloads for MemoryPayloads {
        async fn put(&self, bytes: &[u8]) -> Result<String, PayloadError> {
            let hash = payload_hash(bytes);
            self.lock()
                .entry(hash.clone())
                .or_insert_with(|| bytes.to_vec());
            Ok(hash)
        }

        async fn get(&self, hash: &str) -> Result<Vec<u8>, PayloadError> {
            check_hash(hash)?;
            let bytes = self.lock().get(hash).cloned();
            match bytes {
                Some(bytes) => verified(hash, bytes),
                None => Err(PayloadError::NotFound {
                    hash: hash.to_owned(),
                }),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_64_lowercase_hex_digits() {
        assert!(check_hash(&payload_hash(b"x")).is_ok());
        for bad in ["", "../../etc/passwd", &"A".repeat(64), &"0".repeat(63)] {
            assert!(
                matches!(check_hash(bad), Err(PayloadError::InvalidHash(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn only_an_unavailable_store_is_worth_asking_again() {
        let io = || Box::new(std::io::Error::other("x"));
        assert!(PayloadError::Unavailable(io()).is_retryable());
        assert!(!PayloadError::Refused(io()).is_retryable());
        assert!(!PayloadError::NotFound { hash: "h".into() }.is_retryable());
        assert!(!verified(&payload_hash(b"a"), b"b".to_vec())
            .expect_err("corrupt")
            .is_retryable());
    }
}
