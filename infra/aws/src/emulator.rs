//! The local AWS emulator (`scripts/aws-emulator.py`: moto's server on 127.0.0.1), started as a
//! child process for the benchmark and the local tools, and the request counts it keeps.
//!
//! The tests start theirs through their own support module, which must outlive every test
//! thread; this one lives as long as the value that started it.

use std::collections::BTreeMap;
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde::Deserialize;

/// How long moto may take to start answering.
const START_WITHIN: Duration = Duration::from_secs(30);

/// The emulator could not be started or asked.
#[derive(Debug, thiserror::Error)]
pub enum EmulatorError {
    /// It could not be started (python3 or moto missing: `scripts/setup.sh` installs them).
    #[error(
        "could not start the AWS emulator {script}: {source} (scripts/setup.sh installs moto)"
    )]
    Start {
        /// The launcher.
        script: String,
        /// Why.
        source: std::io::Error,
    },
    /// It never listened.
    #[error("the AWS emulator did not listen on 127.0.0.1:{0} within {START_WITHIN:?}")]
    NeverListened(u16),
    /// Its request counts could not be read.
    #[error("could not read the AWS emulator's request counts: {0}")]
    Counts(#[from] reqwest::Error),
}

/// A running emulator, ended (by its process id) when dropped.
#[derive(Debug)]
pub struct Emulator {
    child: Child,
    endpoint: String,
}

impl Emulator {
    /// Starts `script` (`scripts/aws-emulator.py`) on a free port of 127.0.0.1 and waits until
    /// it listens.
    pub fn start(script: &Path) -> Result<Self, EmulatorError> {
        let start_failed = |source| EmulatorError::Start {
            script: script.display().to_string(),
            source,
        };
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .map_err(start_failed)?
            .port();
        let mut command = Command::new("python3");
        command
            .arg(script)
            .args(["--port", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: prctl in the child before exec touches no memory of the parent's; the
        // emulator then never outlives the process that started it, even if that one crashes.
        unsafe {
            command.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            });
        }
        let child = command.spawn().map_err(start_failed)?;
        let emulator = Self {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
        };
        let started = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if started.elapsed() > START_WITHIN {
                return Err(EmulatorError::NeverListened(port));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(emulator)
    }

    /// Its endpoint, `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// What was asked of it since it started or [`reset_requests`](Self::reset_requests).
    pub async fn requests(&self) -> Result<Requests, EmulatorError> {
        requests(&self.endpoint).await
    }

    /// Sets its request counts to zero.
    pub async fn reset_requests(&self) -> Result<(), EmulatorError> {
        reset_requests(&self.endpoint).await
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The requests an emulator served, counted by `service:Operation` (`dynamodb:Query`,
/// `sqs:SendMessage`, `kms:Decrypt`, `s3:PUT`...).
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
pub struct Requests {
    /// Requests per operation.
    pub operations: BTreeMap<String, u64>,
    /// Items touched per DynamoDB write operation (each costs at least one write unit).
    pub items_written: BTreeMap<String, u64>,
    /// The same, by the app id the client set (`AWS_SDK_UA_APP_ID`; `unnamed` without one).
    #[serde(default)]
    pub by_app: BTreeMap<String, AppRequests>,
}

/// The requests of one app.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
pub struct AppRequests {
    /// Requests per operation.
    pub operations: BTreeMap<String, u64>,
    /// The DynamoDB read request units they would cost on demand (strongly consistent).
    pub dynamodb_read_units: u64,
    /// The DynamoDB write request units they would cost on demand.
    pub dynamodb_write_units: u64,
}

impl AppRequests {
    /// Requests to `service` whose operation satisfies `matches`.
    pub fn count(&self, service: &str, matches: impl Fn(&str) -> bool) -> u64 {
        count(&self.operations, service, matches)
    }
}

fn count(operations: &BTreeMap<String, u64>, service: &str, matches: impl Fn(&str) -> bool) -> u64 {
    operations
        .iter()
        .filter_map(|(key, count)| {
            let (s, operation) = key.split_once(':')?;
            (s == service && matches(operation)).then_some(*count)
        })
        .sum()
}

impl Requests {
    /// Requests to `service` whose operation satisfies `matches`.
    pub fn count(&self, service: &str, matches: impl Fn(&str) -> bool) -> u64 {
        count(&self.operations, service, matches)
    }

    /// The requests of the app `app`; none when it asked nothing.
    pub fn of(&self, app: &str) -> AppRequests {
        self.by_app.get(app).cloned().unwrap_or_default()
    }

    /// DynamoDB items written, over every write operation.
    pub fn dynamodb_items_written(&self) -> u64 {
        self.items_written.values().sum()
    }
}

/// The request counts of the emulator at `endpoint`.
pub async fn requests(endpoint: &str) -> Result<Requests, EmulatorError> {
    Ok(reqwest::get(format!("{endpoint}/overture/requests"))
        .await?
        .error_for_status()?
        .json()
        .await?)
}

/// Sets the request counts of the emulator at `endpoint` to zero.
pub async fn reset_requests(endpoint: &str) -> Result<(), EmulatorError> {
    reqwest::Client::new()
        .post(format!("{endpoint}/overture/requests/reset"))
        .send()
        .await?
        .error_for_status()?;
    Ok(())
}
