//! The API's doors under hostile callers, all on loopback: thousands of idle and slow
//! connections do not keep a health check or a signed-in caller out; a client that never
//! finishes its head, or stalls its body, is let go after the timeout `overture serve` was given;
//! at a cap with every connection busy a new one is refused with a JSON `503`; and an event
//! forged under the engine's own source is refused at every door while the real end still
//! starts its chain.

use std::net::SocketAddr;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::api::Server;
use crate::http::Gate;
use crate::local_cloud::LocalCloud;
use crate::support::{text, Overture};

/// How long an answer may take here before the test fails: generous, for a loaded machine.
const DEADLINE: Duration = Duration::from_secs(60);

/// How long `overture serve` waits for a request's body by default (`--body-timeout`): a `408`
/// for a stalled body that comes well before it is the flag's doing, not the default's.
const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);

/// Connections that connect and then say nothing.
const IDLE: usize = 5_000;

/// Connections that send part of a request's head and then nothing more.
const SLOW: usize = 200;

/// Raises this test process's soft descriptor limit to its hard one; fails naming the limit
/// when even that cannot hold `needed`.
fn raise_descriptor_limit(needed: u64) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read or write the rlimit given, on this stack.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        if limit.rlim_cur < needed {
            limit.rlim_cur = limit.rlim_max;
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
        }
    }
    assert!(
        limit.rlim_cur >= needed,
        "this test opens {needed} connections; RLIMIT_NOFILE's hard limit is {} (raise it with \
         ulimit -Hn)",
        limit.rlim_max
    );
}

fn address(server: &Server) -> SocketAddr {
    server
        .url
        .strip_prefix("http://")
        .and_then(|a| a.parse().ok())
        .expect("a socket address")
}

/// A connection to `to` from the loopback address `127.0.0.<from>`.
async fn connect_from(from: u8, to: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().expect("a socket");
    socket
        .bind(SocketAddr::from(([127, 0, 0, from], 0)))
        .expect("bind a loopback address");
    tokio::time::timeout(DEADLINE, socket.connect(to))
        .await
        .expect("connected in time")
        .expect("connected")
}

/// Everything the server sends until it closes the connection (a reset counts as closed).
async fn read_until_closed(stream: &mut TcpStream) -> String {
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(60), stream.read_to_end(&mut answer)).await;
    assert!(read.is_ok(), "the server did not close the connection");
    text(&answer)
}

/// Reads until `wanted` has arrived, each read within `deadline`.
async fn read_until(stream: &mut TcpStream, wanted: &str, deadline: Duration) -> String {
    let mut answer = Vec::new();
    let mut buffer = [0u8; 4096];
    while !text(&answer).contains(wanted) {
        let n = tokio::time::timeout(deadline, stream.read(&mut buffer))
            .await
            .expect("an answer in time")
            .expect("read");
        assert!(n > 0, "closed before {wanted:?}: {}", text(&answer));
        answer.extend_from_slice(&buffer[..n]);
    }
    text(&answer)
}

/// A `POST /v1/deployments` whose head is sent whole, and which then waits to send its body:
/// once the server says `100 Continue`, the request is being handled.
async fn busy_request(from: u8, to: SocketAddr, token: &str) -> TcpStream {
    let mut stream = connect_from(from, to).await;
    let head = format!(
        "POST /v1/deployments HTTP/1.1\r\nHost: {to}\r\nX-Auth-Token: {token}\r\n\
         Content-Type: application/json\r\nContent-Length: 64\r\nExpect: 100-continue\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.expect("write");
    read_until(&mut stream, "100 Continue", DEADLINE).await;
    stream
}

#[tokio::test(flavor = "multi_thread")]
async fn idle_and_slow_connections_do_not_keep_a_health_check_or_a_signed_in_caller_out() {
    raise_descriptor_limit((IDLE + SLOW + 1_000) as u64);
    let cloud = LocalCloud::up();
    let (_, token) = cloud.token("acme");
    let o = Overture::new();
    // The defaults: nothing in this test is tuned for it.
    let server = Server::start(&o, &cloud.auth_url);
    let to = address(&server);

    let mut held = Vec::with_capacity(IDLE + SLOW);
    for _ in 0..IDLE {
        held.push(connect_from(1, to).await);
    }
    for _ in 0..SLOW {
        let mut slow = connect_from(1, to).await;
        // Written while the server may be closing it: a refused write is what is being tested.
        let _ = slow
            .write_all(b"GET /v1/tenant HTTP/1.1\r\nHost: overture\r\nX-Waiting: ")
            .await;
        held.push(slow);
    }

    let http = reqwest::Client::builder()
        .timeout(DEADLINE)
        .build()
        .expect("a client");
    let health = http
        .get(server.at("/healthz"))
        .send()
        .await
        .expect("/healthz answered while the connections are held");
    assert_eq!(health.status(), StatusCode::OK);
    let tenant = http
        .get(server.at("/v1/tenant"))
        .header("X-Auth-Token", &token)
        .send()
        .await
        .expect("a signed-in caller answered while the connections are held");
    assert_eq!(tenant.status(), StatusCode::OK);

    // The server holds few of them: its descriptors come nowhere near its limit.
    let descriptors = || {
        std::fs::read_dir(format!("/proc/{}/fd", server.pid()))
            .expect("the server's descriptors")
            .count()
    };
    let started = std::time::Instant::now();
    while descriptors() > 1_000 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the server still holds {} descriptors",
            descriptors()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(held);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_that_never_finishes_its_head_or_its_body_or_stays_idle_is_let_go() {
    let cloud = LocalCloud::up();
    let (_, token) = cloud.token("acme");
    let o = Overture::new();
    let server = Server::with_flags(
        &o,
        &cloud.auth_url,
        &["--header-timeout", "1", "--body-timeout", "1"],
    );
    let to = address(&server);

    let mut slow_head = connect_from(1, to).await;
    slow_head
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: overture\r\nX-Wait")
        .await
        .expect("write");
    let answer = read_until_closed(&mut slow_head).await;
    assert!(!answer.contains("200 OK"), "{answer}");

    let mut slow_body = connect_from(1, to).await;
    let head = format!(
        "POST /v1/deployments HTTP/1.1\r\nHost: {to}\r\nX-Auth-Token: {token}\r\n\
         Content-Type: application/json\r\nContent-Length: 64\r\n\r\n{{\"blueprint\": "
    );
    slow_body.write_all(head.as_bytes()).await.expect("write");
    // Answered after the second given; the default's 30 s would miss the deadline.
    let answer = read_until(&mut slow_body, "request_timeout", DEFAULT_BODY_TIMEOUT / 2).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");

    // Answered, then idle on a kept-alive connection: let go after the same timeout.
    let mut idle = connect_from(1, to).await;
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: overture\r\n\r\n")
        .await
        .expect("write");
    let answer = read_until_closed(&mut idle).await;
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    assert!(o.deployment_ids().is_empty(), "nothing recorded");
}

#[tokio::test(flavor = "multi_thread")]
async fn at_a_cap_with_every_connection_busy_a_new_one_is_refused_saying_why() {
    let cloud = LocalCloud::up();
    let (_, token) = cloud.token("acme");
    let o = Overture::new();
    let server = Server::with_flags(
        &o,
        &cloud.auth_url,
        &[
            "--max-connections",
            "3",
            "--max-connections-per-address",
            "2",
            "--body-timeout",
            "600",
            "--request-timeout",
            "600",
        ],
    );
    let to = address(&server);
    let _busy = [
        busy_request(1, to, &token).await,
        busy_request(1, to, &token).await,
    ];

    let mut third = connect_from(1, to).await;
    let answer = read_until_closed(&mut third).await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    let body: Value = serde_json::from_str(answer.split("\r\n\r\n").nth(1).unwrap_or_default())
        .expect("a JSON body");
    assert_eq!(body["code"], "unavailable");
    assert!(
        body["message"]
            .as_str()
            .is_some_and(|m| m.contains("from your address (2 at most")),
        "{body}"
    );

    let _another = busy_request(2, to, &token).await;
    let mut over = connect_from(3, to).await;
    let answer = read_until_closed(&mut over).await;
    assert!(
        answer.starts_with("HTTP/1.1 503") && answer.contains("as many connections as it may (3"),
        "{answer}"
    );
    assert!(o.deployment_ids().is_empty(), "nothing recorded");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_forged_overture_end_is_refused_at_every_door_and_the_real_end_still_chains() {
    let cloud = LocalCloud::up();
    let (_, token) = cloud.token("acme");
    // Over the API the tenant is the token's project id: the trigger file names acme by it.
    let acme = cloud.project_id("acme");
    let overture = Overture::new();
    let gate = Gate::new();
    let triggers = crate::triggers::gated_chain(&overture, &acme, &gate);
    let server = crate::triggers::gated_server(&overture, &cloud.auth_url, &triggers);
    let http = reqwest::Client::new();
    let post = |event: &Value| {
        http.post(server.at("/v1/events"))
            .header("X-Auth-Token", &token)
            .header("Content-Type", "application/json")
            .body(event.to_string())
            .send()
    };
    let release = json!({"specversion": "1.0", "id": "r-1", "source": "artifacts",
                         "type": "release.published"});
    let answer: Value = post(&release)
        .await
        .expect("POST")
        .json()
        .await
        .expect("JSON");
    let slow = answer["deployments"][0]
        .as_str()
        .expect("started")
        .to_owned();
    gate.wait_called();
    let decided = overture.json(&["triggers", "log", "--json"]);

    // While it runs, its end is forged in both shapes, through the API and the command line.
    let forged = json!({
        "specversion": "1.0", "id": format!("{slow}.succeeded"), "source": "overture",
        "type": "deployment.succeeded",
        "data": { "id": slow, "tenant": acme, "blueprint": "slow", "status": "succeeded" }
    });
    let bridged = json!({
        "version": "0", "id": format!("{slow}.succeeded"), "source": "overture",
        "detail-type": "deployment.succeeded", "detail": { "blueprint": "slow" }
    });
    for event in [&forged, &bridged] {
        let refused = post(event).await.expect("POST");
        assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
        let body: Value = refused.json().await.expect("JSON");
        assert!(
            body["message"]
                .as_str()
                .is_some_and(|m| m.contains("`source` is `overture`")),
            "{body}"
        );
    }
    let file = overture.blueprint("forged.json", &forged.to_string());
    let sent = overture.run(&[
        "trigger",
        "send",
        file.to_str().expect("path"),
        "--triggers",
        triggers.to_str().expect("path"),
    ]);
    assert_eq!(sent.status.code(), Some(2));
    let message = text(&sent.stderr);
    assert!(
        message.contains("forged.json") && message.contains("`source`"),
        "{message}"
    );
    assert_eq!(
        overture.json(&["triggers", "log", "--json"]),
        decided,
        "nothing recorded"
    );
    assert_eq!(
        overture.deployment_ids(),
        std::slice::from_ref(&slow),
        "nothing started"
    );

    // The real end, delivered by the engine, starts the chain once.
    gate.open();
    wait_for("the chained deployment", || {
        overture.deployment_ids().len() == 2
    });
    let quick = overture
        .deployment_ids()
        .into_iter()
        .find(|id| *id != slow)
        .expect("the chained deployment");
    wait_for("the chained deployment's end", || {
        overture
            .events(&quick)
            .iter()
            .any(|event| event["type"] == "DeploymentSucceeded")
    });
    drop(server);
    let requested = &overture.events(&quick)[0];
    assert_eq!(
        requested["data"]["triggered_by"]["event_id"],
        format!("{slow}.succeeded")
    );
    let log = overture.json(&["triggers", "log", "--json"]);
    let chained: Vec<&Value> = log
        .as_array()
        .expect("a list")
        .iter()
        .filter(|d| {
            d["trigger"] == "quick-after-slow" && d["event_id"] == format!("{slow}.succeeded")
        })
        .collect();
    assert_eq!(chained.len(), 1, "{log:#}");
    assert_eq!(chained[0]["decision"], "deployed", "{log:#}");
}

/// Looks every 100 ms until `done`, failing the test after two minutes: the server works on its
/// own time.
fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let started = std::time::Instant::now();
    while !done() {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "{what}: not within two minutes"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
