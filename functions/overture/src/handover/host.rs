//! `overture engine`: records the deployments `deploy` processes hand over, drives them all in
//! one drive, and sends each process its own deployment's progress and end.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use anyhow::Context;
use overture_domain::projection::{project, DeploymentStatus, DeploymentView};
use overture_domain::DeploymentError;
use overture_events::{DeploymentId, LogEntry};
use overture_submit::SubmitError;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::OwnedWriteHalf;
use tokio::net::{UnixListener, UnixStream};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;

use super::{socket_path, Answer, Ask};
use crate::commands::cancel;
use crate::progress::Progress;
use crate::{lock, render, Failure};
use overture_embedded::{Engine, Joining, Scope, Watch};

/// The deployments handed over and who follows each.
struct Host {
    engine: Arc<Engine>,
    joining: Joining,
    followers: Mutex<HashMap<DeploymentId, Follower>>,
}

/// One `deploy` process following its deployment.
struct Follower {
    progress: Progress,
    /// The last revision passed on: the catch-up read and the drive may both see a record.
    through: Option<u64>,
    /// Records the drive passed before the first catch-up read, to pass on after it.
    held: Option<Vec<LogEntry>>,
    /// The deployment's status view, folded from the records passed on as the read models fold
    /// them; `None` should one not fold, and the final status then comes from the read models.
    view: Option<DeploymentView>,
    /// Told the view once the deployment has ended and every record is passed on.
    ended: Option<oneshot::Sender<Option<DeploymentView>>>,
}

impl Follower {
    fn pass(&mut self, entry: &LogEntry) {
        if let Some(held) = &mut self.held {
            held.push(entry.clone());
        } else if self
            .through
            .is_none_or(|through| entry.envelope.revision > through)
        {
            let first = self.through.is_none();
            self.through = Some(entry.envelope.revision);
            self.progress.entry(entry);
            if first || self.view.is_some() {
                self.view = project(self.view.take(), std::slice::from_ref(&entry.envelope))
                    .ok()
                    .filter(|projected| !projected.gap)
                    .and_then(|projected| projected.view);
            }
        }
    }
}

impl Host {
    fn followers(&self) -> std::sync::MutexGuard<'_, HashMap<DeploymentId, Follower>> {
        self.followers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Passes on the deployment's records the follower has not had yet, read from the log, then
    /// those the drive held back meanwhile: from then on the drive passes each one itself.
    async fn catch_up(&self, id: DeploymentId) {
        let from = self
            .followers()
            .get(&id)
            .and_then(|follower| follower.through)
            .map_or(0, |through| through + 1);
        let records = match self.engine.log.read_stream(&id.stream(), from).await {
            Ok(records) => records,
            Err(error) => {
                tracing::warn!(%id, %error, "could not pass on the deployment's records");
                Vec::new()
            }
        };
        let mut followers = self.followers();
        let Some(follower) = followers.get_mut(&id) else {
            return;
        };
        let held = follower.held.take().unwrap_or_default();
        for envelope in records {
            follower.pass(&LogEntry {
                position: 0,
                envelope,
            });
        }
        for entry in &held {
            follower.pass(entry);
        }
    }

    /// Tells the process following a deployment that it has ended, once it has its last
    /// records: the drive learns of the end from the decision that records them, before it
    /// reads them back.
    async fn ended(&self, id: DeploymentId) {
        self.catch_up(id).await;
        if let Some(Follower {
            ended: Some(ended),
            view,
            ..
        }) = self.followers().remove(&id)
        {
            let _ = ended.send(view);
        }
    }
}

/// The drive's watch: each record goes to the process following its deployment.
struct Followed(Arc<Host>);

impl Watch for Followed {
    fn entry(&mut self, entry: &LogEntry) {
        let Ok(id) = DeploymentId::from_stream(&entry.envelope.stream) else {
            return;
        };
        if let Some(follower) = self.0.followers().get_mut(&id) {
            follower.pass(entry);
        }
    }

    fn tick(&mut self, _: &overture_domain::DeploymentState) {}
}

/// Serves `data_dir` until SIGINT or SIGTERM, running at most `parallelism` steps at once: then
/// it takes no more deployments, cancels those it drives and ends once they have; a second
/// signal leaves at once.
pub async fn run(data_dir: &Path, parallelism: usize) -> Result<(), Failure> {
    let engine = Engine::open(data_dir).await?;
    engine.preflight()?;
    let _serving = lock::ServeLock::take(data_dir).map_err(|e| Failure::BadInput(e.to_string()))?;
    let _engine_lock =
        lock::EngineLock::take(data_dir, false).map_err(|e| Failure::BadInput(e.to_string()))?;
    let listener = listen(data_dir)?;
    let start = engine
        .log
        .head_position()
        .await
        .context("reading the log")?;
    let (joining, mut ended) = Joining::new(&engine);
    let host = Arc::new(Host {
        engine: Arc::clone(&engine),
        joining,
        followers: Mutex::new(HashMap::new()),
    });
    eprintln!(
        "serving deployments in {} on {}",
        data_dir.display(),
        socket_path(data_dir).display()
    );

    let mut followed = Followed(Arc::clone(&host));
    let drive = engine.drive_scope(
        Scope::Joined(&host.joining),
        parallelism,
        &mut followed,
        start,
    );
    tokio::pin!(drive);
    let mut interrupt = signal(SignalKind::interrupt()).context("listening for Ctrl-C")?;
    let mut terminate = signal(SignalKind::terminate()).context("listening for SIGTERM")?;
    let mut listener = Some(listener);
    // Each `deploy` process's conversation, each deployment's end passed on, each cancel: beside
    // the drive, which goes on meanwhile (a cancel waits for its deployment's turn, which the
    // drive may hold).
    let mut tasks = JoinSet::new();
    loop {
        while tasks.try_join_next().is_some() {}
        let name = tokio::select! {
            driven = &mut drive => {
                driven?;
                break;
            }
            Some(id) = ended.recv() => {
                let host = Arc::clone(&host);
                tasks.spawn(async move { host.ended(id).await });
                continue;
            }
            accepted = async { listener.as_ref().expect("listening").accept().await }, if listener.is_some() => {
                match accepted {
                    Ok((stream, _)) => {
                        let host = Arc::clone(&host);
                        let data_dir = data_dir.to_path_buf();
                        tasks.spawn(async move { serve(&host, &data_dir, stream).await });
                    }
                    Err(error) => tracing::warn!(%error, "could not accept a deploy process"),
                }
                continue;
            }
            _ = interrupt.recv() => "Ctrl-C",
            _ = terminate.recv() => "SIGTERM",
        };
        if listener.is_none() {
            eprintln!(
                "{name} again: leaving at once; `overture resume` will finish cancelling the \
                 deployments"
            );
            std::process::exit(cancel::LEFT_AT_ONCE);
        }
        listener = None;
        let _ = std::fs::remove_file(socket_path(data_dir));
        host.joining.close();
        let driven: Vec<DeploymentId> = host.followers().keys().copied().collect();
        eprintln!(
            "{name}: taking no more deployments, and cancelling the {} running (press Ctrl-C \
             again to leave at once)",
            driven.len()
        );
        for id in driven {
            let engine = Arc::clone(&engine);
            let reason = format!("{name} on `overture engine`");
            tasks.spawn(async move {
                match engine.cancel(id, &cancel::local_user(), &reason).await {
                    Ok(Ok(_) | Err(DeploymentError::AlreadyFinished)) => {}
                    Ok(Err(refused)) => tracing::warn!(%id, %refused, "cancel refused"),
                    Err(error) => tracing::warn!(%id, %error, "could not record the cancel"),
                }
            });
        }
    }
    // Every deployment the drive had has ended: each `deploy` process still following one hears
    // of its end before the engine stops. One handed over as the engine stopped joined no drive;
    // its `deploy` hears that the engine stopped first.
    while let Ok(id) = ended.try_recv() {
        host.ended(id).await;
    }
    host.followers().clear();
    let told = async { while tasks.join_next().await.is_some() {} };
    if tokio::time::timeout(LAST_ANSWERS, told).await.is_err() {
        tracing::warn!("stopping before every deploy process was answered");
    }
    Ok(())
}

/// How long a stopping engine waits for its last answers to reach the `deploy` processes.
const LAST_ANSWERS: std::time::Duration = std::time::Duration::from_secs(5);

/// Binds the data directory's socket, for its owner alone. A socket left by an engine that died
/// is replaced: the serve lock says no other engine serves the directory.
fn listen(data_dir: &Path) -> Result<UnixListener, Failure> {
    use std::os::unix::fs::PermissionsExt;
    let path = socket_path(data_dir);
    match std::fs::remove_file(&path) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
            return Err(Failure::Engine(anyhow::Error::new(error).context(format!(
                "removing the socket left in {}",
                path.display()
            ))))
        }
        _ => {}
    }
    let listener =
        UnixListener::bind(&path).with_context(|| format!("listening on {}", path.display()))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("making {} its owner's alone", path.display()))?;
    Ok(listener)
}

/// One `deploy` process: records its deployment, joins it to the drive, and answers with its
/// progress and its end. A process that goes away leaves its deployment driven all the same.
async fn serve(host: &Host, data_dir: &Path, stream: UnixStream) {
    let (read, mut write) = stream.into_split();
    let mut asks = BufReader::new(read).lines();
    let handed = match asks.next_line().await {
        Ok(Some(line)) => match serde_json::from_str::<Ask>(&line) {
            Ok(Ask::Deploy(handed)) => handed,
            Ok(Ask::Cancel { .. }) | Err(_) => {
                let error = "expected a deployment first".to_owned();
                let _ = answer(&mut write, &Answer::Failed { error }).await;
                return;
            }
        },
        _ => return,
    };
    let json = handed.json;
    let submission = handed.into_submission();
    let requested_by = submission.requested_by.clone();
    let id = match host.engine.submit(submission).await {
        Ok(id) => id,
        Err(SubmitError::Invalid(problems)) => {
            let problems = problems.0.iter().map(ToString::to_string).collect();
            let _ = answer(&mut write, &Answer::Refused { problems }).await;
            return;
        }
        Err(SubmitError::Log(taken @ overture_kit::LogError::NameTaken { .. })) => {
            let problems = vec![format!("--name: {taken}")];
            let _ = answer(&mut write, &Answer::Refused { problems }).await;
            return;
        }
        Err(other) => {
            let error = other.to_string();
            let _ = answer(&mut write, &Answer::Failed { error }).await;
            return;
        }
    };
    // Held while this engine drives it, so `overture cancel` leaves the cancel to it.
    let _driving = lock::DriveLock::take(data_dir, id);
    let (lines, mut progress) = mpsc::unbounded_channel();
    let (ended, mut has_ended) = oneshot::channel();
    host.followers().insert(
        id,
        Follower {
            progress: Progress::sending(lines),
            through: None,
            held: Some(Vec::new()),
            view: None,
            ended: Some(ended),
        },
    );
    host.joining.join(id);
    let mut gone = answer(&mut write, &Answer::Recorded { id }).await.is_err();
    host.catch_up(id).await;
    let mut asking = true;
    let folded = loop {
        tokio::select! {
            Some(line) = progress.recv() => {
                gone = gone || pass_on(&mut write, line, &mut progress).await.is_err();
            }
            // Dropped unsent: the engine stops before the deployment ended. The connection
            // closes, and `deploy` says so.
            view = &mut has_ended => match view {
                Ok(view) => break view,
                Err(_) => return,
            },
            ask = asks.next_line(), if asking => match ask.ok().flatten().map(|line| serde_json::from_str::<Ask>(&line)) {
                Some(Ok(Ask::Cancel { reason })) => {
                    match host.engine.cancel(id, &requested_by, &reason).await {
                        Ok(Ok(_) | Err(DeploymentError::AlreadyFinished)) => {}
                        Ok(Err(refused)) => tracing::warn!(%id, %refused, "cancel refused"),
                        Err(error) => tracing::warn!(%id, %error, "could not record the cancel"),
                    }
                }
                Some(_) => {}
                None => asking = false,
            },
        }
    };
    if let Ok(line) = progress.try_recv() {
        gone = gone || pass_on(&mut write, line, &mut progress).await.is_err();
    }
    if gone {
        return;
    }
    // The view folded on the way holds every record up to the end, as the read models will.
    let view = match folded {
        Some(view) => Ok(view),
        None => host.engine.settled(id).await.map(|(_, view)| view),
    };
    let end = match view {
        Ok(view) => Answer::Ended {
            status: if json {
                format!("{}\n", render::status_json(&view))
            } else {
                render::status(&view)
            },
            succeeded: view.status == DeploymentStatus::Succeeded,
        },
        Err(error) => Answer::Failed {
            error: error.to_string(),
        },
    };
    let _ = answer(&mut write, &end).await;
}

/// Sends `line` and every progress line already waiting behind it, in one write.
async fn pass_on(
    write: &mut OwnedWriteHalf,
    line: String,
    waiting: &mut mpsc::UnboundedReceiver<String>,
) -> std::io::Result<()> {
    let mut lines = Vec::new();
    let mut next = Some(line);
    while let Some(line) = next {
        encode(&Answer::Progress { line }, &mut lines)?;
        next = waiting.try_recv().ok();
    }
    write.write_all(&lines).await
}

/// Writes one answer line.
async fn answer(write: &mut OwnedWriteHalf, answer: &Answer) -> std::io::Result<()> {
    let mut line = Vec::new();
    encode(answer, &mut line)?;
    write.write_all(&line).await
}

/// Appends `answer` to `lines` as one line of JSON.
fn encode(answer: &Answer, lines: &mut Vec<u8>) -> std::io::Result<()> {
    serde_json::to_writer(&mut *lines, answer).map_err(std::io::Error::other)?;
    lines.push(b'\n');
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use overture_domain::blueprint::parse;
    use overture_events::{DeploymentEvent, Envelope, Metadata};
    use uuid::Uuid;

    use super::*;

    fn entry(id: DeploymentId, revision: u64, event: DeploymentEvent) -> LogEntry {
        LogEntry {
            position: revision + 1,
            envelope: Envelope {
                stream: id.stream(),
                revision,
                id: Uuid::now_v7(),
                event_type: event.event_type().into(),
                data: event.data(),
                metadata: Metadata {
                    tenant: "acme".into(),
                    actor: "test".into(),
                    correlation_id: id.uuid(),
                    causation_id: id.uuid(),
                    recorded_at: chrono::DateTime::UNIX_EPOCH,
                    previous: None,
                    hash: None,
                },
            },
        }
    }

    /// A deployment of one `noop` step, from its request to its success.
    fn history(id: DeploymentId) -> Vec<LogEntry> {
        let blueprint = parse("name: app\nsteps:\n  only: { run: noop }\n")
            .expect("a valid blueprint")
            .snapshot;
        let events = vec![
            DeploymentEvent::DeploymentRequested {
                triggered_by: None,
                tenant: "acme".into(),
                requested_by: "ana".into(),
                trigger: "cli".into(),
                source: "app.yaml".into(),
                blueprint,
                blueprint_hash: "h".into(),
                params: BTreeMap::new(),
                cloud: None,
                name: None,
            },
            DeploymentEvent::StepScheduled {
                step: "only".into(),
                attempt: 1,
                not_before: chrono::DateTime::UNIX_EPOCH,
            },
            DeploymentEvent::StepStarted {
                step: "only".into(),
                attempt: 1,
                sandbox: "s".into(),
                lease_until: None,
                fingerprint: None,
            },
            DeploymentEvent::StepSucceeded {
                step: "only".into(),
                attempt: 1,
                outputs: BTreeMap::new(),
                duration_ms: 0,
            },
            DeploymentEvent::SecretsPurged {},
            DeploymentEvent::DeploymentSucceeded {},
        ];
        (0..)
            .zip(events)
            .map(|(revision, event)| entry(id, revision, event))
            .collect()
    }

    fn following() -> (Follower, mpsc::UnboundedReceiver<String>) {
        let (lines, sent) = mpsc::unbounded_channel();
        let follower = Follower {
            progress: Progress::sending(lines),
            through: None,
            held: Some(Vec::new()),
            view: None,
            ended: None,
        };
        (follower, sent)
    }

    fn lines(sent: &mut mpsc::UnboundedReceiver<String>) -> Vec<String> {
        std::iter::from_fn(|| sent.try_recv().ok())
            .map(|line| {
                line.split_once("] ")
                    .map_or(line.clone(), |(_, text)| text.trim().to_owned())
            })
            .collect()
    }

    #[test]
    fn each_record_is_passed_on_once_in_order_whoever_reads_it_first() {
        let id = DeploymentId::from_uuid(Uuid::now_v7());
        let records = history(id);
        let (mut follower, mut sent) = following();
        // The drive passes the last three before the catch-up read, which holds the first four.
        for record in &records[3..] {
            follower.pass(record);
        }
        assert!(lines(&mut sent).is_empty(), "held until the catch-up");
        let held = follower.held.take().unwrap_or_default();
        for record in records[..4].iter().chain(&held) {
            follower.pass(record);
        }
        // And the drive passes one again, as a later catch-up would.
        follower.pass(&records[5]);
        assert_eq!(
            lines(&mut sent),
            [
                "deployment of `app` for tenant `acme`: 1 steps",
                "only                 scheduled",
                "only                 started (attempt 1)",
                "only                 succeeded in 0ms",
                "secrets purged",
                "deployment succeeded",
            ]
        );
        let view = follower.view.expect("the view folded on the way");
        assert_eq!(view.status, DeploymentStatus::Succeeded);
        assert_eq!(view.revision, 5);
    }
}
