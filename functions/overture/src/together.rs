//! `overture deploy A.yaml B.yaml ...`: several deployments driven by this one engine, at most
//! `--at-once` of them at a time. They share the engine's database writer, so deployments
//! running side by side share each commit's disk sync.

use std::path::PathBuf;
use std::sync::Arc;

use overture_domain::deployment::{Outcome, Phase};
use overture_domain::projection::DeploymentView;
use overture_submit::{Submission, SubmitError};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::engine::{Engine, Unwatched};
use crate::{cancel, lock, print_view, problems_in, render, Failure};

/// How the deployments are paced.
#[derive(Clone, Copy, Debug)]
pub struct Pace {
    /// Deployments running at once.
    pub at_once: usize,
    /// Steps of each deployment running at once.
    pub parallelism: usize,
}

/// Records and drives each submission, `pace.at_once` at a time, printing each one's id as it
/// starts and its status as it ends; then prints every final status in the order given (with
/// `json`, one array of `status --json` objects). Ends 0 when every deployment succeeded.
pub async fn deploy_all(
    engine: &Arc<Engine>,
    data_dir: &std::path::Path,
    submissions: Vec<(PathBuf, Submission)>,
    pace: Pace,
    json: bool,
) -> Result<(), Failure> {
    let at_once = Arc::new(Semaphore::new(pace.at_once.max(1)));
    let mut running = JoinSet::new();
    for (index, (file, submission)) in submissions.into_iter().enumerate() {
        let permit = Arc::clone(&at_once)
            .acquire_owned()
            .await
            .map_err(|e| Failure::Engine(e.into()))?;
        let (engine, data_dir) = (Arc::clone(engine), data_dir.to_path_buf());
        running.spawn(async move {
            let ended = deploy_one(&engine, &data_dir, file, submission, pace.parallelism).await;
            drop(permit);
            (index, ended)
        });
    }
    let mut ended: Vec<Option<Result<(bool, DeploymentView), Failure>>> = Vec::new();
    while let Some(joined) = running.join_next().await {
        let (index, outcome) = joined.map_err(|e| Failure::Engine(e.into()))?;
        if ended.len() <= index {
            ended.resize_with(index + 1, || None);
        }
        ended[index] = Some(outcome);
    }
    let mut all_succeeded = true;
    let mut first_error = None;
    let mut views = Vec::new();
    for outcome in ended.into_iter().flatten() {
        match outcome {
            Ok((succeeded, view)) => {
                all_succeeded &= succeeded;
                views.push(view);
            }
            Err(error) => {
                first_error.get_or_insert(error);
            }
        }
    }
    if json {
        outln!("{}", render::json(&views));
    } else {
        for view in &views {
            print_view(view, false);
        }
    }
    match first_error {
        Some(error) => Err(error),
        None if all_succeeded => Ok(()),
        None => Err(Failure::Unsuccessful(String::new())),
    }
}

/// One deployment: recorded, driven to its end (cancelled on Ctrl-C), and its final view.
async fn deploy_one(
    engine: &Arc<Engine>,
    data_dir: &std::path::Path,
    file: PathBuf,
    submission: Submission,
    parallelism: usize,
) -> Result<(bool, DeploymentView), Failure> {
    let requested_by = submission.requested_by.clone();
    let start = engine
        .log
        .head_position()
        .await
        .map_err(|e| Failure::Engine(e.into()))?;
    let id = engine
        .submit(submission)
        .await
        .map_err(|error| match error {
            SubmitError::Invalid(problems) => Failure::BadInput(problems_in(&file, &problems)),
            other => Failure::Engine(other.into()),
        })?;
    eprintln!("deployment {id} ({})", file.display());
    let _driving = lock::DriveLock::take(data_dir, id).map_err(|e| Failure::Engine(e.into()))?;
    let mut unwatched = Unwatched;
    let drive = engine.drive(Some(id), parallelism, &mut unwatched, start);
    cancel::drive_cancelling_on_signal(engine, id, &requested_by, drive).await?;
    let (state, view) = engine.settled(id).await?;
    eprintln!("{id} {}", view.status.as_str());
    Ok((
        matches!(state.phase, Phase::Finished(Outcome::Succeeded)),
        view,
    ))
}
