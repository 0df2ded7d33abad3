//! `wait-ssh` steps against a real sshd on loopback, a host that answers only after a few
//! tries, and a port nobody listens on.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use serde_json::Value;

use crate::servers::{closed_port, Sshd};
use crate::support::{assert_causal, files_containing, step_events, text, Overture};

/// A host that closes the first `silent` connections without a word, then sends a banner:
/// an SSH server that is not up yet, as the poll sees it. It stops when dropped.
struct LateHost {
    port: u16,
    connections: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl LateHost {
    const BANNER: &'static str = "SSH-2.0-LateHost_1.0";

    fn start(silent: usize) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let port = listener.local_addr().expect("its address").port();
        let connections = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (connections, stop) = (connections.clone(), stop.clone());
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                    let Ok(mut stream) = stream else { continue };
                    if connections.fetch_add(1, Ordering::SeqCst) >= silent {
                        let _ = write!(stream, "a greeting first\r\n{}\r\n", Self::BANNER);
                    }
                }
            })
        };
        Self {
            port,
            connections,
            stop,
            thread: Some(thread),
        }
    }

    fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for LateHost {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn banners(status: &Value, step: &str) -> BTreeMap<String, String> {
    let text = status["steps"][step]["outputs"]["banners"]
        .as_str()
        .expect("a banners output");
    serde_json::from_str(text).expect("banners are a JSON object of text")
}

#[test]
fn a_host_group_whose_sshd_answers_succeeds_with_its_banner() {
    let sshd = Sshd::start();
    let (overture, file) = Overture::with_blueprint(
        "wait.yaml",
        &format!(
            r#"
name: wait-for-web
hosts:
  web: ["{}"]
steps:
  wait:
    run: wait-ssh
    with: {{ hosts: web, timeout: 2m }}
"#,
            sshd.address()
        ),
    );
    let status = overture.deploy_ok(&file, &[]);
    assert_eq!(status["steps"]["wait"]["attempts"], 1);
    let banners = banners(&status, "wait");
    assert_eq!(banners.len(), 1);
    assert!(
        banners[&sshd.address()].starts_with("SSH-2.0-OpenSSH"),
        "{banners:?}"
    );
    let waited: u64 = status["steps"]["wait"]["outputs"]["waited_ms"]
        .as_str()
        .and_then(|ms| ms.parse().ok())
        .expect("waited_ms");
    assert!(waited < 120_000);
}

#[test]
fn the_step_keeps_trying_until_every_host_has_answered() {
    let sshd = Sshd::start();
    let late = LateHost::start(2);
    let (overture, file) = Overture::with_blueprint(
        "wait.yaml",
        &format!(
            r#"
name: wait-for-two
steps:
  wait:
    run: wait-ssh
    with: {{ hosts: ["{}", "{}"], timeout: 2m }}
  after:
    run: script
    needs: [wait]
    with: {{ command: 'echo "seen={{{{ steps.wait.outputs.banners }}}}" >> "$OVERTURE_OUTPUTS"' }}
"#,
            sshd.address(),
            late.address()
        ),
    );
    let status = overture.deploy_ok(&file, &[]);
    assert_eq!(
        status["steps"]["wait"]["attempts"], 1,
        "one attempt polls until all answered"
    );
    assert_eq!(
        late.connections.load(Ordering::SeqCst),
        3,
        "two silent tries, then the banner, then no more tries"
    );
    let banners = banners(&status, "wait");
    assert_eq!(banners[&late.address()], LateHost::BANNER);
    assert!(banners[&sshd.address()].starts_with("SSH-2.0-OpenSSH"));
    assert!(status["steps"]["after"]["outputs"]["seen"]
        .as_str()
        .is_some_and(|seen| seen.contains(LateHost::BANNER)));
}

#[test]
fn a_host_that_never_answers_is_a_bootstrap_timeout_that_fails_the_deployment_at_once() {
    let address = format!("127.0.0.1:{}", closed_port());
    let (overture, file) = Overture::with_blueprint(
        "wait.yaml",
        &format!(
            r#"
name: wait-for-nothing
steps:
  wait:
    run: wait-ssh
    with: {{ hosts: ["{address}"], timeout: 2s }}
"#
        ),
    );
    let (code, status, output) = overture.deploy(&file, &[]);
    assert_eq!(code, 1, "{}", text(&output.stderr));
    assert_eq!(status["status"], "failed");
    assert_eq!(status["steps"]["wait"]["status"], "failed");
    assert_eq!(status["steps"]["wait"]["error_class"], "bootstrap-timeout");

    let events = overture.events(status["id"].as_str().expect("id"));
    assert_causal(&events, &BTreeMap::new());
    let wait = step_events(&events, "wait");
    assert_eq!(
        wait,
        [
            ("StepScheduled".to_owned(), 1),
            ("StepStarted".to_owned(), 1),
            ("StepNetworkPolicyApplied".to_owned(), 1),
            ("StepAttemptFailed".to_owned(), 1),
            ("StepFailed".to_owned(), 0),
        ],
        "exactly one attempt, no retry"
    );
    let policy = events
        .iter()
        .find(|e| e["type"] == "StepNetworkPolicyApplied")
        .expect("the attempt's network policy is recorded");
    assert_eq!(policy["data"]["allowed"], serde_json::json!([address]));
    let failure = events
        .iter()
        .find(|e| e["type"] == "StepAttemptFailed")
        .expect("the failed attempt");
    assert_eq!(failure["data"]["error_class"], "bootstrap-timeout");
    // At least the 2 s given, and far less than the default 2 minutes: the step's own timeout
    // was honoured, with room for a loaded machine's slow sandbox.
    let duration = failure["data"]["duration_ms"].as_u64().expect("duration");
    assert!(
        (2_000..60_000).contains(&duration),
        "the attempt lasted about the timeout, not the default: {duration} ms"
    );
    let message = failure["data"]["message"].as_str().expect("message");
    assert!(
        message.starts_with(&format!("no SSH banner within 2s from {address}")),
        "{message}"
    );
    assert!(message.contains("cloud-init status --long"), "{message}");
    assert!(
        message.contains("/var/log/cloud-init-output.log"),
        "{message}"
    );
    assert_eq!(events.last().expect("events")["type"], "DeploymentFailed");
}

#[test]
fn a_host_given_as_a_secret_is_reached_and_shown_nowhere() {
    let sshd = Sshd::start();
    let secret_host = sshd.address();
    let (overture, file) = Overture::with_blueprint(
        "secret-host.yaml",
        r#"
name: secret-host
secrets: [bastion]
hosts:
  hidden: ["{{ secrets.bastion }}"]
steps:
  wait: { run: wait-ssh, with: { hosts: hidden, timeout: 2m } }
"#,
    );
    let (_, status, output) = overture.deploy_with_secret(&file, "bastion", &secret_host);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let id = status["id"].as_str().expect("id");
    assert_eq!(
        banners(&status, "wait").keys().collect::<Vec<_>>(),
        ["***"],
        "the host answered, under a masked name"
    );
    let events = overture.run(&["events", id, "--json"]);
    for (what, bytes) in [
        ("deploy", &output.stdout),
        ("progress", &output.stderr),
        ("events", &events.stdout),
    ] {
        assert!(
            !text(bytes).contains(&secret_host),
            "{what} shows the secret"
        );
    }
    let found = files_containing(&overture.data_dir(), secret_host.as_bytes());
    assert!(found.is_empty(), "the secret is in {found:?}");
}

#[test]
fn a_rendered_host_holding_a_newline_or_an_escape_is_refused_on_one_line_that_moves_no_cursor() {
    let (overture, file) = Overture::with_blueprint(
        "evil-host.yaml",
        r#"
name: evil-host
params:
  first: {}
steps:
  make:
    run: script
    with: { command: 'printf "host=\033[2J\033[1;1Hdone\n" >> "$OVERTURE_OUTPUTS"' }
  wait:
    run: wait-ssh
    needs: [make]
    with: { hosts: ["{{ params.first }}{{ steps.make.outputs.host }}"], timeout: 2s }
"#,
    );
    let (code, status, output) = overture.deploy(&file, &["--param", "first=10.0.0.1\nwait"]);
    let progress = text(&output.stderr);
    assert_eq!(code, 1, "{progress}");
    assert_eq!(status["steps"]["wait"]["status"], "failed", "{progress}");
    assert!(
        !progress.contains('\u{1b}'),
        "no escape reaches the terminal: {progress:?}"
    );
    let refused = progress
        .lines()
        .find(|line| line.contains("is not an address"))
        .unwrap_or_else(|| panic!("the refusal is shown: {progress}"));
    assert!(
        refused.contains(r"`10.0.0.1\nwait\u{1b}[2J\u{1b}[1;1Hdone` is not an address"),
        "the whole address, escaped, on the refusal's own line: {refused}"
    );
}
