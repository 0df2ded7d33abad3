//! The local AWS emulator (`scripts/aws-emulator.py`, moto's server) for the tests: one per
//! test binary, on 127.0.0.1.

use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long moto may take to start answering.
const START_WITHIN: Duration = Duration::from_secs(30);

/// The endpoint of this test binary's emulator, started on first use.
///
/// It is started from a thread that lives as long as the test binary, with the parent-death
/// signal set: tests end their own threads, but the emulator must outlive them all and still
/// never outlive the binary.
pub fn emulator() -> &'static str {
    static ENDPOINT: OnceLock<String> = OnceLock::new();
    ENDPOINT.get_or_init(|| {
        let (sender, receiver) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let port = free_port();
            let launcher = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/aws-emulator.py");
            let mut command = Command::new("python3");
            command
                .args([launcher, "--port", &port.to_string()])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            // SAFETY: prctl in the child before exec touches no memory of the parent's.
            unsafe {
                command.pre_exec(|| {
                    if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) == 0 {
                        Ok(())
                    } else {
                        Err(std::io::Error::last_os_error())
                    }
                });
            }
            let child = command.spawn().expect(
                "the emulator runs (scripts/setup.sh installs moto: pip install 'moto[server]')",
            );
            sender.send(port).expect("the test waits for the port");
            let _keep = child;
            loop {
                std::thread::park();
            }
        });
        let port = receiver.recv().expect("moto started");
        let start = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                start.elapsed() < START_WITHIN,
                "the emulator never listened on {port}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        format!("http://127.0.0.1:{port}")
    })
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("its address").port()
}

/// The emulator's KMS key for the tests (made on first use), by its alias.
#[allow(dead_code)] // Not every test binary seals.
pub async fn kms_key(kms: &aws_sdk_kms::Client) -> &'static str {
    const ALIAS: &str = "alias/overture-tests";
    if kms.describe_key().key_id(ALIAS).send().await.is_err() {
        let key = kms.create_key().send().await.expect("a KMS key");
        let id = key.key_metadata().expect("metadata").key_id().to_owned();
        // Another test may have made the alias meanwhile; either key will do.
        let _ = kms
            .create_alias()
            .alias_name(ALIAS)
            .target_key_id(id)
            .send()
            .await;
    }
    ALIAS
}

/// Whether any text or binary attribute of `items`, however nested, holds `needle`'s bytes.
#[allow(dead_code)] // Not every test binary scans.
pub fn holds_bytes(
    items: &[std::collections::HashMap<String, aws_sdk_dynamodb::types::AttributeValue>],
    needle: &[u8],
) -> bool {
    use aws_sdk_dynamodb::types::AttributeValue as V;
    fn walk(value: &V, needle: &[u8]) -> bool {
        let has = |bytes: &[u8]| bytes.windows(needle.len()).any(|w| w == needle);
        match value {
            V::S(text) => has(text.as_bytes()),
            V::B(blob) => has(blob.as_ref()),
            V::M(map) => map.values().any(|v| walk(v, needle)),
            V::L(list) => list.iter().any(|v| walk(v, needle)),
            _ => false,
        }
    }
    items
        .iter()
        .flat_map(|item| item.values())
        .any(|value| walk(value, needle))
}

/// Whether any item of `table` holds `needle` in clear, read by a scan.
#[allow(dead_code)] // Not every test binary scans.
pub async fn table_holds(dynamodb: &aws_sdk_dynamodb::Client, table: &str, needle: &str) -> bool {
    let scanned = dynamodb
        .scan()
        .table_name(table)
        .send()
        .await
        .expect("scan");
    holds_bytes(scanned.items(), needle.as_bytes())
}

/// Copies `table`'s item of deployment `from`, as it is, to a new deployment, as someone
/// with write access to the table could; the new deployment.
#[allow(dead_code)] // Not every test binary copies items.
pub async fn copied_to_another_deployment(
    dynamodb: &aws_sdk_dynamodb::Client,
    table: &str,
    from: overture_events::DeploymentId,
) -> overture_events::DeploymentId {
    use aws_sdk_dynamodb::types::AttributeValue;
    let item = dynamodb
        .get_item()
        .table_name(table)
        .key("deployment", AttributeValue::S(from.to_string()))
        .send()
        .await
        .expect("read the item");
    let mut copied = item.item().expect("an item").clone();
    let elsewhere = overture_events::DeploymentId::from_uuid(uuid::Uuid::now_v7());
    copied.insert(
        "deployment".into(),
        AttributeValue::S(elsewhere.to_string()),
    );
    dynamodb
        .put_item()
        .table_name(table)
        .set_item(Some(copied))
        .send()
        .await
        .expect("copy");
    elsewhere
}
