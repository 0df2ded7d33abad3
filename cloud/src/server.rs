//! A server's own files and its sshd. The network side (namespace, veth, firewall) is in
//! [`network`](crate::network); this is what makes a namespace a server you can SSH into.
//!
//! sshd runs inside the server's namespace under bubblewrap: the host's root read-only, and the
//! server's own `/root`, `/tmp`, `/var/tmp`, `/srv` and `/run` (bound from `DIR/servers/ID/`),
//! in new pid and uts namespaces. bubblewrap is pid 1's parent there, so killing it ends every
//! process of the server, sessions' background jobs included; `--die-with-parent` does the same
//! when the cloud itself dies.

use std::fs::{self, OpenOptions};
use std::io::Write as _;
use std::net::Ipv4Addr;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};
use tokio::time::Instant;

use crate::process::ProcessId;

/// The sshd binary (Debian's openssh-server).
pub const SSHD: &str = "/usr/sbin/sshd";

/// How long sshd gets to listen once started. It takes milliseconds; this bounds a broken one,
/// and is wide enough that a machine busy with many servers booting at once never reaches it.
const SSHD_READY_LIMIT: Duration = Duration::from_secs(60);

/// Where the server's sshd finds its configuration and host key, inside the server's `/run`.
const CONFIG_DIR: &str = "/run/overture";

/// Everything needed to give a server its files and its sshd.
#[derive(Debug, Clone)]
pub struct ServerSpec {
    /// `DIR/servers/ID` on the host.
    pub dir: PathBuf,
    /// Its namespace.
    pub namespace: String,
    /// Its address.
    pub address: Ipv4Addr,
    /// Its hostname.
    pub hostname: String,
    /// Root's authorized keys.
    pub authorized_keys: Vec<String>,
    /// Whether sshd allows TCP forwarding (a bastion).
    pub bastion: bool,
}

/// Giving a server its files or its sshd failed.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// A file of the server could not be written.
    #[error("cannot write the server's files in {path}: {source}")]
    Files {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The host key could not be made.
    #[error("cannot make the server's host key: {0}")]
    HostKey(String),
    /// sshd could not be started.
    #[error("cannot start the server's sshd: {0}")]
    Spawn(std::io::Error),
    /// sshd exited before it listened.
    #[error("the server's sshd exited ({status}); its log says: {log}")]
    Exited {
        /// Its exit status.
        status: String,
        /// The end of its log.
        log: String,
    },
    /// sshd did not listen in time.
    #[error("the server's sshd did not listen on {address}:22 within {limit:?}")]
    NotListening {
        /// The server's address.
        address: Ipv4Addr,
        /// How long it was given.
        limit: Duration,
    },
}

/// A running sshd: the bubblewrap process to kill to stop the whole server.
#[derive(Debug)]
pub struct Sshd {
    child: Child,
    /// The bubblewrap process.
    pub process: ProcessId,
}

impl ServerSpec {
    fn root(&self) -> PathBuf {
        self.dir.join("root")
    }

    fn run(&self) -> PathBuf {
        self.dir.join("run")
    }

    /// The sshd log on the host.
    pub fn log(&self) -> PathBuf {
        self.dir.join("sshd.log")
    }

    /// The server's console log on the host: what Nova's `os-getConsoleOutput` serves.
    pub fn console(&self) -> PathBuf {
        self.dir.join("console.log")
    }

    /// Writes the server's directories, root's authorized keys, the host key and sshd's
    /// configuration: what cloud-init would have done.
    pub fn write_files(&self) -> Result<(), ServerError> {
        let files = |path: &Path| {
            let path = path.to_owned();
            move |source| ServerError::Files { path, source }
        };
        let dirs = [
            (self.dir.clone(), 0o700),
            (self.root(), 0o700),
            (self.root().join(".ssh"), 0o700),
            (self.dir.join("tmp"), 0o1777),
            (self.dir.join("var-tmp"), 0o1777),
            (self.dir.join("srv"), 0o755),
            (self.run(), 0o755),
            // sshd's privilege separation directory: root's, not writable by others.
            (self.run().join("sshd"), 0o755),
            (self.run().join("overture"), 0o700),
        ];
        for (dir, mode) in dirs {
            fs::create_dir_all(&dir).map_err(files(&dir))?;
            fs::set_permissions(&dir, fs::Permissions::from_mode(mode)).map_err(files(&dir))?;
        }
        let mut keys = self.authorized_keys.join("\n");
        if !keys.is_empty() {
            keys.push('\n');
        }
        write_private(&self.root().join(".ssh/authorized_keys"), &keys)?;
        self.write_host_key()?;
        write_private(
            &self.run().join("overture/sshd_config"),
            &self.sshd_config(),
        )?;
        Ok(())
    }

    /// Gives the server a new host key of its own, and prints it to its console the way
    /// cloud-init's `keys_to_console` does at the end of a boot: the fingerprints, then the keys.
    pub fn write_host_key(&self) -> Result<(), ServerError> {
        let key = ssh_key::PrivateKey::random(&mut rand_core::OsRng, ssh_key::Algorithm::Ed25519)
            .map_err(|e| ServerError::HostKey(e.to_string()))?;
        let private = key
            .to_openssh(ssh_key::LineEnding::LF)
            .map_err(|e| ServerError::HostKey(e.to_string()))?;
        let public = key
            .public_key()
            .to_openssh()
            .map_err(|e| ServerError::HostKey(e.to_string()))?;
        let fingerprint = key.fingerprint(ssh_key::HashAlg::Sha256);
        write_private(
            &self.run().join("overture/ssh_host_ed25519_key"),
            private.as_str(),
        )?;
        let console = console_keys(
            &self.hostname,
            &[(256, fingerprint.to_string(), "ED25519", public)],
            chrono::Utc::now(),
        );
        let path = self.console();
        OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&path)
            .and_then(|mut file| file.write_all(console.as_bytes()))
            .map_err(|source| ServerError::Files { path, source })
    }

    /// The server's sshd configuration (paths as the server sees them).
    pub fn sshd_config(&self) -> String {
        let forwarding = if self.bastion { "yes" } else { "no" };
        format!(
            "# Written by overture-cloud for server {hostname}.
ListenAddress {address}:22
HostKey {CONFIG_DIR}/ssh_host_ed25519_key
PidFile none
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
AuthorizedKeysFile /root/.ssh/authorized_keys
AllowTcpForwarding {forwarding}
AllowAgentForwarding no
X11Forwarding no
PermitTunnel no
GatewayPorts no
PrintMotd no
Subsystem sftp internal-sftp
",
            hostname = self.hostname,
            address = self.address,
        )
    }

    /// The command that runs sshd in the server: `ip netns exec NS bwrap ... sshd`.
    pub fn sshd_command(&self) -> Vec<String> {
        let dir = |name: &str| self.dir.join(name).display().to_string();
        let mut args: Vec<String> = ["netns", "exec", &self.namespace, "bwrap"]
            .into_iter()
            .map(str::to_owned)
            .collect();
        let fixed = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"];
        args.extend(fixed.into_iter().map(str::to_owned));
        for (own, seen_as) in [
            ("root", "/root"),
            ("tmp", "/tmp"),
            ("var-tmp", "/var/tmp"),
            ("srv", "/srv"),
            ("run", "/run"),
        ] {
            args.extend(["--bind".to_owned(), dir(own), seen_as.to_owned()]);
        }
        args.extend(
            [
                "--unshare-pid",
                "--unshare-uts",
                "--unshare-ipc",
                "--hostname",
                &self.hostname,
                "--die-with-parent",
                "--",
                SSHD,
                "-D",
                "-e",
                "-f",
                &format!("{CONFIG_DIR}/sshd_config"),
            ]
            .into_iter()
            .map(str::to_owned),
        );
        args
    }

    /// Starts sshd and returns once it listens on the server's address; `record` is told of
    /// each process started.
    ///
    /// bubblewrap copies the machine's whole mount table to bind `/` read-only; a mount another
    /// process removes meanwhile (a step sandbox's, ending) fails the copy, and sshd's start with
    /// it. That start is tried again, a few times: the next copy does not meet the mount.
    pub async fn start_sshd(
        &self,
        record: impl Fn(ProcessId) -> Result<(), crate::journal::JournalError>,
    ) -> Result<Sshd, ServerError> {
        let mut tries = 1;
        loop {
            match self.start_sshd_once(&record).await {
                Err(ServerError::Exited { log, .. })
                    if lost_a_mount(&log) && tries < MOUNT_RACE_TRIES =>
                {
                    tracing::debug!(server = %self.hostname, %log, "a mount vanished while sshd's sandbox was made; starting it again");
                    tries += 1;
                }
                started => return started,
            }
        }
    }

    async fn start_sshd_once(
        &self,
        record: &impl Fn(ProcessId) -> Result<(), crate::journal::JournalError>,
    ) -> Result<Sshd, ServerError> {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(self.log())
            .map_err(|source| ServerError::Files {
                path: self.log(),
                source,
            })?;
        let log_too = log.try_clone().map_err(ServerError::Spawn)?;
        // The child gets SIGKILL when the thread that spawned it ends (--die-with-parent): the
        // runtime's worker threads live as long as the cloud, which is what is wanted.
        let mut child = Command::new("ip")
            .args(self.sshd_command())
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_too)
            .kill_on_drop(true)
            .spawn()
            .map_err(ServerError::Spawn)?;
        let Some(process) = child.id().and_then(ProcessId::of) else {
            let status = child.wait().await.map_err(ServerError::Spawn)?;
            return Err(self.exited(status));
        };
        if let Err(error) = record(process) {
            let _ = child.kill().await;
            return Err(ServerError::Spawn(std::io::Error::other(error.to_string())));
        }
        let mut sshd = Sshd { child, process };
        self.wait_listening(&mut sshd).await?;
        Ok(sshd)
    }

    /// Polls the namespace's sockets (as `/proc/PID/net/tcp` of a process inside shows them)
    /// until sshd listens: the port answers from then on.
    async fn wait_listening(&self, sshd: &mut Sshd) -> Result<(), ServerError> {
        let deadline = Instant::now() + SSHD_READY_LIMIT;
        let sockets = PathBuf::from(format!("/proc/{}/net/tcp", sshd.process.pid));
        let mut pause = Duration::from_millis(2);
        loop {
            if let Ok(Some(status)) = sshd.child.try_wait() {
                return Err(self.exited(status));
            }
            if let Ok(table) = fs::read_to_string(&sockets) {
                if listens(&table, self.address, 22) {
                    return Ok(());
                }
            }
            if Instant::now() >= deadline {
                return Err(ServerError::NotListening {
                    address: self.address,
                    limit: SSHD_READY_LIMIT,
                });
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(50));
        }
    }

    fn exited(&self, status: std::process::ExitStatus) -> ServerError {
        let log = fs::read_to_string(self.log()).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(5).collect();
        ServerError::Exited {
            status: status.to_string(),
            log: tail.into_iter().rev().collect::<Vec<_>>().join(" / "),
        }
    }
}

/// How many times a server's sshd is started when mounts vanish under bubblewrap.
const MOUNT_RACE_TRIES: u32 = 3;

/// Whether sshd's start failed because a mount vanished while bubblewrap copied the mount
/// table (its words: "Can't bind mount /oldroot/... No such file or directory").
fn lost_a_mount(log: &str) -> bool {
    log.contains("bwrap: Can't bind mount /oldroot/") && log.contains("No such file or directory")
}

impl Sshd {
    /// Kills the server's bubblewrap (and so every process of the server) and reaps it.
    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

/// What cloud-init prints to a server's console about its host keys: for each key its size,
/// fingerprint, type name and OpenSSH public key line.
fn console_keys(
    hostname: &str,
    keys: &[(u32, String, &str, String)],
    now: chrono::DateTime<chrono::Utc>,
) -> String {
    // cloud-init logs through syslog (priority 14, user.info) to the console.
    let prefix = format!("<14>{} cloud-init: ", now.format("%b %e %H:%M:%S"));
    let rule = "#".repeat(61);
    let mut text = format!("{prefix}{rule}\n{prefix}-----BEGIN SSH HOST KEY FINGERPRINTS-----\n");
    for (bits, fingerprint, kind, _) in keys {
        text.push_str(&format!(
            "{prefix}{bits} {fingerprint} root@{hostname} ({kind})\n"
        ));
    }
    text.push_str(&format!(
        "{prefix}-----END SSH HOST KEY FINGERPRINTS-----\n{prefix}{rule}\n-----BEGIN SSH HOST KEY KEYS-----\n"
    ));
    for (_, _, _, public) in keys {
        text.push_str(&format!("{} root@{hostname}\n", public.trim()));
    }
    text.push_str("-----END SSH HOST KEY KEYS-----\n");
    text
}

/// Writes a file only root may read.
fn write_private(path: &Path, text: &str) -> Result<(), ServerError> {
    let error = |source| ServerError::Files {
        path: path.to_owned(),
        source,
    };
    let mut file = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(error)?;
    file.write_all(text.as_bytes()).map_err(error)
}

/// Whether a `/proc/net/tcp` table shows a socket listening on `address:port`.
fn listens(table: &str, address: Ipv4Addr, port: u16) -> bool {
    const LISTEN: &str = "0A";
    table.lines().skip(1).any(|line| {
        let mut fields = line.split_whitespace();
        let (Some(local), Some(state)) = (fields.nth(1), fields.nth(1)) else {
            return false;
        };
        let Some((host, local_port)) = local.split_once(':') else {
            return false;
        };
        // The kernel prints the address as the hex of its in-memory (network order) u32.
        let host = u32::from_str_radix(host, 16).map(|raw| Ipv4Addr::from(raw.to_ne_bytes()));
        let local_port = u16::from_str_radix(local_port, 16);
        state == LISTEN
            && local_port == Ok(port)
            && matches!(host, Ok(h) if h == address || h.is_unspecified())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mount_vanishing_under_bubblewrap_is_told_from_other_failures() {
        let raced = "bwrap: Can't bind mount /oldroot/ on /newroot/: Unable to apply mount flags: \
             remount \"/newroot/tmp/x/data/sandboxes/a-call-4\": No such file or directory";
        assert!(lost_a_mount(raced));
        assert!(!lost_a_mount(
            "/run/overture/sshd_config: No such file or directory"
        ));
        assert!(!lost_a_mount(
            "bwrap: Can't bind mount /oldroot/ on /newroot/: Permission denied"
        ));
    }

    fn spec(bastion: bool) -> ServerSpec {
        ServerSpec {
            dir: PathBuf::from("/state/servers/x"),
            namespace: "ovcab12s1".into(),
            address: Ipv4Addr::new(10, 250, 1, 2),
            hostname: "web-1".into(),
            authorized_keys: vec![],
            bastion,
        }
    }

    #[test]
    fn only_a_bastion_forwards_tcp() {
        assert!(spec(true)
            .sshd_config()
            .contains("\nAllowTcpForwarding yes\n"));
        assert!(spec(false)
            .sshd_config()
            .contains("\nAllowTcpForwarding no\n"));
        assert!(spec(false)
            .sshd_config()
            .contains("\nListenAddress 10.250.1.2:22\n"));
    }

    #[test]
    fn sshd_runs_in_the_namespace_with_the_servers_own_directories() {
        let command = spec(false).sshd_command().join(" ");
        assert!(
            command.starts_with("netns exec ovcab12s1 bwrap --ro-bind / / "),
            "{command}"
        );
        assert!(
            command.contains(" --bind /state/servers/x/var-tmp /var/tmp "),
            "{command}"
        );
        assert!(command.contains(" --hostname web-1 --die-with-parent -- /usr/sbin/sshd -D -e -f /run/overture/sshd_config"), "{command}");
    }

    #[test]
    fn the_console_shows_the_keys_as_cloud_init_prints_them() {
        let now = chrono::DateTime::parse_from_rfc3339("2026-11-03T09:05:01Z")
            .expect("a time")
            .to_utc();
        let text = console_keys(
            "web-1",
            &[(
                256,
                "SHA256:abc".into(),
                "ED25519",
                "ssh-ed25519 AAAA".into(),
            )],
            now,
        );
        let rule = "#".repeat(61);
        assert_eq!(
            text,
            format!(
                "<14>Nov  3 09:05:01 cloud-init: {rule}\n\
<14>Nov  3 09:05:01 cloud-init: -----BEGIN SSH HOST KEY FINGERPRINTS-----\n\
<14>Nov  3 09:05:01 cloud-init: 256 SHA256:abc root@web-1 (ED25519)\n\
<14>Nov  3 09:05:01 cloud-init: -----END SSH HOST KEY FINGERPRINTS-----\n\
<14>Nov  3 09:05:01 cloud-init: {rule}\n\
-----BEGIN SSH HOST KEY KEYS-----\n\
ssh-ed25519 AAAA root@web-1\n\
-----END SSH HOST KEY KEYS-----\n"
            )
        );
    }

    #[test]
    fn a_listening_socket_is_found_in_proc_net_tcp() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 0201FA0A:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 573169 1 0 100 0 0 10 0\n   1: 0201FA0A:0016 0101FA0A:C350 01 00000000:00000000 00:00000000 00000000     0        0 0 1 0 100 0 0 10 0\n";
        assert!(listens(table, Ipv4Addr::new(10, 250, 1, 2), 22));
        assert!(!listens(table, Ipv4Addr::new(10, 250, 1, 3), 22));
        assert!(!listens(table, Ipv4Addr::new(10, 250, 1, 2), 80));
    }
}
