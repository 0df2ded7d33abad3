//! The local key store: a deployment's secret values sealed at rest in the data directory.
//!
//! Each deployment's values are encrypted with ChaCha20-Poly1305, with the tenant, the deployment
//! and the secret's name as associated data, so a sealed value cannot be moved to another
//! deployment or renamed. One file per deployment (`seals/<deployment>.json`) holds nonces and
//! ciphertexts; purging deletes it.
//!
//! The key depends on who may open the seal:
//! - a deployment made with the user's cloud token is sealed under a key derived (HKDF-SHA256)
//!   from that token, salted with the store's master key and bound to the tenant and the
//!   deployment. The token itself is not kept anywhere readable, so neither the engine alone nor
//!   someone reading the data directory can open the seal: only with the user's token, kept
//!   by the [`TokenCustody`] the store is given (embedded: the running process's memory);
//! - any other deployment is sealed under the master key (`keys/master.key`, created on first
//!   use, mode 0600).
//!
//! What a step keeps between attempts (a Terraform state, which may hold secrets of its own) is
//! sealed the same way, bound to the tenant, the deployment and the step, in
//! `states/<deployment>/<step>.sealed` (nonce, then ciphertext). It outlives the purge at the end
//! of the deployment: a later `overture destroy` needs it.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use chacha20poly1305::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use overture_domain::secret::{SecretString, SecretValues};
use overture_events::DeploymentId;
use serde::{Deserialize, Serialize};

use overture_kit::TokenCustody;
use overture_seal::SealKey;
use std::sync::Arc;

/// Secret values sealed in a directory.
#[derive(Clone)]
pub struct LocalKeyStore {
    root: PathBuf,
    custody: Arc<dyn TokenCustody>,
}

/// What a seal's key comes from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum Lock {
    /// The store's master key alone.
    #[default]
    MasterKey,
    /// The user's cloud token, with the master key as salt.
    Token,
}

/// The reference prefix of seals locked by the user's token.
const TOKEN_SEAL: &str = "token:";

/// The key store failed; never carries a secret value.
#[derive(Debug, thiserror::Error)]
pub enum KeyStoreError {
    /// A file could not be read or written.
    #[error("key store {}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A sealed file is malformed, or its values do not open with this store's key.
    #[error("sealed secrets {} cannot be opened: {reason}", path.display())]
    Unreadable { path: PathBuf, reason: String },
}

#[derive(Serialize, Deserialize)]
struct SealedFile {
    tenant: String,
    #[serde(default)]
    lock: Lock,
    values: BTreeMap<String, SealedValueText>,
}

/// A sealed value as the seal file keeps it: nonce and ciphertext in hex.
#[derive(Serialize, Deserialize)]
struct SealedValueText {
    nonce: String,
    ciphertext: String,
}

impl LocalKeyStore {
    /// A key store under `root` (the data directory's `keys/` and `seals/`), opening token-locked
    /// seals with the tokens `custody` keeps.
    pub fn new(root: impl Into<PathBuf>, custody: Arc<dyn TokenCustody>) -> Self {
        Self {
            root: root.into(),
            custody,
        }
    }

    /// The key a deployment's values are sealed under (see [`overture_seal::SealKey`]).
    fn seal_key(
        &self,
        lock: Lock,
        token: Option<&SecretString>,
        tenant: &str,
        deployment: DeploymentId,
        path: &Path,
    ) -> Result<SealKey, KeyStoreError> {
        let master: [u8; overture_seal::ROOT_KEY_BYTES] = self.master_key()?.into();
        match (lock, token) {
            (Lock::MasterKey, _) => Ok(SealKey::derive(&master, None, tenant, deployment)),
            (Lock::Token, Some(token)) => {
                Ok(SealKey::derive(&master, Some(token), tenant, deployment))
            }
            (Lock::Token, None) => Err(KeyStoreError::Unreadable {
                path: path.to_path_buf(),
                reason: "it opens only with the cloud token of the user who deployed; give it to \
                         `overture resume` with --token-file FILE or OS_TOKEN"
                    .into(),
            }),
        }
    }

    fn seal_path(&self, deployment: DeploymentId) -> PathBuf {
        self.root.join("seals").join(format!("{deployment}.json"))
    }

    fn master_key(&self) -> Result<Key, KeyStoreError> {
        let path = self.root.join("keys").join("master.key");
        let io = |source| KeyStoreError::Io {
            path: path.clone(),
            source,
        };
        match std::fs::read(&path) {
            Ok(bytes) if bytes.len() == 32 => return Ok(*Key::from_slice(&bytes)),
            Ok(_) => {
                return Err(KeyStoreError::Unreadable {
                    path,
                    reason: "the master key is not 32 bytes".into(),
                })
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => return Err(io(error)),
        }
        let dir = self.root.join("keys");
        std::fs::create_dir_all(&dir).map_err(io)?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).map_err(io)?;
        let key = ChaCha20Poly1305::generate_key(&mut OsRng);
        // create_new: two processes creating the key at once must not overwrite each other's.
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
        {
            Ok(mut file) => {
                file.write_all(&key).map_err(io)?;
                file.sync_all().map_err(io)?;
                Ok(key)
            }
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => self.master_key(),
            Err(error) => Err(io(error)),
        }
    }

    /// Seals the values for a deployment, under a key derived from the user's `token` when one
    /// is given; returns the seal's reference.
    pub fn seal_values(
        &self,
        deployment: DeploymentId,
        tenant: &str,
        secrets: &SecretValues,
        token: Option<&SecretString>,
    ) -> Result<String, KeyStoreError> {
        let path = self.seal_path(deployment);
        let lock = if token.is_some() {
            Lock::Token
        } else {
            Lock::MasterKey
        };
        let key = self.seal_key(lock, token, tenant, deployment, &path)?;
        let mut values = BTreeMap::new();
        for (name, value) in secrets {
            let sealed =
                overture_seal::seal_value(&key, tenant, deployment, name, value).map_err(|e| {
                    KeyStoreError::Unreadable {
                        path: path.clone(),
                        reason: e.to_string(),
                    }
                })?;
            values.insert(
                name.clone(),
                SealedValueText {
                    nonce: hex::encode(sealed.nonce),
                    ciphertext: hex::encode(sealed.ciphertext),
                },
            );
        }
        let file = SealedFile {
            tenant: tenant.to_owned(),
            lock,
            values,
        };
        let json = serde_json::to_vec(&file).map_err(|e| KeyStoreError::Unreadable {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        write_private(&path, &json)?;
        Ok(match lock {
            Lock::Token => format!("{TOKEN_SEAL}{deployment}"),
            Lock::MasterKey => format!("local:{deployment}"),
        })
    }

    /// Opens the values sealed for a deployment of this tenant; a seal locked by the user's token
    /// opens only with that `token`.
    pub fn open_values(
        &self,
        deployment: DeploymentId,
        tenant: &str,
        token: Option<&SecretString>,
    ) -> Result<SecretValues, KeyStoreError> {
        let path = self.seal_path(deployment);
        let unreadable = |reason: String| KeyStoreError::Unreadable {
            path: path.clone(),
            reason,
        };
        let bytes = std::fs::read(&path).map_err(|source| KeyStoreError::Io {
            path: path.clone(),
            source,
        })?;
        let file: SealedFile =
            serde_json::from_slice(&bytes).map_err(|e| unreadable(e.to_string()))?;
        let key = self.seal_key(file.lock, token, tenant, deployment, &path)?;
        let mut secrets = SecretValues::new();
        for (name, sealed) in file.values {
            let nonce = hex::decode(&sealed.nonce)
                .ok()
                .and_then(|nonce| <[u8; overture_seal::NONCE_BYTES]>::try_from(nonce).ok())
                .ok_or_else(|| unreadable(format!("the nonce of `{name}` is not 12 bytes")))?;
            let ciphertext =
                hex::decode(&sealed.ciphertext).map_err(|e| unreadable(e.to_string()))?;
            let sealed = overture_seal::SealedValue { nonce, ciphertext };
            let value = overture_seal::open_value(&key, tenant, deployment, &name, &sealed)
                .map_err(|e| unreadable(e.to_string()))?;
            secrets.insert(name, value);
        }
        Ok(secrets)
    }

    /// Deletes a deployment's sealed values; succeeds when there are none.
    pub fn purge_values(&self, deployment: DeploymentId) -> Result<(), KeyStoreError> {
        let path = self.seal_path(deployment);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(KeyStoreError::Io { path, source }),
        }
    }
}

impl LocalKeyStore {
    fn step_state_path(&self, deployment: DeploymentId, step: &str) -> PathBuf {
        self.root
            .join("states")
            .join(deployment.to_string())
            .join(format!("{step}.sealed"))
    }

    /// Seals what a step keeps, replacing what it kept before.
    pub fn seal_step_state(
        &self,
        deployment: DeploymentId,
        tenant: &str,
        step: &str,
        state: &[u8],
    ) -> Result<(), KeyStoreError> {
        let path = self.step_state_path(deployment, step);
        let cipher = ChaCha20Poly1305::new(&self.master_key()?);
        let nonce = ChaCha20Poly1305::generate_nonce(&mut OsRng);
        let aad = step_state_associated_data(tenant, deployment, step);
        let ciphertext = cipher
            .encrypt(
                &nonce,
                Payload {
                    msg: state,
                    aad: aad.as_bytes(),
                },
            )
            .map_err(|_| KeyStoreError::Unreadable {
                path: path.clone(),
                reason: "encryption failed".into(),
            })?;
        let mut sealed = nonce.to_vec();
        sealed.extend(ciphertext);
        write_private(&path, &sealed)
    }

    /// Opens what a step of a deployment of this tenant kept, if it kept anything.
    pub fn open_step_state(
        &self,
        deployment: DeploymentId,
        tenant: &str,
        step: &str,
    ) -> Result<Option<Vec<u8>>, KeyStoreError> {
        let path = self.step_state_path(deployment, step);
        let sealed = match std::fs::read(&path) {
            Ok(sealed) => sealed,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(KeyStoreError::Io { path, source }),
        };
        let unreadable = |reason: String| KeyStoreError::Unreadable {
            path: path.clone(),
            reason,
        };
        if sealed.len() < 12 {
            return Err(unreadable("the file is shorter than a nonce".into()));
        }
        let (nonce, ciphertext) = sealed.split_at(12);
        let aad = step_state_associated_data(tenant, deployment, step);
        let cipher = ChaCha20Poly1305::new(&self.master_key()?);
        cipher
            .decrypt(
                Nonce::from_slice(nonce),
                Payload {
                    msg: ciphertext,
                    aad: aad.as_bytes(),
                },
            )
            .map(Some)
            .map_err(|_| {
                unreadable(format!(
                    "it does not open for tenant `{tenant}`, deployment {deployment} and step `{step}`"
                ))
            })
    }
}

fn step_state_associated_data(tenant: &str, deployment: DeploymentId, step: &str) -> String {
    format!("overture-step-state-v1\0{tenant}\0{deployment}\0{step}")
}

fn write_private(path: &Path, bytes: &[u8]) -> Result<(), KeyStoreError> {
    let io = |source| KeyStoreError::Io {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io)?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(io)?;
    }
    let temporary = path.with_extension("tmp");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temporary)
        .map_err(io)?;
    file.write_all(bytes).map_err(io)?;
    file.sync_all().map_err(io)?;
    std::fs::rename(&temporary, path).map_err(io)
}

#[async_trait]
impl overture_submit::SealSecrets for LocalKeyStore {
    async fn seal(
        &self,
        deployment: DeploymentId,
        tenant: &str,
        secrets: &SecretValues,
        token: Option<&SecretString>,
    ) -> Result<String, overture_submit::SealError> {
        let seal = self
            .seal_values(deployment, tenant, secrets, token)
            .map_err(|e| overture_submit::SealError::Failed(Box::new(e)))?;
        // Whoever runs the deployment from here on needs the token to.
        if let Some(token) = token {
            self.custody
                .keep(deployment, tenant, token)
                .await
                .map_err(|e| {
                    if e.is_retryable() {
                        overture_submit::SealError::Unavailable(Box::new(e))
                    } else {
                        overture_submit::SealError::Failed(Box::new(e))
                    }
                })?;
        }
        Ok(seal)
    }
}

#[async_trait]
impl overture_runner::OpenSeal for LocalKeyStore {
    async fn open(
        &self,
        deployment: DeploymentId,
        tenant: &str,
        seal: &str,
    ) -> Result<SecretValues, overture_runner::PortError> {
        let token = if seal.starts_with(TOKEN_SEAL) {
            self.custody.token(deployment, tenant).await.map_err(|e| {
                if e.is_retryable() {
                    overture_runner::PortError::unavailable(e)
                } else {
                    overture_runner::PortError::refused(e)
                }
            })?
        } else {
            None
        };
        self.open_values(deployment, tenant, token.as_ref())
            .map_err(port_error)
    }
}

#[async_trait]
impl overture_runner::KeepStepState for LocalKeyStore {
    async fn load(
        &self,
        deployment: DeploymentId,
        tenant: &str,
        step: &str,
    ) -> Result<Option<Vec<u8>>, overture_runner::PortError> {
        self.open_step_state(deployment, tenant, step)
            .map_err(port_error)
    }

    async fn save(
        &self,
        deployment: DeploymentId,
        tenant: &str,
        step: &str,
        state: &[u8],
    ) -> Result<(), overture_runner::PortError> {
        self.seal_step_state(deployment, tenant, step, state)
            .map_err(port_error)
    }
}

/// A file that could not be read or written may be readable later; one that does not open will
/// not open later.
fn port_error(error: KeyStoreError) -> overture_runner::PortError {
    match error {
        error @ KeyStoreError::Io { .. } => overture_runner::PortError::unavailable(error),
        error @ KeyStoreError::Unreadable { .. } => overture_runner::PortError::refused(error),
    }
}

#[async_trait]
impl overture_orchestrator::PurgeSecrets for LocalKeyStore {
    async fn purge(
        &self,
        deployment: DeploymentId,
    ) -> Result<(), overture_orchestrator::WorkError> {
        self.purge_values(deployment)
            .map_err(overture_orchestrator::WorkError::unavailable)?;
        // Once the seal is gone the token has nothing left to open, and no call left to make.
        self.custody.forget(deployment).await.map_err(|e| match e {
            e @ overture_kit::CustodyError::Unavailable(_) => {
                overture_orchestrator::WorkError::unavailable(e)
            }
            e => overture_orchestrator::WorkError::refused(e),
        })?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::SessionTokens;
    use secrecy::ExposeSecret;
    use uuid::Uuid;

    #[test]
    fn sealed_values_open_only_for_their_tenant_and_deployment_and_are_gone_after_a_purge() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = LocalKeyStore::new(dir.path(), Arc::new(SessionTokens::new()));
        let deployment = DeploymentId::from_uuid(Uuid::now_v7());
        let secrets: SecretValues =
            [("api_key".to_owned(), SecretString::from("s3cr3t-value"))].into();
        store
            .seal_values(deployment, "acme", &secrets, None)
            .expect("seals");

        let sealed = std::fs::read(store.seal_path(deployment)).expect("sealed file");
        assert!(
            !String::from_utf8_lossy(&sealed).contains("s3cr3t-value"),
            "the value is encrypted at rest"
        );

        let opened = store.open_values(deployment, "acme", None).expect("opens");
        assert_eq!(opened["api_key"].expose_secret(), "s3cr3t-value");
        assert!(
            store.open_values(deployment, "globex", None).is_err(),
            "another tenant's binding does not open it"
        );

        store.purge_values(deployment).expect("purges");
        assert!(store.open_values(deployment, "acme", None).is_err());
        store
            .purge_values(deployment)
            .expect("purging twice is harmless");
    }

    #[test]
    fn a_step_state_is_sealed_to_its_step_and_survives_the_purge() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = LocalKeyStore::new(dir.path(), Arc::new(SessionTokens::new()));
        let deployment = DeploymentId::from_uuid(Uuid::now_v7());
        assert_eq!(
            store
                .open_step_state(deployment, "acme", "infra")
                .expect("reads"),
            None
        );

        store
            .seal_step_state(
                deployment,
                "acme",
                "infra",
                b"{\"password\": \"tf-s3cr3t\"}",
            )
            .expect("seals");
        let sealed = std::fs::read(store.step_state_path(deployment, "infra")).expect("file");
        assert!(!String::from_utf8_lossy(&sealed).contains("tf-s3cr3t"));

        store.purge_values(deployment).expect("purges the secrets");
        let opened = store
            .open_step_state(deployment, "acme", "infra")
            .expect("opens");
        assert_eq!(
            opened.as_deref(),
            Some(&b"{\"password\": \"tf-s3cr3t\"}"[..])
        );
        assert!(store
            .open_step_state(deployment, "globex", "infra")
            .is_err());
        std::fs::copy(
            store.step_state_path(deployment, "infra"),
            store.step_state_path(deployment, "other"),
        )
        .expect("copies");
        assert!(
            store.open_step_state(deployment, "acme", "other").is_err(),
            "a state moved to another step does not open"
        );
    }

    #[test]
    fn a_seal_locked_by_the_token_opens_with_that_token_and_that_binding_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = LocalKeyStore::new(dir.path(), Arc::new(SessionTokens::new()));
        let deployment = DeploymentId::from_uuid(Uuid::now_v7());
        let token = SecretString::from("a1b2c3d4e5f6-users-token");
        let secrets: SecretValues = [
            (
                "overture.ssh-key".to_owned(),
                SecretString::from("PRIVATE-KEY-BYTES"),
            ),
            ("overture.token".to_owned(), token.clone()),
        ]
        .into();
        let seal = store
            .seal_values(deployment, "acme", &secrets, Some(&token))
            .expect("seals");
        assert!(seal.starts_with(TOKEN_SEAL));
        let at_rest = std::fs::read_to_string(store.seal_path(deployment)).expect("file");
        assert!(!at_rest.contains("PRIVATE-KEY-BYTES") && !at_rest.contains("users-token"));

        let opened = store
            .open_values(deployment, "acme", Some(&token))
            .expect("opens with the token");
        assert_eq!(
            opened["overture.ssh-key"].expose_secret(),
            "PRIVATE-KEY-BYTES"
        );

        let refused = store
            .open_values(deployment, "acme", None)
            .expect_err("the engine alone cannot open it");
        assert!(refused.to_string().contains("--token-file"), "{refused}");
        let other_token = SecretString::from("a1b2c3d4e5f6-another-token");
        assert!(
            store
                .open_values(deployment, "acme", Some(&other_token))
                .is_err(),
            "another token does not open it"
        );
        assert!(
            store
                .open_values(deployment, "globex", Some(&token))
                .is_err(),
            "another tenant's binding does not open it"
        );
        let other = DeploymentId::from_uuid(Uuid::now_v7());
        std::fs::copy(store.seal_path(deployment), store.seal_path(other)).expect("copies");
        assert!(
            store.open_values(other, "acme", Some(&token)).is_err(),
            "moved to another deployment, it does not open"
        );
    }

    #[tokio::test]
    async fn the_port_opens_a_token_seal_while_the_session_holds_the_token() {
        use overture_runner::OpenSeal;
        use overture_submit::SealSecrets;
        let dir = tempfile::tempdir().expect("tempdir");
        let sessions = SessionTokens::new();
        let store = LocalKeyStore::new(dir.path(), Arc::new(sessions.clone()));
        let deployment = DeploymentId::from_uuid(Uuid::now_v7());
        let token = SecretString::from("ffee-users-token");
        let secrets: SecretValues = [("db".to_owned(), SecretString::from("pw"))].into();
        let seal = store
            .seal(deployment, "acme", &secrets, Some(&token))
            .await
            .expect("seals");
        assert!(store.open(deployment, "acme", &seal).await.is_ok());

        sessions.forget(deployment);
        assert!(
            store.open(deployment, "acme", &seal).await.is_err(),
            "a process without the token cannot open it"
        );
    }
}
