//! `overture deploy A.yaml B.yaml ...`: several deployments driven by this one engine, at most
//! `--at-once` of them at a time, in one drive. They share the engine's database writer, so
//! deployments running side by side share each commit's disk sync.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use overture_domain::deployment::{Outcome, Phase};
use overture_domain::DeploymentError;
use overture_events::DeploymentId;
use overture_submit::Submission;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc::UnboundedReceiver;

use crate::commands::cancel;
use crate::input::not_submitted;
use crate::output::print_view;
use crate::{lock, render, Failure};
use overture_embedded::{Engine, Joining, Scope, Unwatched};

/// How the deployments are paced.
#[derive(Clone, Copy, Debug)]
pub struct Pace {
    /// Deployments running at once.
    pub at_once: usize,
    /// Steps of a deployment running at once (the drive has room for this many per deployment
    /// running at once).
    pub parallelism: usize,
}

/// Records and drives each submission, `pace.at_once` at a time, in one drive: it prints each
/// one's id as it starts, then every final status in the order given (with `json`, one array of
/// `status --json` objects). Ends 0 when every deployment succeeded.
///
/// The first Ctrl-C (or SIGTERM) starts no more deployments and cancels those running; a second
/// one leaves at once.
pub async fn deploy_all(
    engine: &Arc<Engine>,
    data_dir: &Path,
    submissions: Vec<(PathBuf, Submission)>,
    pace: Pace,
    json: bool,
) -> Result<(), Failure> {
    let start = engine
        .log
        .head_position()
        .await
        .map_err(|e| Failure::Engine(e.into()))?;
    let (joining, ended) = Joining::new(engine);
    let mut unwatched = Unwatched;
    // Room for each deployment running at once to run as many steps as one deployment would.
    let drive = engine.drive_scope(
        Scope::Joined(&joining),
        pace.parallelism.saturating_mul(pace.at_once.max(1)),
        &mut unwatched,
        start,
    );
    let count = submissions.len();
    let started = start_each(engine, data_dir, submissions, pace.at_once, &joining, ended);
    let (driven, started) = tokio::join!(drive, started);
    driven?;
    let ids = started?;

    let mut all_succeeded = true;
    let mut views = Vec::with_capacity(count);
    for id in ids {
        let (state, view) = engine.settled(id).await?;
        all_succeeded &= matches!(state.phase, Phase::Finished(Outcome::Succeeded));
        views.push(view);
    }
    if json {
        outln!("{}", render::json(&views));
    } else {
        for view in &views {
            print_view(view, false);
        }
    }
    if all_succeeded {
        Ok(())
    } else {
        Err(Failure::Unsuccessful(String::new()))
    }
}

/// Records the deployments one by one, joining each to the drive, with at most `at_once` of
/// them unfinished; returns their ids in the order given once all have ended. However it ends,
/// the drive is told no more will join, so it ends once those it has end.
async fn start_each(
    engine: &Arc<Engine>,
    data_dir: &Path,
    submissions: Vec<(PathBuf, Submission)>,
    at_once: usize,
    joining: &Joining,
    ended: UnboundedReceiver<DeploymentId>,
) -> Result<Vec<DeploymentId>, Failure> {
    let started = start_paced(engine, data_dir, submissions, at_once, joining, ended).await;
    joining.close();
    started
}

async fn start_paced(
    engine: &Arc<Engine>,
    data_dir: &Path,
    submissions: Vec<(PathBuf, Submission)>,
    at_once: usize,
    joining: &Joining,
    mut ended: UnboundedReceiver<DeploymentId>,
) -> Result<Vec<DeploymentId>, Failure> {
    let mut interrupt = signal(SignalKind::interrupt()).context("listening for Ctrl-C")?;
    let mut terminate = signal(SignalKind::terminate()).context("listening for SIGTERM")?;
    let mut waiting = submissions.into_iter();
    let mut ids = Vec::new();
    let mut driving: Vec<(DeploymentId, String, Option<lock::DriveLock>)> = Vec::new();
    // Once cancelled, or once one could not be recorded, no more deployments start; those
    // running are driven to their ends all the same.
    let mut stopped = false;
    let mut failure = None;
    loop {
        while driving.len() < at_once.max(1) && !stopped {
            let Some((file, submission)) = waiting.next() else {
                break;
            };
            let requested_by = submission.requested_by.clone();
            match start_one(engine, data_dir, &file, submission).await {
                Ok((id, lock)) => {
                    joining.join(id);
                    driving.push((id, requested_by, lock));
                    ids.push(id);
                }
                Err(error) => {
                    failure = Some(error);
                    stopped = true;
                }
            }
        }
        if driving.is_empty() {
            break;
        }
        let name = tokio::select! {
            id = ended.recv() => {
                let Some(id) = id else { break };
                driving.retain(|(driven, ..)| *driven != id);
                continue;
            }
            _ = interrupt.recv() => "Ctrl-C",
            _ = terminate.recv() => "SIGTERM",
        };
        if stopped && failure.is_none() {
            eprintln!(
                "{name} again: leaving at once without cleaning up; `overture resume` will finish \
                 cancelling the deployments (closing their bastions and purging their secrets)"
            );
            std::process::exit(cancel::LEFT_AT_ONCE);
        }
        stopped = true;
        eprintln!(
            "{name}: starting no more deployments, and cancelling the {} running (press Ctrl-C \
             again to leave at once)",
            driving.len()
        );
        for (id, requested_by, _) in &driving {
            match engine
                .cancel(*id, requested_by, &format!("{name} on `overture deploy`"))
                .await?
            {
                Ok(_) | Err(DeploymentError::AlreadyFinished) => {}
                Err(refused) => return Err(Failure::Engine(refused.into())),
            }
        }
    }
    match failure {
        Some(failure) => Err(failure),
        None => Ok(ids),
    }
}

/// Records one deployment and takes its drive lock.
async fn start_one(
    engine: &Engine,
    data_dir: &Path,
    file: &Path,
    submission: Submission,
) -> Result<(DeploymentId, Option<lock::DriveLock>), Failure> {
    let id = engine
        .submit(submission)
        .await
        .map_err(|error| not_submitted(file, error))?;
    eprintln!("deployment {id} ({})", file.display());
    // As for one deployment: only a `cancel` racing this very line could find it free.
    let lock = lock::DriveLock::take(data_dir, id).context("taking the drive lock")?;
    Ok((id, lock))
}
