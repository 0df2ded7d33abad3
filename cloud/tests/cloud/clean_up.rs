//! Nothing outlives a cloud: after a shutdown, and after a cloud killed with SIGKILL and a
//! clean-up from its journal, no namespace, link, process or claim of its instance remains.

use std::path::Path;
use std::time::Duration;

use overture_cloud::{CloudInfo, StateDir};
use reqwest::Method;
use serde_json::{json, Value};
use tokio::time::Instant;

use crate::support::{leftovers, running, text, Key, TestCloud};

/// The pids of the servers' sshd, as the admin status shows them.
fn sshd_pids(status: &Value) -> Vec<u32> {
    status["projects"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|p| p["servers"].as_array().cloned().unwrap_or_default())
        .filter_map(|s| s["sshd_pid"].as_u64())
        .filter_map(|pid| u32::try_from(pid).ok())
        .collect()
}

fn assert_all_gone(instance: &str, pids: &[u32], dir: &Path) {
    assert_eq!(leftovers(instance), Vec::<String>::new());
    for pid in pids {
        assert!(!running(*pid), "process {pid} still runs");
    }
    let claim = Path::new(overture_cloud::DEFAULT_REGISTRY).join(format!("{instance}.claim"));
    assert!(!claim.exists(), "{} remains", claim.display());
    for file in ["cloud.json", "admin-token", "journal", "servers"] {
        assert!(!dir.join(file).exists(), "{file} remains");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_removes_everything_the_cloud_created() {
    let cloud = TestCloud::start().await;
    let key = Key::new();
    let a = cloud.tenant("tenant-a").await;
    let b = cloud.tenant("tenant-b").await;
    cloud.boot(&a, json!({"name": "one"}), &key).await;
    cloud.boot(&b, json!({"name": "two"}), &key).await;
    let status = cloud.admin(Method::GET, "/admin/status", None).await;
    let pids = sshd_pids(&status.body);
    assert_eq!(pids.len(), 2, "{status:?}");
    assert_eq!(
        leftovers(cloud.instance()).len(),
        6,
        "2 bridges, 2 namespaces, 2 veths"
    );

    let (instance, dir) = (cloud.instance().to_owned(), cloud.state_dir());
    cloud.shut_down().await;
    assert_all_gone(&instance, &pids, &dir);
}

/// Sends `request` to the cloud and reads its JSON answer, `what` the test expects.
async fn json_of(request: reqwest::RequestBuilder, what: &str) -> Value {
    request
        .send()
        .await
        .expect("an answer")
        .json()
        .await
        .unwrap_or_else(|error| panic!("{what}: {error}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clean_up_after_a_killed_cloud_removes_everything_it_created() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let state = dir.path().join("cloud");
    let mut serving = tokio::process::Command::new(env!("CARGO_BIN_EXE_overture-cloud"))
        .arg(&state)
        .kill_on_drop(true)
        .spawn()
        .expect("the cloud starts");
    let deadline = Instant::now() + Duration::from_secs(15);
    let info: CloudInfo = loop {
        if let Ok(Some(info)) = StateDir::new(&state).read_info() {
            break info;
        }
        assert!(Instant::now() < deadline, "no cloud.json after 15 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let admin = std::fs::read_to_string(state.join("admin-token")).expect("the admin token");
    let http = reqwest::Client::new();
    let created = http
        .post(format!("{}/admin/projects", info.url))
        .header("X-Admin-Token", &admin)
        .json(&json!({"name": "tenant-a"}))
        .send()
        .await
        .expect("an answer");
    assert_eq!(created.status().as_u16(), 200);
    let token: Value = json_of(
        http.post(format!("{}/admin/projects/tenant-a/tokens", info.url))
            .header("X-Admin-Token", &admin),
        "a token",
    )
    .await;
    let token = text(&token["token"]);
    let server: Value = json_of(
        http.post(format!("{}/compute/v2.1/servers", info.url))
            .header("X-Auth-Token", &token)
            .json(&json!({"server": {"name": "one"}})),
        "a server",
    )
    .await;
    let id = text(&server["server"]["id"]);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let shown: Value = json_of(
            http.get(format!("{}/compute/v2.1/servers/{id}", info.url))
                .header("X-Auth-Token", &token),
            "a server",
        )
        .await;
        if shown["server"]["status"] == "ACTIVE" {
            break;
        }
        assert!(Instant::now() < deadline, "not ACTIVE: {shown}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let status: Value = json_of(
        http.get(format!("{}/admin/status", info.url))
            .header("X-Admin-Token", &admin),
        "a status",
    )
    .await;
    let pids = sshd_pids(&status);
    assert_eq!(pids.len(), 1);

    serving.start_kill().expect("SIGKILL");
    serving.wait().await.expect("the cloud dies");
    assert!(
        !leftovers(&info.instance).is_empty(),
        "a killed cloud cannot clean up"
    );

    overture_cloud::clean_up(&state).expect("the clean-up");
    assert_all_gone(&info.instance, &pids, &state);
    overture_cloud::clean_up(&state).expect("a second clean-up has nothing to do");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clouds_side_by_side_get_their_own_instance_and_network() {
    let first = TestCloud::start().await;
    let second = TestCloud::start().await;
    assert_ne!(first.instance(), second.instance());
    let network = |cloud: &TestCloud| {
        StateDir::new(&cloud.state_dir())
            .read_info()
            .ok()
            .flatten()
            .map(|info| info.network)
            .expect("cloud.json")
    };
    assert_ne!(network(&first), network(&second));
    // One directory serves one cloud at a time.
    let again = overture_cloud::start(overture_cloud::CloudConfig::new(first.state_dir())).await;
    assert!(
        matches!(again, Err(overture_cloud::CloudError::AlreadyRunning(_))),
        "{again:?}"
    );
    assert!(matches!(
        overture_cloud::clean_up(&first.state_dir()),
        Err(overture_cloud::CloudError::AlreadyRunning(_))
    ));
}
