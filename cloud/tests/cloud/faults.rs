//! Faults injected through the admin API: a backend that fails N calls, a server whose sshd never
//! starts, and a server that refuses everything, open connections included.

use std::time::Duration;

use reqwest::Method;
use serde_json::json;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::support::{reach_from_host, ssh, Key, Reach, TestCloud};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_unreachable_fails_the_next_n_calls_of_that_project_only() {
    let cloud = TestCloud::start().await;
    let tenant = cloud.tenant("tenant-a").await;
    let other = cloud.tenant("tenant-b").await;
    let fault = cloud
        .fault(json!({"project": "tenant-a", "kind": "backend-unreachable", "times": 2}))
        .await;
    assert_eq!(fault.status, 200, "{fault:?}");

    let unreachable =
        json!({"error": {"code": 503, "message": "The backend server is unreachable"}});
    let first = cloud
        .as_tenant(&tenant, Method::GET, "/compute/v2.1/servers", None)
        .await;
    assert_eq!((first.status, &first.body), (503, &unreachable));
    // Keystone, the admin API and other projects are not affected, and do not count.
    let issued = cloud
        .password_auth(&tenant.name, &tenant.password, &tenant.name)
        .await;
    assert_eq!(issued.status, 201);
    assert_eq!(
        cloud.admin(Method::GET, "/admin/status", None).await.status,
        200
    );
    let elsewhere = cloud
        .as_tenant(&other, Method::GET, "/compute/v2.1/servers", None)
        .await;
    assert_eq!(elsewhere.status, 200);
    let second = cloud
        .as_tenant(&tenant, Method::GET, "/network/v2.0/security-groups", None)
        .await;
    assert_eq!((second.status, &second.body), (503, &unreachable));
    let third = cloud
        .as_tenant(&tenant, Method::GET, "/compute/v2.1/servers", None)
        .await;
    assert_eq!(third.status, 200, "{third:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_never_boot_server_is_active_with_an_address_and_no_sshd() {
    let cloud = TestCloud::start().await;
    let tenant = cloud.tenant("tenant-a").await;
    let fault = cloud
        .fault(json!({"project": "tenant-a", "kind": "never-boot", "server": "web-1"}))
        .await;
    assert_eq!(fault.status, 200, "{fault:?}");
    cloud.admit_ssh_from_host(&tenant).await;

    let key = Key::new();
    let broken = cloud.boot(&tenant, json!({"name": "web-1"}), &key).await;
    // Admitted, but nothing listens: the connection is reset at once.
    assert_eq!(reach_from_host(broken.address, 22).await, Reach::Refused);
    let status = cloud.admin(Method::GET, "/admin/status", None).await;
    assert_eq!(
        status.body["projects"][0]["servers"][0]["sshd_pid"],
        json!(null)
    );

    let other = cloud.boot(&tenant, json!({"name": "web-2"}), &key).await;
    assert_eq!(reach_from_host(other.address, 22).await, Reach::Open);

    cloud.clear_faults("tenant-a").await;
    let healthy = cloud.boot(&tenant, json!({"name": "web-1"}), &key).await;
    assert_eq!(reach_from_host(healthy.address, 22).await, Reach::Open);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_refuses_everything_even_open_connections() {
    let cloud = TestCloud::start().await;
    let tenant = cloud.tenant("tenant-a").await;
    cloud.admit_ssh_from_host(&tenant).await;
    let key = Key::new();
    let server = cloud.boot(&tenant, json!({"name": "web-1"}), &key).await;

    let mut open = tokio::net::TcpStream::connect((server.address, 22))
        .await
        .expect("port 22 answers");
    let mut banner = [0u8; 8];
    open.read_exact(&mut banner).await.expect("sshd's banner");
    assert_eq!(&banner, b"SSH-2.0-");

    let fault = cloud
        .fault(json!({"project": "tenant-a", "kind": "unreachable", "server": server.id}))
        .await;
    assert_eq!(fault.status, 200, "{fault:?}");
    assert_eq!(reach_from_host(server.address, 22).await, Reach::Refused);
    // The open connection is reset as soon as it sends anything.
    let _ = open.write_all(b"SSH-2.0-probe\r\n").await;
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), open.read_to_end(&mut rest))
        .await
        .expect("the connection ends at once");
    assert!(read.is_err(), "the connection was not reset: {read:?}");

    let unknown = cloud
        .fault(json!({"project": "tenant-a", "kind": "unreachable", "server": "nope"}))
        .await;
    assert_eq!(unknown.status, 404, "{unknown:?}");

    cloud.clear_faults("tenant-a").await;
    assert!(ssh(&key, server.address, "true").await.status.success());
}
