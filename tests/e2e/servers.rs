//! Real servers the tests start on loopback, and stop by the PID they started: an OpenSSH
//! server, and a port nobody listens on.

use std::io::{BufRead, BufReader};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a freshly started server may take to answer.
const READY_WITHIN: Duration = Duration::from_secs(60);

/// A loopback port that nothing listens on (bound, then released).
pub fn closed_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a free loopback port");
    listener.local_addr().expect("its address").port()
}

/// A real `sshd` on 127.0.0.1, started by the test and killed (by its PID) when dropped.
///
/// It accepts any public key for `root` (its `AuthorizedKeysCommand` echoes the key offered),
/// and logs every login, with the key's fingerprint, to [`Sshd::log`], so a test can check which
/// key was used.
pub struct Sshd {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl Sshd {
    /// Starts a server on a free loopback port and waits until it sends its banner.
    pub fn start() -> Self {
        let mut dir = tempfile::tempdir().expect("temp dir");
        let host_key = dir.path().join("host_ed25519");
        let made = Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-f"])
            .arg(&host_key)
            .status()
            .expect("run ssh-keygen");
        assert!(made.success(), "ssh-keygen failed");
        // sshd's privilege separation needs this directory; a Debian package makes it at boot.
        std::fs::create_dir_all("/run/sshd").expect("create /run/sshd");

        // Another process may take the port between choosing and binding it: try again then.
        for _ in 0..5 {
            let port = closed_port();
            let config = dir.path().join("sshd_config");
            std::fs::write(&config, config_text(port, &host_key, dir.path()))
                .expect("write sshd_config");
            let log = std::fs::File::create(dir.path().join("sshd.log")).expect("log file");
            let child = Command::new("/usr/sbin/sshd")
                .args(["-D", "-e", "-f"])
                .arg(&config)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("start /usr/sbin/sshd (apt-get install openssh-server)");
            let mut sshd = Sshd { child, port, dir };
            if sshd.wait_for_banner() {
                return sshd;
            }
            let _ = sshd.child.kill();
            let _ = sshd.child.wait();
            dir = std::mem::replace(&mut sshd.dir, tempfile::tempdir().expect("temp dir"));
        }
        panic!("sshd did not start on a loopback port");
    }

    /// Its loopback port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:<port>`.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// What it logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("sshd.log")).unwrap_or_default()
    }

    /// The fingerprint (`SHA256:...`) of its host key, as `ssh-keygen -l` shows it.
    pub fn host_key_fingerprint(&self) -> String {
        let output = Command::new("ssh-keygen")
            .arg("-lf")
            .arg(self.dir.path().join("host_ed25519.pub"))
            .output()
            .expect("run ssh-keygen");
        String::from_utf8_lossy(&output.stdout)
            .split_whitespace()
            .nth(1)
            .expect("a fingerprint")
            .to_owned()
    }

    /// A folder of the test's, for playbooks to write into.
    pub fn scratch(&self) -> PathBuf {
        let path = self.dir.path().join("scratch");
        std::fs::create_dir_all(&path).expect("scratch folder");
        path
    }

    fn wait_for_banner(&mut self) -> bool {
        let start = Instant::now();
        while start.elapsed() < READY_WITHIN {
            if let Ok(Some(_)) = self.child.try_wait() {
                return false;
            }
            if let Ok(stream) = TcpStream::connect(("127.0.0.1", self.port)) {
                let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
                let mut banner = String::new();
                if BufReader::new(stream).read_line(&mut banner).is_ok()
                    && banner.starts_with("SSH-")
                {
                    return true;
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn config_text(port: u16, host_key: &Path, dir: &Path) -> String {
    format!(
        "Port {port}\n\
         ListenAddress 127.0.0.1\n\
         HostKey {}\n\
         PidFile {}\n\
         AuthorizedKeysFile none\n\
         AuthorizedKeysCommand /usr/bin/echo %t %k\n\
         AuthorizedKeysCommandUser root\n\
         PermitRootLogin prohibit-password\n\
         PasswordAuthentication no\n\
         KbdInteractiveAuthentication no\n\
         UsePAM no\n\
         Subsystem sftp internal-sftp\n\
         LogLevel VERBOSE\n",
        host_key.display(),
        dir.join("sshd.pid").display(),
    )
}
