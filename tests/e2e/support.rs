//! Running the `overture` binary against a fresh data directory, and checking histories.
//!
//! Every deployment stream a test leaves in its data directory is checked when its [`Overture`]
//! is dropped: folding it through the aggregate twice yields the same state and the same
//! decisions at every prefix ([`assert_deterministic`]).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};

use serde_json::Value;

/// A data directory and a folder for blueprints, removed when dropped.
pub struct Overture {
    dir: tempfile::TempDir,
}

impl Overture {
    pub fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("temp dir"),
        }
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Writes a blueprint file and returns its path.
    pub fn blueprint(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).expect("write blueprint");
        path
    }

    /// A command for the binary on this data directory.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_overture"));
        command.arg("--data-dir").arg(self.data_dir()).args(args);
        command
            .env_remove("OVERTURE_DATA_DIR")
            .env_remove("OVERTURE_TENANT");
        command
    }

    /// Runs the binary and waits for it.
    pub fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("run overture")
    }

    /// Runs the binary and parses its stdout as JSON.
    pub fn json(&self, args: &[&str]) -> Value {
        let output = self.run(args);
        assert!(
            output.status.success(),
            "overture {args:?} failed: {}",
            text(&output.stderr)
        );
        serde_json::from_slice(&output.stdout).expect("JSON on stdout")
    }

    /// The engine's public key, as `overture key` prints it (made on first use).
    pub fn key(&self) -> String {
        let output = self.run(&["key"]);
        assert!(output.status.success(), "{}", text(&output.stderr));
        text(&output.stdout)
            .lines()
            .next()
            .expect("a key")
            .to_owned()
    }

    /// `lines` (events as `overture export` writes them, without its trailer) as an export this
    /// engine signed: each stream's chain linked anew in line order, the positions numbered from
    /// 1, and the trailer signed with this engine's key by `ssh-keygen -Y sign`, as whoever
    /// holds the key could sign an edited history. Import it with `--trust` of [`Self::key`].
    pub fn signed_export(&self, lines: &[Value]) -> String {
        use overture_events::chain::{canonical_json, seal, GENESIS};
        let mut heads: BTreeMap<String, String> = BTreeMap::new();
        let mut out = String::new();
        for (n, line) in lines.iter().enumerate() {
            let mut line = line.clone();
            line.as_object_mut().expect("an object").remove("position");
            let mut envelope: overture_events::Envelope =
                serde_json::from_value(line).expect("an event line");
            let head = heads
                .entry(envelope.stream.clone())
                .or_insert_with(|| GENESIS.to_owned());
            *head = seal(&mut envelope, head);
            let mut line = serde_json::to_value(&envelope).expect("JSON");
            line["position"] = serde_json::json!(n + 1);
            out.push_str(&format!("{line}\n"));
        }
        let statement =
            serde_json::json!({"events": lines.len(), "heads": heads, "key": self.key()});
        let mut signing = Command::new("ssh-keygen")
            .args(["-q", "-Y", "sign", "-n", "overture-export", "-f"])
            .arg(self.data_dir().join("engine-key"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("ssh-keygen runs");
        std::io::Write::write_all(
            &mut signing.stdin.take().expect("stdin"),
            &canonical_json(&statement),
        )
        .expect("the statement is written");
        let signed = signing.wait_with_output().expect("ssh-keygen ends");
        assert!(signed.status.success(), "{}", text(&signed.stderr));
        let mut trailer = statement;
        trailer["signature"] = Value::String(text(&signed.stdout));
        out.push_str(&format!("{}\n", serde_json::json!({ "trailer": trailer })));
        out
    }

    /// A fresh data directory with one blueprint file written beside it; returns both.
    pub fn with_blueprint(name: &str, text: &str) -> (Self, PathBuf) {
        let overture = Self::new();
        let file = overture.blueprint(name, text);
        (overture, file)
    }

    /// Deploys a blueprint file and asserts it succeeded (exit code 0, showing the progress
    /// otherwise); returns the final status.
    pub fn deploy_ok(&self, file: &Path, extra: &[&str]) -> Value {
        exited(self.deploy(file, extra), 0)
    }

    /// Deploys a blueprint file and asserts it failed (exit code 1, status `failed`, showing the
    /// progress otherwise); returns the final status.
    pub fn deploy_failed(&self, file: &Path, extra: &[&str]) -> Value {
        let status = exited(self.deploy(file, extra), 1);
        assert_eq!(status["status"], "failed");
        status
    }

    /// Deploys with one secret, as [`deploy_with_secret`](Self::deploy_with_secret), and asserts
    /// it succeeded (exit code 0, showing the progress otherwise); returns the final status.
    pub fn deploy_ok_with_secret(&self, file: &Path, name: &str, value: &str) -> Value {
        exited(self.deploy_with_secret(file, name, value), 0)
    }

    /// Deploys a blueprint file with `--json`; returns the exit code and the final status.
    pub fn deploy(&self, file: &Path, extra: &[&str]) -> (i32, Value, Output) {
        let mut args = vec!["deploy", file.to_str().expect("utf-8 path"), "--json"];
        args.extend_from_slice(extra);
        let output = self.run(&args);
        let status = serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
        (output.status.code().unwrap_or(-1), status, output)
    }

    /// Deploys a blueprint file with `--json` and one secret, whose value reaches `overture`
    /// through an environment variable as a user's would; returns as [`deploy`](Self::deploy).
    pub fn deploy_with_secret(&self, file: &Path, name: &str, value: &str) -> (i32, Value, Output) {
        let output = self
            .command(&["deploy", file.to_str().expect("utf-8 path"), "--json"])
            .arg("--secret")
            .arg(format!("{name}=OVERTURE_E2E_SECRET"))
            .env("OVERTURE_E2E_SECRET", value)
            .output()
            .expect("run overture");
        let status = serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
        (output.status.code().unwrap_or(-1), status, output)
    }

    /// Starts `overture deploy FILE` in the background and returns once a progress line contains
    /// every one of `words`.
    pub fn deploy_until(&self, file: &Path, words: &[&str]) -> Deploying {
        Deploying::spawn(
            self.command(&["deploy", file.to_str().expect("utf-8 path")]),
            words,
        )
    }

    /// What each of `commands` printed: its stdout, then its stderr.
    pub fn printed(&self, commands: &[Vec<&str>]) -> Vec<String> {
        let mut shown = Vec::new();
        for args in commands {
            let out = self.run(args);
            shown.push(text(&out.stdout));
            shown.push(text(&out.stderr));
        }
        shown
    }

    /// Where a deployment's secrets are sealed while it runs.
    pub fn seal(&self, id: &str) -> PathBuf {
        self.data_dir().join("seals").join(format!("{id}.json"))
    }

    /// Every deployment's id in the data directory, as `list --json` prints them.
    pub fn deployment_ids(&self) -> Vec<String> {
        self.json(&["list", "--json"])
            .as_array()
            .expect("a list")
            .iter()
            .map(|view| view["id"].as_str().expect("an id").to_owned())
            .collect()
    }

    /// Every event of a deployment, as `events --json` prints them.
    pub fn events(&self, id: &str) -> Vec<Value> {
        let output = self.run(&["events", id, "--json"]);
        assert!(
            output.status.success(),
            "events failed: {}",
            text(&output.stderr)
        );
        text(&output.stdout)
            .lines()
            .map(|line| serde_json::from_str(line).expect("one envelope per line"))
            .collect()
    }
}

impl Drop for Overture {
    /// Checks every deployment stream the test produced, unless the test failed already (a
    /// second panic would abort the whole suite) or never made a data directory.
    fn drop(&mut self) {
        // What an engine the test killed left, as `overture resume` would clear it: its
        // sandboxes' cgroups and workspace mounts are the host's, not the temporary directory's.
        let sandboxes = overture_sandbox::Bubblewrap::new(self.data_dir().join("sandboxes"));
        let _ = sandboxes.kill_leftovers();
        let _ = sandboxes.unmount_leftovers();
        if std::thread::panicking() || !self.data_dir().join("overture.db").exists() {
            return;
        }
        for id in self.deployment_ids() {
            assert_deterministic(&self.events(&id));
        }
    }
}

/// The final status of a deploy, once its exit code is asserted to be `expected`; a different
/// code fails the test showing the progress printed and the status.
fn exited((code, status, output): (i32, Value, Output), expected: i32) -> Value {
    assert_eq!(
        code,
        expected,
        "overture deploy exited {code}, not {expected}:\n{}\n{status}",
        text(&output.stderr)
    );
    status
}

/// A deployment's id, from its status.
pub fn id_of(status: &Value) -> String {
    status["id"]
        .as_str()
        .expect("the status has an id")
        .to_owned()
}

/// Asserts one step of a final status ended as `ended` after `attempts` attempts.
pub fn assert_step(status: &Value, step: &str, ended: &str, attempts: u64) {
    let found = &status["steps"][step];
    assert_eq!(
        (found["status"].as_str(), found["attempts"].as_u64()),
        (Some(ended), Some(attempts)),
        "step {step}: {status}"
    );
}

/// Asserts no one of `shown` holds `secret`.
pub fn assert_not_shown(shown: &[String], secret: &str) {
    for (i, printed) in shown.iter().enumerate() {
        assert!(
            !printed.contains(secret),
            "output {i} shows the secret:\n{printed}"
        );
    }
}

/// The envelopes of `events --json` lines, as the log holds them.
pub fn envelopes(events: &[Value]) -> Vec<overture_events::Envelope> {
    events
        .iter()
        .map(|event| serde_json::from_value(event.clone()).expect("an envelope"))
        .collect()
}

/// Checks that folding a deployment's stream through the aggregate is deterministic: two
/// independent folds reach the same state, call for the same actions and decide the same on
/// advancing at every instant the stream recorded, after every prefix of it.
pub fn assert_deterministic(events: &[Value]) {
    let records = envelopes(events);
    let history = overture_domain::history::events_of(&records).expect("deployment events");
    let moments: Vec<_> = records.iter().map(|r| r.metadata.recorded_at).collect();
    if let Err(divergence) = overture_domain::history::check_determinism(&history, &moments) {
        let stream = records.first().map(|r| r.stream.as_str()).unwrap_or("?");
        panic!("{stream}: {divergence}: {:?}", types(events));
    }
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The types of a history, in order.
pub fn types(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["type"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// The events of one step, as (type, attempt).
pub fn step_events(events: &[Value], step: &str) -> Vec<(String, u64)> {
    events
        .iter()
        .filter(|e| e["data"]["step"] == step)
        .map(|e| {
            (
                e["type"].as_str().unwrap_or_default().to_owned(),
                e["data"]["attempt"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

/// Checks what every history must obey:
/// revisions are gapless and ids unique; every attempt is scheduled, then started, then has
/// one outcome; a step starts only after every step it needs has succeeded; the deployment
/// ends once, last, and only after its secrets were purged.
pub fn assert_causal(events: &[Value], needs: &BTreeMap<&str, Vec<&str>>) {
    let mut ids = HashSet::new();
    for (index, event) in events.iter().enumerate() {
        assert_eq!(
            event["revision"].as_u64(),
            Some(index as u64),
            "revisions are gapless"
        );
        assert!(
            ids.insert(event["id"].as_str().expect("id").to_owned()),
            "event ids are unique"
        );
        for field in [
            "tenant",
            "actor",
            "$correlationId",
            "$causationId",
            "recorded_at",
        ] {
            assert!(event["metadata"][field].is_string(), "metadata has {field}");
        }
    }
    let mut scheduled: HashMap<(String, u64), usize> = HashMap::new();
    let mut started: HashMap<(String, u64), usize> = HashMap::new();
    let mut outcomes: HashMap<(String, u64), usize> = HashMap::new();
    let mut succeeded: HashMap<String, usize> = HashMap::new();
    for (at, event) in events.iter().enumerate() {
        let data = &event["data"];
        let step = data["step"].as_str().unwrap_or_default().to_owned();
        let attempt = data["attempt"].as_u64().unwrap_or(0);
        match event["type"].as_str().unwrap_or_default() {
            "StepScheduled" => assert!(
                scheduled.insert((step, attempt), at).is_none(),
                "scheduled once"
            ),
            "StepRetryScheduled" => {
                let next = data["next_attempt"].as_u64().expect("next attempt");
                assert!(
                    scheduled.insert((step, next), at).is_none(),
                    "retry scheduled once"
                );
            }
            "StepStarted" => {
                let key = (step.clone(), attempt);
                let when = scheduled
                    .get(&key)
                    .unwrap_or_else(|| panic!("{key:?} started before it was scheduled"));
                assert!(*when < at);
                assert!(started.insert(key, at).is_none(), "started once");
                for need in needs.get(step.as_str()).into_iter().flatten() {
                    let done = succeeded
                        .get(*need)
                        .unwrap_or_else(|| panic!("{step} started before {need} succeeded"));
                    assert!(*done < at);
                }
            }
            "StepSucceeded" | "StepAttemptFailed" => {
                let key = (step.clone(), attempt);
                let when = started
                    .get(&key)
                    .unwrap_or_else(|| panic!("{key:?} has an outcome but never started"));
                assert!(*when < at);
                assert!(
                    outcomes.insert(key, at).is_none(),
                    "one outcome per attempt"
                );
                if event["type"] == "StepSucceeded" {
                    succeeded.insert(step, at);
                }
            }
            _ => {}
        }
    }
    let all = types(events);
    let endings: Vec<usize> = all
        .iter()
        .enumerate()
        .filter(|(_, t)| t.starts_with("Deployment") && *t != "DeploymentRequested")
        .map(|(i, _)| i)
        .collect();
    assert_eq!(
        endings,
        vec![events.len() - 1],
        "the deployment ends once, last: {all:?}"
    );
    let purged = all
        .iter()
        .position(|t| t == "SecretsPurged")
        .expect("secrets purged");
    assert!(
        purged < events.len() - 1,
        "secrets are purged before the end"
    );
}

/// Processes whose command line contains `marker`.
pub fn processes_with(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        if !entry
            .file_name()
            .to_string_lossy()
            .chars()
            .all(|c| c.is_ascii_digit())
        {
            continue;
        }
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if cmdline.contains(marker) {
                found.push(format!(
                    "{}: {cmdline}",
                    entry.file_name().to_string_lossy()
                ));
            }
        }
    }
    found
}

/// Waits (at most `deadline`) for every process with `marker` to be gone; returns those left.
/// A killed process disappears asynchronously, so a scan right after the kill may still see it.
pub fn gone_within(marker: &str, deadline: std::time::Duration) -> Vec<String> {
    let start = std::time::Instant::now();
    loop {
        let left = processes_with(marker);
        if left.is_empty() || start.elapsed() > deadline {
            return left;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// An `overture deploy` running in the background; killed (by its PID) when dropped.
pub struct Deploying {
    /// The deployment's id.
    pub id: String,
    child: Child,
    /// Every progress line printed after the awaited one.
    later: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    drain: Option<std::thread::JoinHandle<()>>,
}

impl Deploying {
    /// Starts `command` (an `overture deploy`) and returns once a progress line contains every
    /// one of `words`.
    pub fn spawn(mut command: Command, words: &[&str]) -> Self {
        let child = command
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start overture deploy");
        // From here on, dropping it (a failed assertion included) kills and reaps the engine.
        let mut deploying = Deploying {
            id: String::new(),
            child,
            later: Default::default(),
            drain: None,
        };
        let stderr = deploying.child.stderr.take().expect("stderr");
        let mut lines = BufReader::new(stderr).lines();
        while let Some(line) = lines.next() {
            let line = line.expect("progress line");
            if let Some(rest) = line.strip_prefix("deployment ") {
                deploying.id = rest.trim().to_owned();
            }
            if words.iter().all(|word| line.contains(word)) {
                assert!(
                    !deploying.id.is_empty(),
                    "the deployment id is printed first"
                );
                // The engine goes on printing progress: keep its pipe drained so it never blocks.
                let later = deploying.later.clone();
                deploying.drain = Some(std::thread::spawn(move || {
                    for line in lines.map_while(Result::ok) {
                        later.lock().expect("progress lines").push(line);
                    }
                }));
                return deploying;
            }
        }
        panic!("overture deploy ended without printing a line with {words:?}");
    }

    /// Waits for the deployment to end; returns the exit code.
    pub fn wait(mut self) -> i32 {
        self.child
            .wait()
            .expect("wait for overture deploy")
            .code()
            .unwrap_or(-1)
    }

    /// Waits at most `deadline` for the deployment to end; returns the exit code. An engine
    /// still running then is a failure of the test (and is killed when dropped).
    pub fn wait_within(&mut self, deadline: std::time::Duration) -> i32 {
        let start = std::time::Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for overture deploy") {
                if let Some(drain) = self.drain.take() {
                    drain.join().expect("progress drained");
                }
                return status.code().unwrap_or(-1);
            }
            assert!(
                start.elapsed() < deadline,
                "overture deploy still runs after {deadline:?}"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// The progress lines printed after the one [`spawn`](Self::spawn) waited for; all of
    /// them once [`wait_within`](Self::wait_within) has returned.
    pub fn later_lines(&self) -> Vec<String> {
        self.later.lock().expect("progress lines").clone()
    }

    /// Sends `signal` to the engine, as a user's Ctrl-C or a service manager would.
    pub fn signal(&self, signal: i32) {
        let pid = i32::try_from(self.child.id()).expect("pid");
        // SAFETY: signals the child this test started, by its PID; it is not reaped yet.
        assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
    }

    /// Kills the engine with SIGKILL, as a crash would, and reaps it.
    pub fn kill(mut self) {
        self.kill_now();
    }

    fn kill_now(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let pid = i32::try_from(self.child.id()).expect("pid");
            // SAFETY: signals the child this test started, by its PID, before reaping it.
            assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
        }
        let _ = self.child.wait();
    }
}

impl Drop for Deploying {
    fn drop(&mut self) {
        self.kill_now();
    }
}

/// Every file under `dir` whose bytes contain `needle`.
pub fn files_containing(dir: &Path, needle: &[u8]) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(files_containing(&path, needle));
        } else if let Ok(bytes) = std::fs::read(&path) {
            if bytes.windows(needle.len()).any(|w| w == needle) {
                found.push(path.display().to_string());
            }
        }
    }
    found
}

/// A marker unique to one test run, to find its processes.
pub fn marker(name: &str) -> String {
    format!("{name}-{}", uuid::Uuid::new_v4().simple())
}

/// An `overture engine` running on a test's data directory; stopped (by its PID) when dropped.
pub struct Serving {
    child: Child,
    output: Arc<Mutex<Vec<String>>>,
    drain: Option<std::thread::JoinHandle<()>>,
}

impl Serving {
    /// Starts the engine and returns once it says it serves the directory.
    pub fn start(overture: &Overture) -> Self {
        let mut child = overture
            .command(&["engine"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start overture engine");
        let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
        let output = Arc::new(Mutex::new(Vec::new()));
        for line in lines.by_ref() {
            let line = line.expect("a line from the engine");
            let ready = line.starts_with("serving deployments in");
            output.lock().expect("engine output").push(line);
            if ready {
                let kept = Arc::clone(&output);
                let drain = std::thread::spawn(move || {
                    for line in lines.map_while(Result::ok) {
                        kept.lock().expect("engine output").push(line);
                    }
                });
                return Self {
                    child,
                    output,
                    drain: Some(drain),
                };
            }
        }
        let _ = child.wait();
        panic!(
            "overture engine ended without serving:\n{}",
            output.lock().expect("engine output").join("\n")
        );
    }

    /// Stops the engine with SIGTERM and returns its exit code and everything it printed.
    pub fn stop(mut self) -> (i32, String) {
        let pid = i32::try_from(self.child.id()).expect("pid");
        // SAFETY: signals the child this test started, by its PID; it is not reaped yet.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
        let code = self.child.wait().expect("wait for the engine").code();
        if let Some(drain) = self.drain.take() {
            drain.join().expect("engine output drained");
        }
        let output = self.output.lock().expect("engine output").join("\n");
        (code.unwrap_or(-1), output)
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let pid = i32::try_from(self.child.id()).expect("pid");
            // SAFETY: signals the child this test started, by its PID, before reaping it.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        let _ = self.child.wait();
    }
}
