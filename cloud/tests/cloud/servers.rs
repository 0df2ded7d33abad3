//! A server's life: it boots with an address, takes root's key and hostname from its user_data,
//! keeps what a session leaves running, and is gone, processes included, once deleted.

use reqwest::Method;
use serde_json::json;

use crate::support::{leftovers, pids_in, running, ssh, text, user_data, From, Key, TestCloud};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_boots_takes_its_key_keeps_its_jobs_and_is_deleted_whole() {
    let cloud = TestCloud::start().await;
    let tenant = cloud.tenant("tenant-a").await;
    let key = Key::new();
    let stranger = Key::new();
    let id = cloud
        .create_server(
            &tenant,
            json!({"name": "web-1", "imageRef": "any", "flavorRef": "any", "networks": "auto",
                   "metadata": {"tier": "web"},
                   "user_data": user_data(&[&key.public], Some("web-one"))}),
        )
        .await;
    let shown = cloud.wait_built(&tenant, &id).await;
    assert_eq!(shown["status"], "ACTIVE", "{shown}");
    assert_eq!(shown["tenant_id"], tenant.id.as_str());
    assert_eq!(shown["metadata"], json!({"tier": "web"}));
    assert_eq!(shown["security_groups"], json!([{"name": "default"}]));
    let address: std::net::Ipv4Addr = text(&shown["addresses"]["private"][0]["addr"])
        .parse()
        .expect("an address");
    let gateway = cloud.gateway(&tenant).await;
    assert_eq!(
        address.octets()[..3],
        gateway
            .parse::<std::net::Ipv4Addr>()
            .expect("an address")
            .octets()[..3],
        "the server is on the project's /24"
    );
    let listed = cloud
        .as_tenant(
            &tenant,
            Method::GET,
            "/compute/v2.1/servers?name=web-1",
            None,
        )
        .await;
    assert_eq!(
        listed.body,
        json!({"servers": [{"id": id, "name": "web-1", "links": []}]})
    );

    let group = cloud.default_group(&tenant).await;
    let host = format!("{gateway}/32");
    let rule = cloud.ssh_rule(&tenant, &group, From::Prefix(&host)).await;
    assert_eq!(rule.status, 201, "{rule:?}");

    let session = ssh(
        &key,
        address,
        "hostname; setsid sleep 600 >/dev/null 2>&1 </dev/null & echo $!",
    )
    .await;
    assert!(session.status.success(), "{session:?}");
    let stdout = String::from_utf8_lossy(&session.stdout).into_owned();
    let mut lines = stdout.lines();
    assert_eq!(lines.next(), Some("web-one"));
    let refused = ssh(&stranger, address, "true").await;
    assert!(!refused.status.success(), "another key is refused");

    // The job outlives its session: it still runs in the server's namespace.
    let namespace = cloud.namespace_of(&id).await;
    let sleeping: Vec<u32> = pids_in(&namespace)
        .into_iter()
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|cmdline| cmdline == "sleep\u{0}600\u{0}")
        })
        .collect();
    assert_eq!(sleeping.len(), 1, "the session's job runs on");

    // The server's own /root, not the host's; the host's system read-only.
    let private = ssh(&key, address, "touch /root/mine /usr/nope 2>&1; ls /root").await;
    let said = String::from_utf8_lossy(&private.stdout).into_owned();
    assert!(said.contains("Read-only file system"), "{said}");
    assert!(said.lines().any(|l| l == "mine"), "{said}");

    let deleted = cloud
        .as_tenant(
            &tenant,
            Method::DELETE,
            &format!("/compute/v2.1/servers/{id}"),
            None,
        )
        .await;
    assert_eq!(deleted.status, 204, "{deleted:?}");
    assert!(!running(sleeping[0]), "the job died with its server");
    let bridge = format!("ovc{}b1", cloud.instance());
    assert_eq!(
        leftovers(cloud.instance()),
        vec![bridge],
        "only the project's bridge remains"
    );
    let gone = cloud
        .as_tenant(
            &tenant,
            Method::GET,
            &format!("/compute/v2.1/servers/{id}"),
            None,
        )
        .await;
    assert_eq!(gone.status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_server_request_is_refused_with_what_to_fix() {
    let cloud = TestCloud::start().await;
    let tenant = cloud.tenant("tenant-a").await;
    let cases = [
        json!({"name": "x", "security_groups": [{"name": "nope"}]}),
        json!({"name": "x", "user_data": "#!/bin/sh"}),
        json!({"name": "x", "user_data": "IyEvYmluL3NoCmVjaG8gaGkK"}),
        json!({"name": ""}),
        json!({"nom": "x"}),
    ];
    for server in cases {
        let reply = cloud
            .post_as(
                &tenant,
                "/compute/v2.1/servers",
                json!({ "server": server }),
            )
            .await;
        assert_eq!(reply.status, 400, "{server}: {reply:?}");
        assert_eq!(reply.body["badRequest"]["code"], 400, "{reply:?}");
        assert!(!text(&reply.body["badRequest"]["message"]).is_empty());
    }
}
