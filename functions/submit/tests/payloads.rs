//! The blueprint's files go to the payload store and `DeploymentRequested` names them by size
//! and hash, so a mebibyte of files still makes an event that fits one DynamoDB item (400 KB).

mod support;

use std::collections::BTreeMap;

use overture_events::{DeploymentEvent, Timestamp};
use overture_kit::memory::{FixedClock, MemoryLog};
use overture_kit::payload::{payload_hash, MemoryPayloads, StorePayloads};
use overture_submit::{submit, Submission, SubmitPorts};
use support::{submission, NothingToSeal};

/// A DynamoDB item's limit.
const DYNAMODB_ITEM_BYTES: usize = 400 * 1024;

/// Four files of 250 000 bytes and a `main.tf`: just under the 1 MiB a deployment records.
fn a_mebibyte_of_files() -> BTreeMap<String, String> {
    let mut files: BTreeMap<String, String> = (0..4)
        .map(|i| {
            let line = format!("# padding of file {i}, line after line of Terraform comments\n");
            let text = line.repeat(250_000 / line.len());
            (format!("infra/big-{i}.tf"), text)
        })
        .collect();
    files.insert(
        "infra/main.tf".into(),
        "resource \"terraform_data\" \"x\" {}\n".into(),
    );
    files
}

#[tokio::test]
async fn a_mebibyte_of_files_makes_a_deployment_requested_well_under_a_dynamodb_item() {
    let files = a_mebibyte_of_files();
    let total: usize = files.values().map(String::len).sum();
    assert!(total > 990_000, "{total} bytes of files");
    let log = MemoryLog::new(Timestamp::UNIX_EPOCH);
    let payloads = MemoryPayloads::default();
    let id = submit(
        Submission {
            files: files.clone(),
            ..submission("name: big\nsteps:\n  infra: { run: terraform, with: { dir: infra } }\n")
        },
        &SubmitPorts {
            log: &log,
            seals: &NothingToSeal,
            payloads: &payloads,
            clock: &FixedClock(Timestamp::UNIX_EPOCH),
        },
    )
    .await
    .expect("submitted");

    let events = log.events(id);
    let requested = events.first().expect("DeploymentRequested");
    let size = serde_json::to_vec(&requested.data()).expect("json").len();
    assert!(
        size < DYNAMODB_ITEM_BYTES / 20,
        "DeploymentRequested is {size} bytes of JSON"
    );
    let DeploymentEvent::DeploymentRequested { blueprint, .. } = requested else {
        panic!("first event: {requested:?}");
    };
    assert!(blueprint.files.is_empty(), "no file's text in the event");
    assert_eq!(
        blueprint.stored_files.keys().collect::<Vec<_>>(),
        files.keys().collect::<Vec<_>>()
    );
    for (path, text) in &files {
        let stored = &blueprint.stored_files[path];
        assert_eq!(stored.size, text.len() as u64, "{path}");
        assert_eq!(stored.sha256, payload_hash(text.as_bytes()), "{path}");
        assert_eq!(
            payloads.get(&stored.sha256).await.expect("stored"),
            text.as_bytes(),
            "{path}"
        );
    }
}
