//! An attempt's objects in the payloads bucket, sealed: which attempt a job runs ([`AttemptRef`]),
//! the whole job the task runs ([`AttemptInput`], `input.sealed`, under a KMS data key bound to
//! the attempt) and what the task left ([`AttemptResult`], `result.sealed`, under the same key).
//! Both halves of the task's entrypoint are here ([`open_input`], [`seal_result`]).

use std::collections::HashMap;
use std::path::PathBuf;

use aws_sdk_kms::primitives::Blob;
use base64::Engine as _;
use overture_events::DeploymentId;
use overture_runner::{PortError, RunError, SandboxJob};
use overture_seal::{SealKey, SealedValue, NONCE_BYTES, ROOT_KEY_BYTES};
use secrecy::ExposeSecret;
use serde::{Deserialize, Serialize};

use super::{call, FargateError, KEY_PREFIX};

/// What every sealed input and result starts with: the format and its version.
const MAGIC: &[u8] = b"overture-step-v1\n";
/// The party a step's input is sealed for; the attempt itself is in the sealed name.
const PARTY: &str = "step-task";

/// The attempt a job runs, as its variables name it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttemptRef {
    /// The deployment.
    pub deployment: DeploymentId,
    /// The step.
    pub step: String,
    /// The attempt's number (0 for a run that is not an attempt, such as a destroy).
    pub attempt: u32,
}

impl AttemptRef {
    /// Where this attempt's objects are.
    pub fn prefix(&self) -> String {
        format!(
            "{KEY_PREFIX}{}/{}/{}/",
            self.deployment, self.step, self.attempt
        )
    }

    /// The attempt whose input is at `key` (`steps/<deployment>/<step>/<attempt>/input.sealed`,
    /// as [`FargateSteps::start`] puts it); `None` for any other key.
    pub fn of_input_key(key: &str) -> Option<Self> {
        let rest = key
            .strip_prefix(KEY_PREFIX)?
            .strip_suffix("/input.sealed")?;
        let mut parts = rest.split('/');
        let (deployment, step, attempt) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() || step.is_empty() {
            return None;
        }
        let parsed = Self {
            deployment: deployment.parse().ok()?,
            step: step.to_owned(),
            attempt: attempt.parse().ok()?,
        };
        // Only the key this attempt's input is put at: no second spelling of the same attempt.
        (format!("{}input.sealed", parsed.prefix()) == key).then_some(parsed)
    }

    fn sealed_name(&self, what: &str) -> String {
        format!("{what}/{}/{}", self.step, self.attempt)
    }

    pub(super) fn encryption_context(&self) -> HashMap<String, String> {
        HashMap::from([
            ("purpose".to_owned(), "step-input".to_owned()),
            ("deployment".to_owned(), self.deployment.to_string()),
            ("step".to_owned(), self.step.clone()),
            ("attempt".to_owned(), self.attempt.to_string()),
        ])
    }

    pub(super) fn of(job: &SandboxJob) -> Result<Self, RunError> {
        let variable = |name: &str| {
            job.env
                .iter()
                .find(|(key, _)| key == name)
                .map(|(_, value)| value.as_str())
        };
        let refused =
            |what: &str| RunError::Failed(PortError::refused(FargateError::Job(what.into())));
        let deployment = variable("OVERTURE_DEPLOYMENT")
            .and_then(|d| d.parse().ok())
            .ok_or_else(|| refused("the job names no deployment (OVERTURE_DEPLOYMENT)"))?;
        let step = variable("OVERTURE_STEP")
            .ok_or_else(|| refused("the job names no step (OVERTURE_STEP)"))?
            .to_owned();
        let attempt = match variable("OVERTURE_ATTEMPT") {
            Some(attempt) => attempt
                .parse()
                .map_err(|_| refused("the job's OVERTURE_ATTEMPT is not a number"))?,
            None => 0,
        };
        Ok(Self {
            deployment,
            step,
            attempt,
        })
    }
}

/// What a step task gets to run: the whole job, sealed.
#[derive(Serialize, Deserialize)]
pub struct AttemptInput {
    /// Names the sandbox.
    pub id: String,
    /// Run with `/bin/sh -c`.
    pub command: String,
    /// Plain environment variables.
    pub env: Vec<(String, String)>,
    /// Secret environment variables.
    pub secret_env: Vec<(String, String)>,
    /// Files placed under `/work` (base64).
    pub files: Vec<(PathBuf, String)>,
    /// Files under `/work` to read back once the command has ended.
    pub collect: Vec<PathBuf>,
    /// Whether the step asked for network access (not enforced on Fargate).
    pub network: bool,
    /// Whether the step runs the engine's own program.
    pub engine_program: bool,
    /// When to kill the command, in milliseconds.
    pub timeout_ms: u64,
    /// How much output to keep (the tail).
    pub output_limit: usize,
    /// The deployment's secret values: the task masks them in what it prints (CloudWatch Logs)
    /// and in the tail it leaves. An input sealed before there was this field has none.
    #[serde(default)]
    pub masked: Vec<String>,
}

impl AttemptInput {
    /// The whole of `job`, secrets included, as the task will run it.
    pub fn of(job: &SandboxJob) -> Self {
        Self {
            id: job.id.clone(),
            command: job.command.clone(),
            env: job.env.clone(),
            secret_env: job
                .secret_env
                .iter()
                .map(|(name, value)| (name.clone(), value.expose_secret().to_owned()))
                .collect(),
            files: job
                .files
                .iter()
                .map(|(path, bytes)| (path.clone(), encode(bytes)))
                .collect(),
            collect: job.collect.clone(),
            network: job.network,
            engine_program: job.engine_program,
            timeout_ms: u64::try_from(job.timeout.as_millis()).unwrap_or(u64::MAX),
            output_limit: job.output_limit,
            masked: job
                .masked
                .iter()
                .map(|value| value.expose_secret().to_owned())
                .collect(),
        }
    }
}

/// What a step task left for the runner: the command's output tail, outputs and collected files.
#[derive(Serialize, Deserialize)]
pub struct AttemptResult {
    /// The output's tail (base64).
    pub output: String,
    /// The `$OVERTURE_OUTPUTS` file (base64), or its size when too large to read.
    pub outputs_file: Result<String, (u64, u64)>,
    /// The files of [`AttemptInput::collect`] it left (base64).
    pub collected: Vec<(PathBuf, String)>,
}

/// Opens an attempt's sealed input (`input.sealed`), as the task's entrypoint does: the data key
/// through `kms:Decrypt` bound to the attempt. Returns the data key too, for [`seal_result`].
pub async fn open_input(
    kms: &aws_sdk_kms::Client,
    attempt: &AttemptRef,
    sealed: &[u8],
) -> Result<(AttemptInput, [u8; ROOT_KEY_BYTES]), FargateError> {
    let (root, plain) = unseal(
        sealed,
        attempt,
        "step-input",
        |encrypted: Vec<u8>| async move {
            let decrypted = kms
                .decrypt()
                .ciphertext_blob(Blob::new(encrypted))
                .set_encryption_context(Some(attempt.encryption_context()))
                .send()
                .await
                .map_err(call("KMS", "Decrypt"))?;
            decrypted
                .plaintext()
                .and_then(|key| key.as_ref().try_into().ok())
                .ok_or_else(|| FargateError::DoesNotOpen("input's data key is not 256 bits".into()))
        },
    )
    .await?;
    let input = serde_json::from_slice(&plain)
        .map_err(|e| FargateError::DoesNotOpen(format!("input is malformed: {e}")))?;
    Ok((input, root))
}

/// Seals what the step left (`result.sealed`) under the input's data key, as the task's
/// entrypoint does before it exits.
pub fn seal_result(
    root: &[u8; ROOT_KEY_BYTES],
    attempt: &AttemptRef,
    result: &AttemptResult,
) -> Result<Vec<u8>, FargateError> {
    let plain =
        serde_json::to_vec(result).map_err(|e| FargateError::Job(format!("result: {e}")))?;
    seal(root, &[], attempt, "step-result", &plain)
}

/// Base64, as the input and the result carry bytes.
pub fn encode(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

pub(super) fn decode(text: &str) -> Option<Vec<u8>> {
    base64::engine::general_purpose::STANDARD.decode(text).ok()
}

/// `MAGIC | u16 key length (BE) | encrypted data key | nonce | ciphertext`, as kept states are
/// laid out ([`crate::kept`]); a result carries no key (the runner holds it).
pub(super) fn seal(
    root: &[u8; ROOT_KEY_BYTES],
    encrypted: &[u8],
    attempt: &AttemptRef,
    what: &str,
    plain: &[u8],
) -> Result<Vec<u8>, FargateError> {
    let key = SealKey::derive(root, None, PARTY, attempt.deployment);
    let sealed = overture_seal::seal_bytes(
        &key,
        PARTY,
        attempt.deployment,
        &attempt.sealed_name(what),
        plain,
    )
    .map_err(|e| FargateError::DoesNotOpen(e.to_string()))?;
    let length = u16::try_from(encrypted.len())
        .map_err(|_| FargateError::Job("the encrypted data key is longer than 64 KiB".into()))?;
    let mut body = MAGIC.to_vec();
    body.extend(length.to_be_bytes());
    body.extend(encrypted);
    body.extend(sealed.nonce);
    body.extend(sealed.ciphertext);
    Ok(body)
}

pub(super) async fn unseal<F, Fut>(
    body: &[u8],
    attempt: &AttemptRef,
    what: &str,
    data_key: F,
) -> Result<([u8; ROOT_KEY_BYTES], Vec<u8>), FargateError>
where
    F: FnOnce(Vec<u8>) -> Fut,
    Fut: std::future::Future<Output = Result<[u8; ROOT_KEY_BYTES], FargateError>>,
{
    let refused = |reason: &str| FargateError::DoesNotOpen(format!("{what} {reason}"));
    let rest = body
        .strip_prefix(MAGIC)
        .ok_or_else(|| refused("is not of this format"))?;
    let (length, rest) = rest
        .split_first_chunk::<2>()
        .ok_or_else(|| refused("is cut short"))?;
    let length = usize::from(u16::from_be_bytes(*length));
    if rest.len() < length + NONCE_BYTES {
        return Err(refused("is cut short"));
    }
    let (encrypted, rest) = rest.split_at(length);
    let (nonce, ciphertext) = rest.split_at(NONCE_BYTES);
    let root = data_key(encrypted.to_vec()).await?;
    let key = SealKey::derive(&root, None, PARTY, attempt.deployment);
    let sealed = SealedValue {
        nonce: nonce
            .try_into()
            .map_err(|_| refused("has a malformed nonce"))?,
        ciphertext: ciphertext.to_vec(),
    };
    let plain = overture_seal::open_bytes(
        &key,
        PARTY,
        attempt.deployment,
        &attempt.sealed_name(what),
        &sealed,
    )
    .map_err(|e| refused(&format!("does not open: {e}")))?;
    Ok((root, plain))
}
