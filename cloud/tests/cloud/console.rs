//! Nova's console output: every server prints its own SSH host keys there as cloud-init does,
//! and the rekey fault gives a server new ones.

use std::net::Ipv4Addr;

use serde_json::json;

use crate::support::{ssh, text, Key, Tenant, TestCloud};

/// The console output of a server, as the tenant reads it.
async fn console(
    cloud: &TestCloud,
    tenant: &Tenant,
    id: &str,
    length: serde_json::Value,
) -> String {
    let reply = cloud
        .post_as(
            tenant,
            &format!("/compute/v2.1/servers/{id}/action"),
            json!({"os-getConsoleOutput": {"length": length}}),
        )
        .await;
    assert_eq!(reply.status, 200, "{reply:?}");
    text(&reply.body["output"])
}

/// The public keys of the last `SSH HOST KEY KEYS` block of a console: `TYPE BASE64` each.
fn console_keys(console: &str) -> Vec<String> {
    let lines: Vec<&str> = console.lines().collect();
    let start = lines
        .iter()
        .rposition(|l| *l == "-----BEGIN SSH HOST KEY KEYS-----")
        .expect("a block of keys");
    lines[start + 1..]
        .iter()
        .take_while(|l| **l != "-----END SSH HOST KEY KEYS-----")
        .map(|l| l.split_whitespace().take(2).collect::<Vec<_>>().join(" "))
        .collect()
}

/// The host key the server's sshd offers, as `ssh-keyscan` from the host reads it.
async fn offered(address: Ipv4Addr) -> String {
    let output = tokio::process::Command::new("ssh-keyscan")
        .args(["-t", "ed25519", "-T", "10", &address.to_string()])
        .output()
        .await
        .expect("ssh-keyscan runs");
    let text = String::from_utf8_lossy(&output.stdout);
    text.lines()
        .find(|l| !l.starts_with('#'))
        .map(|l| {
            l.split_whitespace()
                .skip(1)
                .take(2)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|| panic!("no key offered: {output:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_server_prints_its_own_host_keys_and_rekey_changes_them() {
    let cloud = TestCloud::start().await;
    let tenant = cloud.tenant("tenant-a").await;
    let other = cloud.tenant("tenant-b").await;
    cloud.admit_ssh_from_host(&tenant).await;
    let key = Key::new();
    let one = cloud.boot(&tenant, json!({"name": "web-1"}), &key).await;
    let two = cloud.boot(&tenant, json!({"name": "web-2"}), &key).await;

    let first = console(&cloud, &tenant, &one.id, json!(null)).await;
    assert!(
        first.contains("cloud-init: -----BEGIN SSH HOST KEY FINGERPRINTS-----\n"),
        "{first}"
    );
    assert!(first.contains(" root@web-1 (ED25519)\n"), "{first}");
    let keys = console_keys(&first);
    assert_eq!(keys.len(), 1, "{first}");
    assert_eq!(
        keys[0],
        offered(one.address).await,
        "the console tells the truth"
    );
    let keys_two = console_keys(&console(&cloud, &tenant, &two.id, json!(-1)).await);
    assert_eq!(keys_two[0], offered(two.address).await);
    assert_ne!(keys, keys_two, "each server has its own host key");

    // `length` answers the last lines only.
    let tail = console(&cloud, &tenant, &one.id, json!(2)).await;
    assert_eq!(
        tail.lines().last(),
        Some("-----END SSH HOST KEY KEYS-----"),
        "{tail}"
    );
    assert_eq!(tail.lines().count(), 2, "{tail}");

    // Another project's token sees no such server.
    let elsewhere = cloud
        .post_as(
            &other,
            &format!("/compute/v2.1/servers/{}/action", one.id),
            json!({"os-getConsoleOutput": {}}),
        )
        .await;
    assert_eq!(elsewhere.status, 404, "{elsewhere:?}");
    let unknown = cloud
        .post_as(
            &tenant,
            &format!("/compute/v2.1/servers/{}/action", one.id),
            json!({"reboot": {"type": "SOFT"}}),
        )
        .await;
    assert_eq!(unknown.status, 400, "{unknown:?}");

    let fault = cloud
        .fault(json!({"project": "tenant-a", "kind": "rekey", "server": "web-1"}))
        .await;
    assert_eq!(fault.status, 200, "{fault:?}");
    let now_offered = offered(one.address).await;
    assert_ne!(now_offered, keys[0], "the key changed");
    let after = console(&cloud, &tenant, &one.id, json!(null)).await;
    assert_eq!(
        console_keys(&after),
        vec![now_offered],
        "as its console says"
    );
    assert!(after.starts_with(&first), "the old boot stays in the log");
    assert_eq!(
        offered(two.address).await,
        keys_two[0],
        "web-2 keeps its key"
    );
    // Root's keys are the same: the server takes logins as before.
    assert!(ssh(&key, one.address, "true").await.status.success());
}
