//! A networked step's own network namespace: what it may reach ([`NetworkPolicy`]), the
//! firewall that enforces it and the `pasta` process that connects it.
//!
//! bubblewrap gives every sandbox a fresh network namespace (`--unshare-net`). For a step with
//! a policy, [`attach`] runs while the sandbox's init is still held blocked, before the step's
//! first instruction:
//!
//! 1. An nftables ruleset is loaded in the namespace: output is refused except to the policy's
//!    destinations, and link-local addresses (169.254.0.0/16, the metadata service) are refused
//!    whatever the policy says. The step runs without capabilities, so it cannot change it.
//! 2. `pasta` (from passt) connects the namespace: every connection the step opens is opened
//!    again from the engine's address by pasta, on the host. `--no-map-gw` keeps the host's
//!    loopback out of reach through the gateway address; the policy's loopback destinations
//!    (`127.0.0.1:PORT`) are forwarded one port at a time (`-T PORT`); nothing is forwarded
//!    into the namespace (`-t none -u none`).
//!
//! The returned [`Pasta`] is killed through a pidfd when dropped and by [`Pasta::stop`] at the
//! end of every run, and its command line names the workspace so that
//! [`kill_leftovers`](super::Bubblewrap::kill_leftovers) finds it after a crash. Before there is
//! a [`Pasta`], while `attach` waits for pasta to set up and go to the background, an
//! [`Unclaimed`] guard kills what pasta left in the background if `attach` fails or is dropped.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::process::Command;

pub use overture_domain::egress::{Destination, DestinationError};

use super::error::SandboxError;
use super::sys::{self, Pidfd};

/// The program that connects a sandbox's namespace, looked up on the engine's `PATH`.
const PASTA: &str = "pasta";
/// The program that loads the firewall, looked up on the engine's `PATH`.
const NFT: &str = "nft";
/// Enters the namespace to load the firewall, looked up on the engine's `PATH`.
const NSENTER: &str = "nsenter";
/// The pasta process's pid file, in the attempt's workspace directory.
const PASTA_PID_FILE: &str = "pasta.pid";
/// How long pasta gets to set the namespace up or to go away when killed.
const PASTA_GRACE: Duration = Duration::from_secs(10);

/// Where a networked step may open connections; everything else is refused.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetworkPolicy {
    /// The allowed destinations.
    pub allow: Vec<Destination>,
}

impl NetworkPolicy {
    /// Checks every destination.
    pub fn check(&self) -> Result<(), SandboxError> {
        for destination in &self.allow {
            destination
                .check()
                .map_err(|reason| SandboxError::InvalidNetworkPolicy { reason })?;
        }
        Ok(())
    }

    /// The nftables ruleset loaded in the step's namespace.
    pub(crate) fn ruleset(&self) -> String {
        let mut rules = String::from(
            "table inet overture {\n  chain output {\n    type filter hook output priority 0; policy drop;\n",
        );
        // The namespace's own loopback: the step's own services and pasta's forwarded ports.
        rules.push_str("    oifname \"lo\" accept\n");
        // Refused (not dropped) so that a connect fails at once rather than timing out.
        rules.push_str("    ip daddr 169.254.0.0/16 reject with icmpx type admin-prohibited\n");
        for destination in self.allow.iter().filter(|d| !d.is_loopback()) {
            let network = format!("{}/{}", destination.address, destination.prefix);
            match destination.port {
                Some(port) => {
                    rules.push_str(&format!("    ip daddr {network} tcp dport {port} accept\n"))
                }
                None => rules.push_str(&format!("    ip daddr {network} accept\n")),
            }
        }
        rules.push_str("    reject with icmpx type admin-prohibited\n  }\n}\n");
        rules
    }

    /// The loopback ports pasta forwards to the host's 127.0.0.1.
    fn loopback_ports(&self) -> Vec<u16> {
        let mut ports: Vec<u16> = self
            .allow
            .iter()
            .filter(|d| d.is_loopback())
            .filter_map(|d| d.port)
            .collect();
        ports.sort_unstable();
        ports.dedup();
        ports
    }
}

/// The pasta process connecting one sandbox's namespace; killed when dropped.
pub(crate) struct Pasta(Pidfd);

impl Pasta {
    /// Kills pasta and waits until it is gone.
    pub(crate) async fn stop(self) -> Result<(), SandboxError> {
        self.0.kill().map_err(process("stop pasta"))?;
        let waiting = self.0.try_clone().map_err(process("wait for pasta"))?;
        let exited = tokio::task::spawn_blocking(move || waiting.wait_exited_blocking(PASTA_GRACE))
            .await
            .unwrap_or_else(|join| Err(std::io::Error::other(join)))
            .map_err(process("wait for pasta"))?;
        if exited {
            Ok(())
        } else {
            Err(SandboxError::StillRunning { grace: PASTA_GRACE })
        }
    }
}

impl Drop for Pasta {
    fn drop(&mut self) {
        // Killing twice is harmless; failing can only mean it is gone already.
        let _ = self.0.kill();
    }
}

/// The pasta that `attach` started, until a [`Pasta`] holds it: dropped unclaimed (`attach`
/// failed, or its future was dropped while pasta was still setting up), it kills the process
/// pasta left in the background, which would otherwise outlive the run.
///
/// pasta opens its pid file (`O_CREAT | O_TRUNC`, the same file once it exists), forks, and its
/// first process writes the background one's pid there and exits. The guard makes the file and
/// keeps it open before pasta starts, so it reads the pid even once the workspace is removed;
/// and it waits for pasta's first process to exit (for at most [`PASTA_GRACE`], on a thread of
/// its own, not the runtime's) before it concludes that no pid is coming. It kills only that
/// pid, and only while that process still names this pid file on its command line.
///
/// One window stays open: the first process is killed when its future is dropped
/// (`kill_on_drop`), and killed between its fork and its write, it names no pid. The process
/// in the background is then found only by its command line, which names the workspace, by
/// [`kill_leftovers`](super::Bubblewrap::kill_leftovers) when the engine starts again.
struct Unclaimed {
    pid_file: File,
    path: PathBuf,
    /// pasta's first process, once it is started.
    first: Option<Pidfd>,
    claimed: bool,
}

impl Unclaimed {
    /// Makes the (empty) pid file pasta will write, and keeps it open.
    fn new(path: PathBuf) -> Result<Self, SandboxError> {
        let pid_file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&path)
            .map_err(process("make pasta's pid file"))?;
        Ok(Self {
            pid_file,
            path,
            first: None,
            claimed: false,
        })
    }
}

impl Drop for Unclaimed {
    fn drop(&mut self) {
        if self.claimed {
            return;
        }
        // Once the first process is gone, the pid is written or never will be.
        let first_gone = self
            .first
            .as_ref()
            .is_none_or(|first| first.wait_exited_blocking(Duration::ZERO).unwrap_or(false));
        if let Some(pid) = pid_in(&self.pid_file) {
            kill_pasta(pid, &self.path);
            return;
        }
        let (false, Some(first)) = (first_gone, self.first.take()) else {
            return;
        };
        let (Ok(pid_file), path) = (self.pid_file.try_clone(), self.path.clone()) else {
            return;
        };
        let waiting = move || {
            let _ = first.wait_exited_blocking(PASTA_GRACE);
            if let Some(pid) = pid_in(&pid_file) {
                kill_pasta(pid, &path);
            }
        };
        if let Err(error) = std::thread::Builder::new()
            .name("pasta-unclaimed".into())
            .spawn(waiting)
        {
            tracing::warn!(%error, "could not wait for pasta to go to the background; it may outlive its run");
        }
    }
}

/// The pid pasta's first process wrote, if it has.
fn pid_in(pid_file: &File) -> Option<u32> {
    let mut buffer = [0_u8; 32];
    let read = pid_file.read_at(&mut buffer, 0).ok()?;
    std::str::from_utf8(buffer.get(..read)?)
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Kills `pid` if it is still the pasta whose command line names `pid_file`: a pid read from a
/// file may have been reused by the time it is used.
fn kill_pasta(pid: u32, pid_file: &Path) {
    let Ok(Some(process)) = Pidfd::open(pid) else {
        return;
    };
    // Read after the pidfd is open: a process that has it now is the one the pidfd holds.
    let names_pid_file = std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|line| {
            line.split(|byte| *byte == 0)
                .any(|arg| arg == pid_file.as_os_str().as_encoded_bytes())
        })
        .unwrap_or(false);
    if names_pid_file {
        if let Err(error) = process.kill() {
            tracing::warn!(pid, %error, "could not kill an unclaimed pasta");
        }
    }
}

/// Loads `policy`'s firewall in the namespace of the sandbox init `init_pid` (still blocked),
/// then connects that namespace with pasta. `workspace` is the attempt's directory on the host.
pub(crate) async fn attach(
    init_pid: u32,
    policy: &NetworkPolicy,
    workspace: &Path,
) -> Result<Pasta, SandboxError> {
    let namespace = PathBuf::from(format!("/proc/{init_pid}/ns/net"));
    load_firewall(&namespace, &policy.ruleset()).await?;

    // pasta drops its capabilities before it opens the namespace, after which the kernel no
    // longer lets it open another process's; it gets ours, already open, instead.
    let netns = File::open(&namespace).map_err(process("open the sandbox's network namespace"))?;
    let fd = netns.as_raw_fd();
    let pid_file = workspace.join(PASTA_PID_FILE);
    // Only ports something listens on now: pasta accepts a forwarded connection inside the
    // namespace before it connects on the host, so a forward to a closed port would turn the
    // step's "connection refused" into a connection reset. Left out, the port stays refused.
    let listening = listening_on_loopback();
    let ports: Vec<u16> = policy
        .loopback_ports()
        .into_iter()
        .filter(|port| listening.contains(port))
        .collect();
    let tcp_ns = if ports.is_empty() {
        "none".to_owned()
    } else {
        ports
            .iter()
            .map(u16::to_string)
            .collect::<Vec<_>>()
            .join(",")
    };
    // Made before pasta starts, so that nothing pasta leaves behind goes unkilled.
    let mut unclaimed = Unclaimed::new(pid_file.clone())?;
    let mut command = Command::new(tool(PASTA, "passt")?);
    command
        .args(["--config-net", "--no-map-gw", "--ipv4-only", "--quiet"])
        // As root pasta would switch to nobody, who may not enter the namespace; it still
        // gives up every capability it does not need and confines itself with seccomp.
        .args(["--runas", "0:0"])
        .args(["-t", "none", "-u", "none", "-U", "none", "-T", &tcp_ns])
        .args(["--no-dhcp", "--no-dhcpv6", "--no-ndp", "--no-ra"])
        .arg("--pid")
        .arg(&pid_file)
        .arg("--netns")
        .arg(format!("/proc/self/fd/{fd}"))
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    // SAFETY: the closure only calls fcntl, which is async-signal-safe, and allocates nothing.
    unsafe {
        command.pre_exec(move || sys::clear_cloexec(&[fd]));
    }
    let child = command.spawn().map_err(|source| SandboxError::Network {
        reason: format!("could not start pasta: {source}"),
    })?;
    unclaimed.first = match child.id() {
        Some(pid) => Pidfd::open(pid).map_err(process("open pasta's process"))?,
        None => None,
    };
    // pasta sets the namespace up, then forks into the background and its first process exits.
    let output = tokio::time::timeout(PASTA_GRACE, child.wait_with_output())
        .await
        .map_err(|_| SandboxError::Network {
            reason: format!("pasta did not set the namespace up within {PASTA_GRACE:?}"),
        })?
        .map_err(process("wait for pasta to set the namespace up"))?;
    drop(netns);
    let pasta = match pid_in(&unclaimed.pid_file) {
        Some(pid) => Pidfd::open(pid)
            .map_err(process("open pasta's process"))?
            .map(Pasta),
        None => None,
    };
    unclaimed.claimed = pasta.is_some();
    if !output.status.success() {
        return Err(SandboxError::Network {
            reason: format!(
                "pasta failed ({}): {}",
                output.status,
                messages(&output.stderr)
            ),
        });
    }
    pasta.ok_or_else(|| SandboxError::Network {
        reason: "pasta left no running process".into(),
    })
}

/// The TCP ports listening on the host's 127.0.0.1 (bound to it or to every address), from the
/// engine's own network namespace's socket tables.
fn listening_on_loopback() -> std::collections::HashSet<u16> {
    const LISTEN: &str = "0A";
    let loopback_or_any = [
        "0100007F",
        "00000000",
        "00000000000000000000000000000000",
        "0000000000000000FFFF00000100007F",
    ];
    let mut ports = std::collections::HashSet::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(state)) = (fields.get(1), fields.get(3)) else {
                continue;
            };
            let Some((address, port)) = local.split_once(':') else {
                continue;
            };
            if *state == LISTEN && loopback_or_any.contains(&address) {
                if let Ok(port) = u16::from_str_radix(port, 16) {
                    ports.insert(port);
                }
            }
        }
    }
    ports
}

/// Loads `ruleset` with nft inside the network namespace at `namespace`.
async fn load_firewall(namespace: &Path, ruleset: &str) -> Result<(), SandboxError> {
    let mut command = Command::new(tool(NSENTER, "util-linux")?);
    command
        .arg(format!("--net={}", namespace.display()))
        .arg(tool(NFT, "nftables")?)
        .args(["-f", "-"])
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = command.spawn().map_err(|source| SandboxError::Network {
        reason: format!("could not start {NSENTER} to load the network policy: {source}"),
    })?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(ruleset.as_bytes())
            .await
            .map_err(process("load the network policy"))?;
    }
    let output = child
        .wait_with_output()
        .await
        .map_err(process("load the network policy"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(SandboxError::Network {
            reason: format!(
                "nft could not load the network policy ({}): {}",
                output.status,
                messages(&output.stderr)
            ),
        })
    }
}

/// Where `program` is, as the pre-flight check found it: with an empty environment a bare name
/// would be looked up in the C library's default directories instead of the engine's `PATH`.
fn tool(program: &str, package: &str) -> Result<PathBuf, SandboxError> {
    super::preflight::on_path(Path::new(program)).ok_or_else(|| SandboxError::Network {
        reason: format!("{program} is not on PATH; install it with `apt-get install {package}`"),
    })
}

/// A program's complaints, without pasta's about a missing system logger.
fn messages(stderr: &[u8]) -> String {
    String::from_utf8_lossy(stderr)
        .lines()
        .filter(|line| !line.starts_with("Failed to send") && !line.trim().is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

fn process(action: &'static str) -> impl FnOnce(std::io::Error) -> SandboxError {
    move |source| SandboxError::Process { action, source }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ruleset_allows_only_the_policy() {
        let policy = NetworkPolicy {
            allow: vec![
                "10.0.0.0/24".parse().expect("a destination"),
                "192.0.2.9:22".parse().expect("a destination"),
                "127.0.0.1:5000".parse().expect("a destination"),
            ],
        };
        let rules = policy.ruleset();
        assert!(rules.contains("policy drop;"));
        assert!(rules.contains("ip daddr 10.0.0.0/24 accept"));
        assert!(rules.contains("ip daddr 192.0.2.9/32 tcp dport 22 accept"));
        assert!(!rules.contains("127.0.0.1"), "{rules}");
        let metadata = rules.find("169.254.0.0/16").expect("metadata rule");
        assert!(metadata < rules.find("10.0.0.0/24").expect("network rule"));
        assert_eq!(policy.loopback_ports(), vec![5000]);
    }
}
