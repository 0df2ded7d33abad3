//! A networked step's own namespace against the real `bwrap`, `nft` and `pasta`: it reaches
//! what its policy allows and nothing else, and nothing of it outlives the run.
//!
//! These need root, bubblewrap, nftables and passt, as the engine does. A "remote" address is a
//! bridge the test adds on the host (removed when the test ends), so that no traffic
//! leaves the machine.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::Poll;
use std::time::Duration;

use overture_sandbox::{Destination, NetworkPolicy, SandboxRequest};
use tempfile::TempDir;

mod support;

use support::{run, sandbox};

/// A networked request of `command`, its policy allowing `allow`.
fn request(command: &str, allow: Vec<Destination>) -> SandboxRequest {
    SandboxRequest {
        network: true,
        network_policy: Some(NetworkPolicy { allow }),
        ..support::request(&format!("net-{}", uuid::Uuid::new_v4().simple()), command)
    }
}

/// A shell line that prints `NAME ok` if a TCP connection to `address` opens, or
/// `NAME failed: <why>` if it does not; it never waits for a timeout of its own.
fn probe(name: &str, address: SocketAddr) -> String {
    format!(
        "if bash -c 'exec 3<>/dev/tcp/{}/{}' 2>/tmp/err; then echo '{name} ok'; \
         else echo \"{name} failed: $(cat /tmp/err)\"; fi\n",
        address.ip(),
        address.port()
    )
}

/// A listener that accepts (and keeps) connections in the background.
fn listen(address: Ipv4Addr) -> SocketAddr {
    let listener = TcpListener::bind((address, 0)).expect("listen");
    let local = listener.local_addr().expect("address");
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        for stream in listener.incoming().flatten() {
            kept.push(stream);
        }
    });
    local
}

/// An address on a bridge of the host: somewhere pasta connects to as it would to a
/// server, without leaving the machine. Removed when dropped.
struct RemoteAddress {
    link: String,
    address: Ipv4Addr,
}

impl RemoteAddress {
    fn add() -> Self {
        static NEXT: AtomicU8 = AtomicU8::new(1);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        // Per process and per test, so that parallel runs do not collide.
        let group = u8::try_from(std::process::id() % 200).unwrap_or(0) + 20;
        let address = Ipv4Addr::new(10, 254, group, n);
        let link = format!("ovtnet{group}x{n}");
        ip(&["link", "add", &link, "type", "bridge"]);
        let remote = Self { link, address };
        ip(&["addr", "add", &format!("{address}/32"), "dev", &remote.link]);
        ip(&["link", "set", &remote.link, "up"]);
        remote
    }
}

impl Drop for RemoteAddress {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["link", "del", &self.link])
            .status();
    }
}

fn ip(args: &[&str]) {
    let status = Command::new("ip").args(args).status().expect("ip runs");
    assert!(status.success(), "ip {args:?} failed");
}

fn pasta_processes(root: &TempDir) -> Vec<String> {
    let marker = root.path().to_string_lossy().into_owned();
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|entry| std::fs::read(entry.path().join("cmdline")).ok())
        .map(|line| String::from_utf8_lossy(&line).replace('\0', " "))
        // The sandbox runs pasta by the path it found on PATH: match the program's name.
        .filter(|line| {
            let program = line.split(' ').next().unwrap_or_default();
            std::path::Path::new(program).file_name() == Some("pasta".as_ref())
                && line.contains(&marker)
        })
        .collect()
}

#[tokio::test]
async fn a_step_reaches_its_allowed_destinations_and_nothing_else() {
    let (sandbox, root) = sandbox();
    let remote = RemoteAddress::add();
    let declared = listen(remote.address);
    let undeclared = listen(remote.address);
    let allowed_loopback = listen(Ipv4Addr::LOCALHOST);
    let host_loopback = listen(Ipv4Addr::LOCALHOST);
    let metadata: SocketAddr = "169.254.169.254:80".parse().expect("a destination");
    let closed = {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("listen");
        listener.local_addr().expect("address")
    };

    let command = [
        probe("declared", declared),
        probe("allowed-loopback", allowed_loopback),
        probe("undeclared", undeclared),
        probe("host-loopback", host_loopback),
        probe("metadata", metadata),
        probe("allowed-closed", closed),
    ]
    .concat();
    let allow = vec![
        Destination::tcp(remote.address, declared.port()),
        Destination::tcp(Ipv4Addr::LOCALHOST, allowed_loopback.port()),
        Destination::tcp(Ipv4Addr::LOCALHOST, closed.port()),
    ];
    let outcome = run(&sandbox, request(&command, allow)).await;
    let output = String::from_utf8_lossy(&outcome.output).into_owned();
    assert!(outcome.exit.success(), "{output}");

    assert!(output.contains("declared ok"), "{output}");
    assert!(output.contains("allowed-loopback ok"), "{output}");
    assert!(output.contains("undeclared failed"), "{output}");
    assert!(output.contains("host-loopback failed"), "{output}");
    // Refused inside the namespace at once, not left to time out.
    assert!(output.contains("metadata failed"), "{output}");
    // An allowed port nothing listens on is refused, as it would be on the host.
    assert!(
        output.contains("allowed-closed failed: bash: connect: Connection refused"),
        "{output}"
    );
    assert!(!output.contains("timed out"), "{output}");
    assert!(
        pasta_processes(&root).is_empty(),
        "{:?}",
        pasta_processes(&root)
    );
}

#[tokio::test]
async fn a_whole_network_can_be_allowed() {
    let (sandbox, root) = sandbox();
    let remote = RemoteAddress::add();
    let server = listen(remote.address);
    let command = probe("network", server);
    let allow = vec![format!("{}/32", remote.address)
        .parse()
        .expect("a destination")];
    let outcome = run(&sandbox, request(&command, allow)).await;
    let output = String::from_utf8_lossy(&outcome.output).into_owned();
    assert!(output.contains("network ok"), "{output}");
    assert!(pasta_processes(&root).is_empty());
}

#[tokio::test]
async fn the_step_cannot_change_its_own_firewall() {
    let (sandbox, root) = sandbox();
    let command = "/usr/sbin/nft flush ruleset 2>&1 && echo flushed || echo refused";
    let outcome = run(&sandbox, request(command, vec![])).await;
    let output = String::from_utf8_lossy(&outcome.output).into_owned();
    assert!(output.contains("refused"), "{output}");
    assert!(pasta_processes(&root).is_empty());
}

#[tokio::test]
async fn pasta_ends_with_a_cancelled_attempt() {
    let (sandbox, root) = sandbox();
    let request = request("sleep 300", vec![]);
    let cancel = async {
        // Cancel once pasta is there to be ended: a condition, polled.
        while pasta_processes(&root).is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    let outcome = sandbox
        .run(request, cancel)
        .await
        .expect("the sandbox runs");
    assert_eq!(outcome.exit, overture_sandbox::Exit::Cancelled);
    assert!(pasta_processes(&root).is_empty());
}

/// Whether a process runs with exactly this command line.
fn running(command_line: &str) -> bool {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|entry| std::fs::read(entry.path().join("cmdline")).ok())
        .any(|line| String::from_utf8_lossy(&line).replace('\0', " ").trim_end() == command_line)
}

#[tokio::test]
async fn pasta_ends_when_the_run_is_dropped() {
    let (sandbox, root) = sandbox();
    // A sleep no other process runs, so the test knows when the step itself has started: by
    // then pasta is attached (the step starts only once its network is), not half-way there.
    let step = format!(
        "sleep 300.{:06}",
        uuid::Uuid::new_v4().as_u128() % 1_000_000
    );
    let request = request(&step, vec![]);
    let run = sandbox.run(request, std::future::pending());
    tokio::select! {
        _ = run => panic!("the step ended by itself"),
        () = async {
            while !running(&step) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            assert!(
                !pasta_processes(&root).is_empty(),
                "the step runs with pasta attached"
            );
        } => {}
    }
    // The run was dropped mid-step: pasta is killed, and goes (polled, at most 20 s).
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !pasta_processes(&root).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "pasta outlived its run"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The pid pasta's first process wrote to its pid file, once it has.
fn pid_written(pid_file: &Path) -> Option<u32> {
    std::fs::read_to_string(pid_file).ok()?.trim().parse().ok()
}

/// Whether process `pid` runs with `arg` among its arguments (a zombie has none).
fn runs_with(pid: u32, arg: &Path) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|line| {
        line.split(|byte| *byte == 0)
            .any(|each| each == arg.as_os_str().as_encoded_bytes())
    })
}

#[tokio::test]
async fn pasta_ends_when_the_run_is_dropped_while_pasta_goes_to_the_background() {
    let (sandbox, root) = sandbox();
    let request = request("sleep 300", vec![]);
    let pid_file = root
        .path()
        .join("workspaces")
        .join(&request.id)
        .join("pasta.pid");
    let mut run = Box::pin(sandbox.run(request, std::future::pending()));
    // Checked first at every poll, before the run goes on: pasta's first process writes the
    // pid before it exits, and the run learns of that exit only at a later poll, so the run is
    // dropped while it still waits for pasta, with no `Pasta` holding it.
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    let written = std::future::poll_fn(|cx| {
        if let Some(pid) = pid_written(&pid_file) {
            return Poll::Ready(pid);
        }
        while tick.poll_tick(cx).is_ready() {}
        Poll::Pending
    });
    let pasta = tokio::select! {
        biased;
        pid = written => pid,
        outcome = &mut run => panic!("the run ended before pasta went to the background: {outcome:?}"),
    };
    assert!(runs_with(pasta, &pid_file), "pasta runs in the background");
    drop(run);
    // Killed as the run is dropped, it goes (polled, at most 20 s).
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while runs_with(pasta, &pid_file) {
        assert!(
            std::time::Instant::now() < deadline,
            "pasta outlived its run"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
