//! The payload-store contract ([`overture_kit::payload_contract`]) on the data directory's
//! store: two clients are two stores on one folder, as two processes would hold; and what only
//! this store can show (a damaged file, the files' modes, no temporary file left).

use std::os::unix::fs::PermissionsExt;

use overture_infra::payloads::DirPayloads;
use overture_kit::payload::{PayloadError, StorePayloads};

fn folder() -> &'static std::path::Path {
    // Kept for the whole test run: every test has payloads of its own in it.
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().expect("temp dir"))
        .path()
}

async fn clients() -> (DirPayloads, DirPayloads) {
    let root = folder().join("payloads");
    (DirPayloads::new(&root), DirPayloads::new(&root))
}

overture_kit::payload_contract_tests!(clients());

#[tokio::test]
async fn a_changed_file_is_refused_as_corrupt_and_a_new_put_repairs_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = DirPayloads::new(dir.path().join("payloads"));
    let hash = store.put(b"# main.tf").await.expect("put");
    std::fs::write(store.path_of(&hash), b"# changed").expect("tamper");
    match store.get(&hash).await {
        Err(error @ PayloadError::Corrupt { .. }) => assert!(!error.is_retryable()),
        other => panic!("expected Corrupt, got {other:?}"),
    }
    store.put(b"# main.tf").await.expect("put again");
    assert_eq!(store.get(&hash).await.expect("repaired"), b"# main.tf");
}

#[tokio::test]
async fn payloads_are_whole_files_nobody_else_may_write() {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path().join("payloads");
    let store = DirPayloads::new(&root);
    let hash = store.put(b"resource {}").await.expect("put");
    let names: Vec<String> = std::fs::read_dir(&root)
        .expect("folder")
        .map(|entry| {
            entry
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    assert_eq!(names, [hash.as_str()], "no temporary file is left");
    let mode = |path: &std::path::Path| {
        std::fs::metadata(path)
            .expect("metadata")
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(
        mode(&store.path_of(&hash)) & 0o022,
        0,
        "not writable by others"
    );
    assert_eq!(
        mode(&root) & 0o022,
        0,
        "the folder is not writable by others"
    );
}
