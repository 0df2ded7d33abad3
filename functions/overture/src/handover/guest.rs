//! The `deploy` side: hands the deployment to the engine serving the data directory, when one
//! does, and prints what it answers as `deploy` prints a deployment it drives itself.

use std::io::Write;
use std::path::Path;

use anyhow::Context;
use overture_events::DeploymentId;
use overture_submit::Submission;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::signal::unix::{signal, SignalKind};

use super::{socket_path, Answer, Ask, Handed};
use crate::commands::cancel;
use crate::input::shown;
use crate::Failure;

/// Hands `submission` (read from `file`) to the engine serving `data_dir` and follows it to its
/// end. `None` when no engine serves the directory: `deploy` then drives it itself.
pub async fn hand_over(
    data_dir: &Path,
    file: &Path,
    submission: &Submission,
    json: bool,
) -> Option<Result<(), Failure>> {
    // No socket, one an engine that died left, or a path too long for one: nobody serves.
    let stream = UnixStream::connect(socket_path(data_dir)).await.ok()?;
    Some(follow(stream, data_dir, file, submission, json).await)
}

/// Sends the deployment, then prints its progress and its end. The first Ctrl-C (or SIGTERM)
/// asks the engine to cancel it and goes on following; a second one leaves at once.
async fn follow(
    stream: UnixStream,
    data_dir: &Path,
    file: &Path,
    submission: &Submission,
    json: bool,
) -> Result<(), Failure> {
    let (read, mut write) = stream.into_split();
    let deploy = Ask::Deploy(Box::new(Handed::new(submission, json)));
    ask(&mut write, &deploy)
        .await
        .context("handing the deployment to the engine")?;
    let mut answers = BufReader::new(read).lines();
    let mut interrupt = signal(SignalKind::interrupt()).context("listening for Ctrl-C")?;
    let mut terminate = signal(SignalKind::terminate()).context("listening for SIGTERM")?;
    let mut id: Option<DeploymentId> = None;
    let mut cancelling = false;
    // Progress lines that arrived together are printed in one write.
    let mut progress = String::new();
    loop {
        let name = tokio::select! {
            line = answers.next_line() => {
                let line = line.context("reading the engine's answer")?;
                let Some(line) = line else {
                    return Err(Failure::Engine(anyhow::anyhow!(stopped(data_dir, id))));
                };
                let answer: Answer =
                    serde_json::from_str(&line).context("reading the engine's answer")?;
                if !matches!(answer, Answer::Progress { .. }) && !progress.is_empty() {
                    let _ = std::io::stderr().write_all(progress.as_bytes());
                    progress.clear();
                }
                match answer {
                    Answer::Recorded { id: recorded } => {
                        eprintln!("deployment {recorded}");
                        id = Some(recorded);
                    }
                    Answer::Progress { line } => {
                        progress.push_str(&line);
                        if answers.get_ref().buffer().is_empty() {
                            let _ = std::io::stderr().write_all(progress.as_bytes());
                            progress.clear();
                        }
                    }
                    Answer::Ended { status, succeeded } => {
                        out!("{status}");
                        return match succeeded {
                            true => Ok(()),
                            false => Err(Failure::Unsuccessful(String::new())),
                        };
                    }
                    Answer::Refused { problems } => {
                        let shown = shown(file);
                        let problems: Vec<String> =
                            problems.iter().map(|p| format!("{shown}: {p}")).collect();
                        return Err(Failure::BadInput(problems.join("\n")));
                    }
                    Answer::Failed { error } => {
                        return Err(Failure::Engine(anyhow::anyhow!(
                            "the engine serving {} could not deploy {}: {error}",
                            data_dir.display(),
                            shown(file)
                        )))
                    }
                }
                continue;
            }
            _ = interrupt.recv() => "Ctrl-C",
            _ = terminate.recv() => "SIGTERM",
        };
        let which = id.map_or_else(
            || "the deployment".to_owned(),
            |id| format!("deployment {id}"),
        );
        if cancelling {
            eprintln!(
                "{name} again: leaving at once; the engine serving {} finishes cancelling {which}",
                data_dir.display()
            );
            std::process::exit(cancel::LEFT_AT_ONCE);
        }
        cancelling = true;
        eprintln!(
            "{name}: cancelling {which}: killing its running steps, closing its bastion and \
             purging its secrets (press Ctrl-C again to leave at once)"
        );
        let reason = format!("{name} on `overture deploy`");
        ask(&mut write, &Ask::Cancel { reason })
            .await
            .context("asking the engine to cancel")?;
    }
}

/// Why following ended early: the engine went away.
fn stopped(data_dir: &Path, id: Option<DeploymentId>) -> String {
    match id {
        Some(id) => format!(
            "the engine serving {} stopped before deployment {id} ended; `overture status {id}` \
             shows where it stands, and `overture resume` carries it on",
            data_dir.display()
        ),
        None => format!(
            "the engine serving {} stopped before it recorded the deployment",
            data_dir.display()
        ),
    }
}

/// Writes one ask line.
async fn ask(write: &mut tokio::net::unix::OwnedWriteHalf, ask: &Ask) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(ask).map_err(std::io::Error::other)?;
    line.push(b'\n');
    write.write_all(&line).await
}
