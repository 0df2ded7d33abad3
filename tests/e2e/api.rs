//! Calling `overture serve`: a real server process on loopback ([`Server`]) and callers of its
//! HTTP API with one token each ([`Client`]), shared by [`crate::serve`], [`crate::client`] and [`crate::triggers`].

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Stdio};

use reqwest::header::ACCEPT;
use reqwest::StatusCode;
use serde_json::Value;

use crate::support::Overture;

/// A running `overture serve` on a port of its choosing; killed (by its PID) when dropped.
pub struct Server {
    child: Child,
    /// Where it listens, such as `http://127.0.0.1:40123`.
    pub url: String,
}

impl Server {
    /// Starts `overture serve` on `o`'s data directory, its callers checked by `auth_url`.
    pub fn start(o: &Overture, auth_url: &str) -> Self {
        Self::serve(o, auth_url, None)
    }

    /// Starts it as [`Server::start`] does, with `--triggers FILE`.
    pub fn with_triggers(o: &Overture, auth_url: &str, triggers: &Path) -> Self {
        Self::serve(o, auth_url, Some(triggers))
    }

    /// Starts it as [`Server::start`] does, with more flags (`--header-timeout 1`, say).
    pub fn with_flags(o: &Overture, auth_url: &str, flags: &[&str]) -> Self {
        Self::serve_with(o, auth_url, None, flags)
    }

    /// The server process's id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn serve(o: &Overture, auth_url: &str, triggers: Option<&Path>) -> Self {
        Self::serve_with(o, auth_url, triggers, &[])
    }

    /// Starts it as [`Server::start`] does, logging at `OVERTURE_LOG=info` into the file `log`.
    pub fn logging_into(o: &Overture, auth_url: &str, log: &Path) -> Self {
        let mut command = o.command(&["serve", "--addr", "127.0.0.1:0", "--auth-url", auth_url]);
        command
            .env("OVERTURE_LOG", "info")
            .stderr(std::fs::File::create(log).expect("the server's log file"));
        Self::spawn(command)
    }

    fn serve_with(o: &Overture, auth_url: &str, triggers: Option<&Path>, flags: &[&str]) -> Self {
        let mut command = o.command(&["serve", "--addr", "127.0.0.1:0", "--auth-url", auth_url]);
        if let Some(triggers) = triggers {
            command.arg("--triggers").arg(triggers);
        }
        command.args(flags);
        Self::spawn(command)
    }

    fn spawn(mut command: std::process::Command) -> Self {
        let mut child = command
            .stdout(Stdio::piped())
            .spawn()
            .expect("start overture serve");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("read the server's first line");
        let url = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("not a listening line: {line:?}"))
            .to_owned();
        Self { child, url }
    }

    /// The URL of `path` on it.
    pub fn at(&self, path: &str) -> String {
        format!("{}{path}", self.url)
    }

    /// Sends SIGTERM, as a service manager stops it, without waiting for it to exit.
    pub fn terminate(&self) {
        let pid = i32::try_from(self.child.id()).expect("pid");
        // SAFETY: signals the child this test started, by its PID; it is not reaped yet.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    }

    /// Waits for it to exit within `deadline`; returns its exit code (a failure names the signal
    /// that ended it instead).
    pub fn exited_within(&mut self, deadline: std::time::Duration) -> i32 {
        let start = std::time::Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("the server's state") {
                return status
                    .code()
                    .unwrap_or_else(|| panic!("the server did not exit by itself: {status}"));
            }
            assert!(
                start.elapsed() < deadline,
                "the server did not stop within {deadline:?}"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A caller of the API with one token.
pub struct Client {
    /// The HTTP client.
    pub http: reqwest::Client,
    /// The token it calls with.
    pub token: String,
}

impl Client {
    /// A caller with `token`.
    pub fn new(token: &str) -> Self {
        Self {
            http: reqwest::Client::new(),
            token: token.to_owned(),
        }
    }

    /// GETs `url`: the status and the body.
    pub async fn get(&self, url: &str) -> (StatusCode, String) {
        let response = self
            .http
            .get(url)
            .header("X-Auth-Token", &self.token)
            .send()
            .await
            .expect("GET");
        (response.status(), response.text().await.expect("body"))
    }

    /// POSTs `body` as JSON to `url`: the status and the body.
    pub async fn post(&self, url: &str, body: &Value) -> (StatusCode, String) {
        let response = self
            .http
            .post(url)
            .header("X-Auth-Token", &self.token)
            .json(body)
            .send()
            .await
            .expect("POST");
        (response.status(), response.text().await.expect("body"))
    }

    /// Reads a deployment's Server-Sent Events: `(id, event, data)` of each, until the stream
    /// ends or `stop` says so after an event.
    pub async fn events(
        &self,
        url: &str,
        last_event_id: Option<&str>,
        stop: impl Fn(&str, &Value) -> bool,
    ) -> Vec<(u64, String, Value)> {
        let mut request = self
            .http
            .get(url)
            .header("X-Auth-Token", &self.token)
            .header(ACCEPT, "text/event-stream");
        if let Some(id) = last_event_id {
            request = request.header("Last-Event-ID", id);
        }
        let mut response = request.send().await.expect("GET events");
        assert_eq!(response.status(), StatusCode::OK);
        let mut buffer = String::new();
        let mut seen = Vec::new();
        while let Some(chunk) = response.chunk().await.expect("a chunk") {
            buffer.push_str(std::str::from_utf8(&chunk).expect("utf-8"));
            while let Some(end) = buffer.find("\n\n") {
                let block: String = buffer.drain(..end + 2).collect();
                let (mut id, mut event, mut data) = (None, String::new(), None);
                for line in block.lines() {
                    if let Some(value) = line.strip_prefix("id:") {
                        id = Some(value.trim().parse::<u64>().expect("a revision"));
                    } else if let Some(value) = line.strip_prefix("event:") {
                        event = value.trim().to_owned();
                    } else if let Some(value) = line.strip_prefix("data:") {
                        data = Some(serde_json::from_str(value.trim()).expect("JSON data"));
                    }
                }
                // Comments (keep-alives) carry no id.
                if let (Some(id), Some(data)) = (id, data) {
                    let stop_here = stop(&event, &data);
                    seen.push((id, event, data));
                    if stop_here {
                        return seen;
                    }
                }
            }
        }
        seen
    }
}

/// A JSON body.
pub fn parsed(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

/// The error code of an error answer.
pub fn code(body: &str) -> String {
    parsed(body)["code"].as_str().unwrap_or_default().to_owned()
}

/// Every event of deployment `id`, followed over Server-Sent Events until it ends.
pub async fn streamed_all(client: &Client, server: &Server, id: &str) -> Vec<(u64, String, Value)> {
    client
        .events(
            &server.at(&format!("/v1/deployments/{id}/events")),
            None,
            |_, _| false,
        )
        .await
}
