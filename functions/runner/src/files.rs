//! The files a step takes from its blueprint's folder (a Terraform configuration, a playbook's
//! folder), as the deployment recorded them.
//!
//! Deployments record each file's size and SHA-256 ([`StoredFile`]) and keep its text in the
//! payload store; [`step_files`] fetches those under the step's folder and refuses any whose
//! bytes do not match what was recorded, whatever the store says. Deployments requested before
//! the payload store carry their files inline, and those are taken as they are.

use std::collections::BTreeMap;

use overture_domain::kind::bundle_dir;
use overture_events::{BlueprintSnapshot, StepSpec, StoredFile};
use overture_kit::payload::{payload_hash, PayloadError, StorePayloads};

/// A recorded file the step needs could not be had as recorded.
#[derive(Debug, thiserror::Error)]
#[error("the deployment's file `{path}`: {problem}")]
pub struct FileError {
    /// The file, relative to the blueprint's folder.
    pub path: String,
    /// What went wrong.
    #[source]
    pub problem: FileProblem,
}

/// What went wrong with one recorded file.
#[derive(Debug, thiserror::Error)]
pub enum FileProblem {
    /// The payload store could not give it.
    #[error(transparent)]
    Payload(#[from] PayloadError),
    /// The bytes given are not the ones recorded.
    #[error("its bytes hash to {actual}, not to the {recorded} the deployment recorded")]
    HashMismatch {
        /// The hash in the event.
        recorded: String,
        /// The hash of the bytes given.
        actual: String,
    },
    /// The bytes given match but are not text (steps take text files only).
    #[error("it is not UTF-8 text")]
    NotText,
}

impl FileError {
    /// Whether fetching it again later may succeed (the store was unavailable).
    pub fn is_retryable(&self) -> bool {
        matches!(&self.problem, FileProblem::Payload(error) if error.is_retryable())
    }
}

/// The files `step` takes, by path relative to the blueprint's folder: every inline file of a
/// deployment requested before the payload store, and the stored files under the step's folder,
/// fetched and checked against their recorded hash.
pub async fn step_files(
    blueprint: &BlueprintSnapshot,
    step: &StepSpec,
    payloads: &dyn StorePayloads,
) -> Result<BTreeMap<String, String>, FileError> {
    let mut files = blueprint.files.clone();
    let Some(dir) = bundle_dir(step) else {
        return Ok(files);
    };
    for (path, stored) in &blueprint.stored_files {
        if under(path, &dir) {
            let text = fetch(stored, payloads).await.map_err(|problem| FileError {
                path: path.clone(),
                problem,
            })?;
            files.insert(path.clone(), text);
        }
    }
    Ok(files)
}

/// Whether `path` is inside the folder `dir` (`""`: the blueprint's own folder, so every file).
fn under(path: &str, dir: &str) -> bool {
    dir.is_empty()
        || path
            .strip_prefix(dir)
            .is_some_and(|rest| rest.starts_with('/'))
}

async fn fetch(stored: &StoredFile, payloads: &dyn StorePayloads) -> Result<String, FileProblem> {
    let bytes = payloads.get(&stored.sha256).await?;
    // The store checks its own names, but the event is what the step must run: check again,
    // so no adapter can hand a step other bytes than those recorded.
    let actual = payload_hash(&bytes);
    if actual != stored.sha256 {
        return Err(FileProblem::HashMismatch {
            recorded: stored.sha256.clone(),
            actual,
        });
    }
    String::from_utf8(bytes).map_err(|_| FileProblem::NotText)
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_trait::async_trait;
    use overture_domain::blueprint::{attach_files, parse};
    use overture_kit::payload::MemoryPayloads;

    const BLUEPRINT: &str = "name: b\nsteps:\n  net: { run: terraform, with: { dir: infra/net } }\n  app: { run: terraform, with: { dir: infra/app } }\n  hello: { run: script, with: { command: 'true' } }\n";

    fn files() -> BTreeMap<String, String> {
        [
            ("infra/net/main.tf", "# net"),
            ("infra/net/modules/vpc.tf", "# vpc"),
            ("infra/app/main.tf", "# app"),
            ("infra/network.tf", "# not under infra/net"),
        ]
        .into_iter()
        .map(|(path, text)| (path.to_owned(), text.to_owned()))
        .collect()
    }

    /// The blueprint as recorded now: its files in `payloads`, by hash in the snapshot.
    async fn stored(payloads: &MemoryPayloads) -> BlueprintSnapshot {
        let mut parsed = parse(BLUEPRINT).expect("valid");
        attach_files(&mut parsed, files()).expect("attached");
        for (path, text) in std::mem::take(&mut parsed.snapshot.files) {
            let sha256 = payloads.put(text.as_bytes()).await.expect("put");
            parsed.snapshot.stored_files.insert(
                path,
                StoredFile {
                    size: text.len() as u64,
                    sha256,
                },
            );
        }
        parsed.snapshot
    }

    fn step<'a>(blueprint: &'a BlueprintSnapshot, name: &str) -> &'a StepSpec {
        blueprint.step(name).expect(name)
    }

    #[tokio::test]
    async fn a_step_fetches_only_the_stored_files_under_its_folder() {
        let payloads = MemoryPayloads::default();
        let blueprint = stored(&payloads).await;
        let net = step_files(&blueprint, step(&blueprint, "net"), &payloads)
            .await
            .expect("fetched");
        assert_eq!(
            net.into_iter().collect::<Vec<_>>(),
            [
                ("infra/net/main.tf".to_owned(), "# net".to_owned()),
                ("infra/net/modules/vpc.tf".to_owned(), "# vpc".to_owned()),
            ]
        );
        let script = step_files(&blueprint, step(&blueprint, "hello"), &payloads)
            .await
            .expect("nothing to fetch");
        assert!(script.is_empty());
    }

    #[tokio::test]
    async fn files_recorded_inline_before_the_payload_store_are_taken_as_they_are() {
        let mut parsed = parse(BLUEPRINT).expect("valid");
        attach_files(&mut parsed, files()).expect("attached");
        let blueprint = parsed.snapshot;
        let empty = MemoryPayloads::default();
        let app = step_files(&blueprint, step(&blueprint, "app"), &empty)
            .await
            .expect("inline");
        assert_eq!(app, files(), "every inline file, as before");
    }

    #[tokio::test]
    async fn a_damaged_or_missing_file_is_refused_and_not_worth_retrying() {
        let payloads = MemoryPayloads::default();
        let blueprint = stored(&payloads).await;
        let hash = blueprint.stored_files["infra/app/main.tf"].sha256.clone();
        payloads.overwrite(&hash, b"# someone else's app".to_vec());
        let error = step_files(&blueprint, step(&blueprint, "app"), &payloads)
            .await
            .expect_err("damaged");
        assert_eq!(error.path, "infra/app/main.tf");
        assert!(!error.is_retryable());
        assert!(error.to_string().contains("changed or damaged"), "{error}");

        let error = step_files(
            &blueprint,
            step(&blueprint, "app"),
            &MemoryPayloads::default(),
        )
        .await
        .expect_err("missing");
        assert!(matches!(
            error.problem,
            FileProblem::Payload(PayloadError::NotFound { .. })
        ));
    }

    /// A store that hands back whatever it likes: the step still gets only the recorded bytes.
    struct Lying;

    #[async_trait]
    impl StorePayloads for Lying {
        async fn put(&self, bytes: &[u8]) -> Result<String, PayloadError> {
            Ok(payload_hash(bytes))
        }

        async fn get(&self, _: &str) -> Result<Vec<u8>, PayloadError> {
            Ok(b"resource \"evil\" \"x\" {}".to_vec())
        }
    }

    #[tokio::test]
    async fn bytes_that_do_not_hash_to_the_recorded_hash_are_refused_whatever_the_store_says() {
        let blueprint = stored(&MemoryPayloads::default()).await;
        let error = step_files(&blueprint, step(&blueprint, "app"), &Lying)
            .await
            .expect_err("refused");
        assert!(
            matches!(error.problem, FileProblem::HashMismatch { .. }),
            "{error}"
        );
        assert!(!error.is_retryable());
    }

    #[tokio::test]
    async fn an_unavailable_store_is_worth_retrying() {
        struct Down;
        #[async_trait]
        impl StorePayloads for Down {
            async fn put(&self, _: &[u8]) -> Result<String, PayloadError> {
                Err(PayloadError::Unavailable("down".into()))
            }
            async fn get(&self, _: &str) -> Result<Vec<u8>, PayloadError> {
                Err(PayloadError::Unavailable("down".into()))
            }
        }
        let blueprint = stored(&MemoryPayloads::default()).await;
        let error = step_files(&blueprint, step(&blueprint, "net"), &Down)
            .await
            .expect_err("down");
        assert!(error.is_retryable());
    }
}
