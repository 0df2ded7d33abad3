//! The engine's own signing key: an Ed25519 key made once in the data directory
//! (`engine-key`, mode 0600), with which `overture export` signs the heads of the chains it
//! writes. Signatures are SSH signatures (`ssh-keygen -Y sign`), so anyone can check them with
//! `ssh-keygen -Y verify` and the public key `overture key` prints.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use ssh_key::{HashAlg, LineEnding, PrivateKey, PublicKey, SshSig};

use crate::Failure;

/// The SSH signature namespace of an export's heads (`ssh-keygen -Y verify -n`).
pub const NAMESPACE: &str = "overture-export";

/// The key file in a data directory.
fn key_file(data_dir: &Path) -> PathBuf {
    data_dir.join("engine-key")
}

/// The data directory's key, made on first use.
pub fn load_or_create(data_dir: &Path) -> Result<PrivateKey, Failure> {
    let path = key_file(data_dir);
    let engine = |what: &str, e: &dyn std::fmt::Display| {
        Failure::Engine(anyhow::anyhow!("{what} {}: {e}", path.display()))
    };
    match std::fs::read_to_string(&path) {
        Ok(text) => PrivateKey::from_openssh(text)
            .map_err(|e| engine("the engine's key cannot be read from", &e)),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(data_dir)
                .map_err(|e| engine("cannot make the data directory of", &e))?;
            let key = PrivateKey::random(&mut rand_core::OsRng, ssh_key::Algorithm::Ed25519)
                .map_err(|e| engine("cannot make the engine's key", &e))?;
            let text = key
                .to_openssh(LineEnding::LF)
                .map_err(|e| engine("cannot encode the engine's key", &e))?;
            // create_new: two processes making the key at once must not overwrite each other's;
            // the loser reads the winner's.
            let created = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path);
            match created {
                Ok(mut file) => file
                    .write_all(text.as_bytes())
                    .and_then(|()| file.sync_all())
                    .map_err(|e| engine("cannot write the engine's key to", &e))
                    .map(|()| key),
                Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
                    load_or_create(data_dir)
                }
                Err(error) => Err(engine("cannot write the engine's key to", &error)),
            }
        }
        Err(error) => Err(engine("the engine's key cannot be read from", &error)),
    }
}

/// The public key in OpenSSH form and its SHA-256 fingerprint.
pub fn describe(key: &PublicKey) -> (String, String) {
    let openssh = key.to_openssh().unwrap_or_default();
    (openssh, key.fingerprint(HashAlg::Sha256).to_string())
}

/// An SSH signature of `message`, armoured.
pub fn sign(key: &PrivateKey, message: &[u8]) -> Result<String, Failure> {
    let signature = key
        .sign(NAMESPACE, HashAlg::Sha512, message)
        .map_err(|e| Failure::Engine(anyhow::anyhow!("cannot sign the export: {e}")))?;
    signature
        .to_pem(LineEnding::LF)
        .map_err(|e| Failure::Engine(anyhow::anyhow!("cannot encode the signature: {e}")))
}

/// Whether `armoured` is `key`'s signature of `message`.
pub fn verify(key: &PublicKey, message: &[u8], armoured: &str) -> bool {
    SshSig::from_pem(armoured)
        .is_ok_and(|signature| key.verify(NAMESPACE, message, &signature).is_ok())
}

/// A public key given to `--trust`: a file holding one, or the key itself in OpenSSH form.
pub fn parse_trusted(given: &str) -> Result<PublicKey, Failure> {
    let text = match std::fs::read_to_string(given) {
        Ok(text) => text,
        Err(_) => given.to_owned(),
    };
    PublicKey::from_openssh(text.trim()).map_err(|e| {
        Failure::BadInput(format!(
            "--trust `{given}`: neither a file holding an OpenSSH public key nor such a key \
             (`ssh-ed25519 AAAA...`, as `overture key` prints it): {e}"
        ))
    })
}
