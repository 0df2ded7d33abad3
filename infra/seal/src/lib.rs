//! The cryptography of a deployment's seal, the same in every key store (the data directory's
//! `keys/master.key`, a KMS data key on AWS): only where the root key comes from differs.
//!
//! - [`SealKey::derive`]: the key values are sealed under. For a deployment made with the
//!   user's cloud token it is derived with HKDF-SHA256 from the token, salted with the store's
//!   root key and bound to the tenant and the deployment, so neither the root key nor the token
//!   alone opens the seal; otherwise it is the root key itself.
//! - [`seal_value`] and [`open_value`]: ChaCha20-Poly1305, a fresh nonce per value, with the
//!   tenant, the deployment and the value's name as associated data, so a sealed value cannot be
//!   moved to another deployment or renamed; [`seal_bytes`] and [`open_bytes`] do the same for
//!   bytes that need not be text.

use chacha20poly1305::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use hkdf::Hkdf;
use overture_events::DeploymentId;
use secrecy::{ExposeSecret, SecretString};
use sha2::Sha256;

/// How long a root key is.
pub const ROOT_KEY_BYTES: usize = 32;
/// How long a nonce is.
pub const NONCE_BYTES: usize = 12;

/// The key a deployment's values are sealed under.
pub struct SealKey(Key);

impl SealKey {
    /// The key for `deployment` of `tenant`: derived from `token` and `root` when the deployment
    /// acts with the user's token, `root` itself otherwise.
    pub fn derive(
        root: &[u8; ROOT_KEY_BYTES],
        token: Option<&SecretString>,
        tenant: &str,
        deployment: DeploymentId,
    ) -> Self {
        let Some(token) = token else {
            return Self(*Key::from_slice(root));
        };
        let derive = Hkdf::<Sha256>::new(Some(root), token.expose_secret().as_bytes());
        let info = format!("overture-seal-key-v1\0{tenant}\0{deployment}");
        let mut key = Key::default();
        // HKDF-SHA256 refuses only outputs longer than 255 hash lengths; a key is 32 bytes.
        if derive.expand(info.as_bytes(), &mut key).is_err() {
            unreachable!("a 32-byte HKDF-SHA256 output is always valid");
        }
        Self(key)
    }

    /// A fresh random root key.
    pub fn new_root() -> [u8; ROOT_KEY_BYTES] {
        ChaCha20Poly1305::generate_key(&mut OsRng).into()
    }
}

/// One sealed value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SealedValue {
    /// The nonce it was sealed with.
    pub nonce: [u8; NONCE_BYTES],
    /// The value, encrypted and authenticated.
    pub ciphertext: Vec<u8>,
}

/// A sealed value that does not open; never carries the value.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SealError {
    /// Wrong key, wrong tenant, deployment or name, or tampered with.
    #[error("`{name}` does not open for tenant `{tenant}` and deployment {deployment}")]
    DoesNotOpen {
        name: String,
        tenant: String,
        deployment: DeploymentId,
    },
    /// It opened, but is not text.
    #[error("`{0}` is not UTF-8")]
    NotText(String),
    /// The encryption itself failed (it does not for values of any size a step can have).
    #[error("`{0}` could not be encrypted")]
    Encryption(String),
}

fn associated_data(tenant: &str, deployment: DeploymentId, name: &str) -> String {
    format!("overture-seal-v1\0{tenant}\0{deployment}\0{name}")
}

/// Seals the value of `name` for `deployment` of `tenant`.
pub fn seal_value(
    key: &SealKey,
    tenant: &str,
    deployment: DeploymentId,
    name: &str,
    value: &SecretString,
) -> Result<SealedValue, SealError> {
    seal_bytes(
        key,
        tenant,
        deployment,
        name,
        value.expose_secret().as_bytes(),
    )
}

/// Opens the value of `name` sealed for `deployment` of `tenant`.
pub fn open_value(
    key: &SealKey,
    tenant: &str,
    deployment: DeploymentId,
    name: &str,
    sealed: &SealedValue,
) -> Result<SecretString, SealError> {
    let plain = open_bytes(key, tenant, deployment, name, sealed)?;
    String::from_utf8(plain)
        .map(SecretString::from)
        .map_err(|_| SealError::NotText(name.to_owned()))
}

/// Seals bytes that need not be text (what a step keeps, such as a Terraform state) under
/// `name` for `deployment` of `tenant`, as [`seal_value`] seals a value.
pub fn seal_bytes(
    key: &SealKey,
    tenant: &str,
    deployment: DeploymentId,
    name: &str,
    bytes: &[u8],
) -> Result<SealedValue, SealError> {
    let nonce = ChaCha20Poly1305::generate_nonce(&mut OsRng);
    let aad = associated_data(tenant, deployment, name);
    let ciphertext = ChaCha20Poly1305::new(&key.0)
        .encrypt(
            &nonce,
            Payload {
                msg: bytes,
                aad: aad.as_bytes(),
            },
        )
        .map_err(|_| SealError::Encryption(name.to_owned()))?;
    Ok(SealedValue {
        nonce: nonce.into(),
        ciphertext,
    })
}

/// Opens the bytes [`seal_bytes`] sealed under `name` for `deployment` of `tenant`.
pub fn open_bytes(
    key: &SealKey,
    tenant: &str,
    deployment: DeploymentId,
    name: &str,
    sealed: &SealedValue,
) -> Result<Vec<u8>, SealError> {
    let aad = associated_data(tenant, deployment, name);
    ChaCha20Poly1305::new(&key.0)
        .decrypt(
            Nonce::from_slice(&sealed.nonce),
            Payload {
                msg: &sealed.ciphertext,
                aad: aad.as_bytes(),
            },
        )
        .map_err(|_| SealError::DoesNotOpen {
            name: name.to_owned(),
            tenant: tenant.to_owned(),
            deployment,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment() -> DeploymentId {
        DeploymentId::from_uuid(uuid::Uuid::now_v7())
    }

    #[test]
    fn a_value_opens_only_with_its_key_tenant_deployment_and_name() {
        let root = SealKey::new_root();
        let token = SecretString::from("users-token");
        let id = deployment();
        let key = SealKey::derive(&root, Some(&token), "acme", id);
        let sealed = seal_value(&key, "acme", id, "db", &SecretString::from("pw")).expect("sealed");
        let opened = open_value(&key, "acme", id, "db", &sealed).expect("opens");
        assert_eq!(opened.expose_secret(), "pw");

        let refused = |key: &SealKey, tenant: &str, id: DeploymentId, name: &str| {
            open_value(key, tenant, id, name, &sealed).is_err()
        };
        assert!(refused(&key, "globex", id, "db"), "another tenant");
        assert!(
            refused(&key, "acme", deployment(), "db"),
            "another deployment"
        );
        assert!(refused(&key, "acme", id, "api"), "renamed");
        let root_alone = SealKey::derive(&root, None, "acme", id);
        assert!(refused(&root_alone, "acme", id, "db"), "the root key alone");
        let other_token = SealKey::derive(&root, Some(&SecretString::from("x")), "acme", id);
        assert!(refused(&other_token, "acme", id, "db"), "another token");
        let other_root = SealKey::derive(&SealKey::new_root(), Some(&token), "acme", id);
        assert!(refused(&other_root, "acme", id, "db"), "the token alone");
    }
}
