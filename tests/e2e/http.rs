//! `http` steps against a real HTTP server the test runs on loopback: retries of an unreachable
//! backend and their waits, refused connections, unexpected statuses, outputs picked from the
//! answer, and a secret sent in a header.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::{json, Value};

use crate::servers::closed_port;
use crate::support::{
    assert_causal, assert_not_shown, files_containing, processes_with, text, Overture,
};

/// A request the server received.
#[derive(Clone, Debug)]
pub struct Received {
    pub method: String,
    pub path: String,
    /// Names lowercased.
    pub headers: BTreeMap<String, String>,
    pub body: String,
}

/// An answer: status, reason phrase, JSON or text body.
pub struct Reply(pub u16, pub &'static str, pub String);

type Answer = dyn Fn(usize, &Received) -> Reply + Send + Sync;

/// An HTTP/1.1 server on 127.0.0.1 that answers the n-th request (0-based) with `answer`, one
/// request per connection; it stops when dropped.
pub struct HttpServer {
    port: u16,
    received: Arc<Mutex<Vec<Received>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl HttpServer {
    pub fn start(answer: impl Fn(usize, &Received) -> Reply + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let port = listener.local_addr().expect("its address").port();
        let received = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let answer: Arc<Answer> = Arc::new(answer);
        let thread = {
            let (received, stop) = (received.clone(), stop.clone());
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                    let Ok(stream) = stream else { continue };
                    serve(stream, &received, answer.as_ref());
                }
            })
        };
        Self {
            port,
            received,
            stop,
            thread: Some(thread),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn received(&self) -> Vec<Received> {
        self.received.lock().expect("requests").clone()
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop so it sees the flag.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn serve(stream: TcpStream, received: &Mutex<Vec<Received>>, answer: &Answer) {
    // A client that stops talking must not hang the test; one slowed by a loaded machine is
    // still heard.
    let _ = stream.set_read_timeout(Some(Duration::from_secs(60)));
    let mut reader = BufReader::new(stream);
    let mut lines = Vec::new();
    loop {
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) if line == "\r\n" => break,
            Ok(_) => lines.push(line.trim_end().to_owned()),
        }
    }
    let Some(request_line) = lines.first() else {
        return;
    };
    let mut parts = request_line.split(' ');
    let (method, path) = (
        parts.next().unwrap_or_default().to_owned(),
        parts.next().unwrap_or_default().to_owned(),
    );
    let headers: BTreeMap<String, String> = lines[1..]
        .iter()
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    let length = headers
        .get("content-length")
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let request = Received {
        method,
        path,
        headers,
        body: text(&body),
    };
    let count = {
        let mut all = received.lock().expect("requests");
        all.push(request.clone());
        all.len() - 1
    };
    let Reply(status, reason, body) = answer(count, &request);
    let reply = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = reader.get_mut().write_all(reply.as_bytes());
}

/// An HTTP server that holds every answer until the test opens it: an `http` step calling it
/// runs until then, so a test orders what follows the step's start by what it has seen happen,
/// never by how long a sleep lasts. Opened when dropped.
pub struct Gate {
    open: Arc<(Mutex<bool>, Condvar)>,
    server: HttpServer,
}

impl Gate {
    pub fn new() -> Self {
        let open = Arc::new((Mutex::new(false), Condvar::new()));
        let held = open.clone();
        let server = HttpServer::start(move |_, _| {
            let (lock, opened) = &*held;
            let mut is_open = lock.lock().expect("the gate");
            while !*is_open {
                is_open = opened.wait(is_open).expect("the gate");
            }
            Reply(200, "OK", json!({"opened": true}).to_string())
        });
        Self { open, server }
    }

    /// The URL an `http` step calls.
    pub fn url(&self) -> String {
        self.server.url("/")
    }

    /// Its `127.0.0.1:PORT`, for a blueprint's `egress:`.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.server.port)
    }

    /// Waits until a step has called it (so its attempt runs), failing the test after two
    /// minutes.
    pub fn wait_called(&self) {
        let start = std::time::Instant::now();
        while self.server.received().is_empty() {
            assert!(
                start.elapsed() < Duration::from_secs(120),
                "no step called the gate at {}",
                self.url()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Lets every held and later call be answered (200).
    pub fn open(&self) {
        let (lock, opened) = &*self.open;
        *lock.lock().expect("the gate") = true;
        opened.notify_all();
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        // A held answer would keep the server's thread, which its drop joins.
        self.open();
    }
}

/// Answers 503 "The backend server is unreachable" `failures` times, then 200 with JSON.
fn unreachable_then_ok(failures: usize) -> HttpServer {
    HttpServer::start(move |n, _| {
        if n < failures {
            Reply(
                503,
                "Service Unavailable",
                "<html><body>The backend server is unreachable</body></html>".into(),
            )
        } else {
            Reply(200, "OK", json!({"ok": true, "request": n + 1}).to_string())
        }
    })
}

/// One `http` step on `url`, retrying backend-unreachable 5 times 300 ms apart.
fn one_call(overture: &Overture, url: &str, extra: &str) -> std::path::PathBuf {
    overture.blueprint(
        "call.yaml",
        &format!(
            r#"
name: call-an-api
steps:
  call:
    run: http
    retry: {{ backend-unreachable: {{ times: 5, wait: 300ms }} }}
    with:
      url: "{url}"
      expect_status: 200{extra}
"#
        ),
    )
}

fn of_step<'a>(events: &'a [Value], kind: &str, step: &str) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|e| e["type"] == kind && e["data"]["step"] == step)
        .collect()
}

fn recorded_at(event: &Value) -> chrono::DateTime<chrono::FixedOffset> {
    let at = event["metadata"]["recorded_at"]
        .as_str()
        .expect("recorded_at");
    chrono::DateTime::parse_from_rfc3339(at).expect("an RFC 3339 time")
}

/// Every retry of `step` waited `wait_ms`: as scheduled, and between the failure and the next
/// start as recorded.
fn assert_waits(events: &[Value], step: &str, wait_ms: u64) {
    let retries = of_step(events, "StepRetryScheduled", step);
    assert!(!retries.is_empty(), "the step was retried");
    for retry in &retries {
        assert_eq!(retry["data"]["delay_ms"], wait_ms, "{retry}");
    }
    let failures = of_step(events, "StepAttemptFailed", step);
    let starts = of_step(events, "StepStarted", step);
    for (attempt, failure) in failures.iter().enumerate().take(retries.len()) {
        let next = starts
            .iter()
            .find(|s| s["data"]["attempt"] == attempt as u64 + 2)
            .expect("the next attempt started");
        let waited = recorded_at(next) - recorded_at(failure);
        assert!(
            waited >= chrono::Duration::milliseconds(wait_ms as i64),
            "attempt {} started {waited} after attempt {} failed",
            attempt + 2,
            attempt + 1
        );
    }
}

#[test]
fn an_unreachable_backend_is_retried_as_configured_until_it_answers_on_attempt_6() {
    let server = unreachable_then_ok(5);
    let overture = Overture::new();
    let file = one_call(&overture, &server.url("/servers"), "");
    let status = overture.deploy_ok(&file, &[]);
    assert_eq!(status["status"], "succeeded");
    assert_eq!(status["steps"]["call"]["attempts"], 6);
    assert_eq!(status["steps"]["call"]["outputs"]["status"], "200");

    let events = overture.events(status["id"].as_str().expect("id"));
    assert_causal(&events, &BTreeMap::new());
    assert_eq!(of_step(&events, "StepStarted", "call").len(), 6);
    let failures = of_step(&events, "StepAttemptFailed", "call");
    assert_eq!(failures.len(), 5);
    for failure in &failures {
        assert_eq!(
            failure["data"]["error_class"], "backend-unreachable",
            "{failure}"
        );
        assert!(
            failure["data"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("503 Service Unavailable")),
            "{failure}"
        );
    }
    assert_eq!(of_step(&events, "StepRetryScheduled", "call").len(), 5);
    assert_waits(&events, "call", 300);
    assert_eq!(server.received().len(), 6, "one request an attempt");
}

#[test]
fn an_unreachable_backend_fails_the_deployment_after_exactly_6_attempts() {
    let server = unreachable_then_ok(6);
    let overture = Overture::new();
    let file = one_call(&overture, &server.url("/servers"), "");
    let status = overture.deploy_failed(&file, &[]);
    assert_eq!(status["steps"]["call"]["status"], "failed");
    assert_eq!(status["steps"]["call"]["attempts"], 6);
    assert_eq!(
        status["steps"]["call"]["error_class"],
        "backend-unreachable"
    );

    let events = overture.events(status["id"].as_str().expect("id"));
    assert_causal(&events, &BTreeMap::new());
    assert_eq!(of_step(&events, "StepStarted", "call").len(), 6);
    let failures = of_step(&events, "StepAttemptFailed", "call");
    assert_eq!(failures.len(), 6);
    assert!(failures
        .iter()
        .all(|f| f["data"]["error_class"] == "backend-unreachable"));
    let failed = of_step(&events, "StepFailed", "call");
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0]["data"]["attempts"], 6);
    assert_eq!(events.last().expect("events")["type"], "DeploymentFailed");
    assert_waits(&events, "call", 300);
    assert_eq!(server.received().len(), 6, "no seventh request");
}

#[test]
fn a_refused_connection_is_backend_unreachable() {
    let overture = Overture::new();
    let url = format!("http://127.0.0.1:{}/servers", closed_port());
    let file = overture.blueprint(
        "refused.yaml",
        &format!(
            r#"
name: refused
steps:
  call:
    run: http
    retry: {{ backend-unreachable: {{ times: 1, wait: 100ms }} }}
    with: {{ url: "{url}" }}
"#
        ),
    );
    let (code, status, output) = overture.deploy(&file, &[]);
    assert_eq!(code, 1, "{}", text(&output.stderr));
    assert_eq!(
        status["steps"]["call"]["error_class"],
        "backend-unreachable"
    );
    let events = overture.events(status["id"].as_str().expect("id"));
    let failures = of_step(&events, "StepAttemptFailed", "call");
    assert_eq!(failures.len(), 2, "retried by the backend-unreachable rule");
    for failure in failures {
        assert_eq!(failure["data"]["error_class"], "backend-unreachable");
        assert_eq!(
            failure["data"]["exit_code"], 7,
            "curl's couldn't-connect code"
        );
        let message = failure["data"]["message"].as_str().expect("message");
        assert!(
            message.starts_with("could not connect for GET "),
            "{message}"
        );
    }
}

#[test]
fn an_unexpected_status_fails_the_step_after_one_attempt() {
    let server =
        HttpServer::start(|_, _| Reply(404, "Not Found", r#"{"error": "no such server"}"#.into()));
    let overture = Overture::new();
    // Retries of backend-unreachable are allowed, and still a 404 is not retried.
    let file = one_call(&overture, &server.url("/servers/9"), "");
    let status = overture.deploy_failed(&file, &[]);
    assert_eq!(status["steps"]["call"]["attempts"], 1);
    let events = overture.events(status["id"].as_str().expect("id"));
    assert_eq!(of_step(&events, "StepStarted", "call").len(), 1);
    let failures = of_step(&events, "StepAttemptFailed", "call");
    assert_eq!(failures.len(), 1);
    assert_eq!(failures[0]["data"]["error_class"], "step-failed");
    let message = failures[0]["data"]["message"].as_str().expect("message");
    assert!(
        message.starts_with("answered 404 Not Found; expected 200"),
        "{message}"
    );
    assert!(
        message.contains("HTTP/1.1 404 Not Found"),
        "the log's status line: {message}"
    );
    assert!(
        message.contains("no such server"),
        "the start of the answer: {message}"
    );
    assert!(of_step(&events, "StepRetryScheduled", "call").is_empty());
    assert_eq!(server.received().len(), 1);
}

#[test]
fn outputs_picked_from_the_answer_flow_into_a_later_step() {
    let server = HttpServer::start(|_, request| {
        let size = serde_json::from_str::<Value>(&request.body)
            .ok()
            .and_then(|body| body["size"].as_str().map(str::to_owned))
            .unwrap_or_default();
        let server =
            json!({"server": {"id": 42, "name": format!("web-{size}"), "ips": ["10.0.0.5"]}});
        Reply(201, "Created", server.to_string())
    });
    let (overture, file) = Overture::with_blueprint(
        "create.yaml",
        &format!(
            r#"
name: create-server
params:
  size: {{ default: cx22 }}
steps:
  create:
    run: http
    with:
      url: "{}"
      method: POST
      headers: {{ X-Request-Id: "create-{{{{ params.size }}}}" }}
      body: '{{"size": "{{{{ params.size }}}}"}}'
      expect_status: [200, 201]
      outputs: {{ id: /server/id, name: /server/name, ips: /server/ips, first_ip: /server/ips/0 }}
  use:
    run: script
    needs: [create]
    with:
      command: 'echo "summary={{{{ steps.create.outputs.name }}}}#{{{{ steps.create.outputs.id }}}}@{{{{ steps.create.outputs.first_ip }}}}" >> "$OVERTURE_OUTPUTS"'
"#,
            server.url("/servers")
        ),
    );
    let status = overture.deploy_ok(&file, &["--param", "size=cx32"]);
    let outputs = &status["steps"]["create"]["outputs"];
    assert_eq!(
        outputs,
        &json!({"status": "201", "id": "42", "name": "web-cx32", "ips": "[\"10.0.0.5\"]", "first_ip": "10.0.0.5"})
    );
    assert_eq!(
        status["steps"]["use"]["outputs"]["summary"],
        "web-cx32#42@10.0.0.5"
    );

    let received = server.received();
    assert_eq!(received.len(), 1);
    let request = &received[0];
    assert_eq!(
        (request.method.as_str(), request.path.as_str()),
        ("POST", "/servers")
    );
    assert_eq!(
        request.headers.get("x-request-id").map(String::as_str),
        Some("create-cx32")
    );
    assert_eq!(
        request.headers.get("content-type").map(String::as_str),
        Some("application/json")
    );
    assert_eq!(request.body, r#"{"size": "cx32"}"#);
}

const SECRET: &str = "tok-http-4be1d7-never-shown";

#[test]
fn a_secret_sent_in_a_header_reaches_the_server_and_nothing_else() {
    // While curl waits for the answer, every command line on the machine is read too: curl's
    // own must show up (the scan sees into the sandbox), the secret in none.
    let cmdlines = Arc::new(Mutex::new((Vec::new(), Vec::new())));
    let server = {
        let cmdlines = cmdlines.clone();
        HttpServer::start(move |_, request| {
            let mut cmdlines = cmdlines.lock().expect("cmdlines");
            cmdlines.0.extend(processes_with("--config request.curl"));
            cmdlines.1.extend(processes_with(SECRET));
            let authorization = request
                .headers
                .get("authorization")
                .cloned()
                .unwrap_or_default();
            Reply(
                200,
                "OK",
                json!({"authorization": authorization}).to_string(),
            )
        })
    };
    let (overture, file) = Overture::with_blueprint(
        "whoami.yaml",
        &format!(
            r#"
name: authorized-call
secrets: [token]
steps:
  whoami:
    run: http
    with:
      url: "{}"
      headers: {{ Authorization: "Bearer {{{{ secrets.token }}}}" }}
      outputs: {{ seen: /authorization }}
"#,
            server.url("/whoami")
        ),
    );
    let (_, status, output) = overture.deploy_with_secret(&file, "token", SECRET);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let id = status["id"].as_str().expect("id");

    let received = server.received();
    assert_eq!(received.len(), 1);
    assert_eq!(
        received[0].headers.get("authorization").map(String::as_str),
        Some(format!("Bearer {SECRET}").as_str()),
        "the server got the secret"
    );
    assert_eq!(
        status["steps"]["whoami"]["outputs"]["seen"], "Bearer ***",
        "outputs are masked"
    );
    let (curls, with_secret) = cmdlines.lock().expect("cmdlines").clone();
    assert!(!curls.is_empty(), "curl's command line was seen");
    assert!(
        with_secret.is_empty(),
        "command lines holding the secret: {with_secret:?}"
    );

    let mut shown = vec![text(&output.stdout), text(&output.stderr)];
    for args in [
        vec!["events", id, "--json"],
        vec!["status", id, "--json"],
        vec!["events", id],
    ] {
        let out = overture.run(&args);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        shown.push(text(&out.stdout));
    }
    assert_not_shown(&shown, SECRET);

    let logs = overture.data_dir().join("logs");
    assert_eq!(
        files_containing(&logs, br#"{"authorization":"Bearer ***"}"#).len(),
        1,
        "the attempt's log shows the answer, masked"
    );
    assert_eq!(
        files_containing(&logs, SECRET.as_bytes()),
        Vec::<String>::new()
    );
    let leaks = files_containing(&overture.data_dir(), SECRET.as_bytes());
    assert!(leaks.is_empty(), "files holding the secret: {leaks:?}");
}
