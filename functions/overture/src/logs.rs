//! `overture logs`: the output of a step's attempt, as the runner kept it (secrets masked).

use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

use overture_domain::{DeploymentState, StepStatus};
use overture_events::DeploymentId;
use overture_runner::logs::LogName;

use crate::engine::Engine;
use crate::{no_such_deployment, parse_id, Failure};

/// How often `--follow` looks for more output.
const FOLLOW_POLL: Duration = Duration::from_millis(200);

/// Which of a step's logs to show.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Which {
    /// The last attempt that has a log.
    Latest,
    /// This attempt.
    Attempt(u32),
    /// The output of `overture destroy` for the step.
    Destroy,
}

/// Prints a step's log; with `follow`, keeps printing until the attempt has ended.
pub async fn show(
    data_dir: &Path,
    id: &str,
    step: &str,
    which: Which,
    follow: bool,
) -> Result<(), Failure> {
    let id = parse_id(id)?;
    let engine = Engine::open(data_dir).await?;
    let state = engine.state(id).await?;
    let Some(blueprint) = &state.blueprint else {
        return Err(no_such_deployment(id));
    };
    if blueprint.step(step).is_none() {
        let steps: Vec<&str> = blueprint.steps.iter().map(|s| s.name.as_str()).collect();
        return Err(Failure::BadInput(format!(
            "deployment {id} has no step `{step}`; its steps are: {}",
            steps.join(", ")
        )));
    }
    let name = log_name(&engine, id, step, which)?;
    let path = engine.logs.path(id, step, name);
    let mut file = match std::fs::File::open(&path) {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Err(Failure::BadInput(match name {
                LogName::Destroy => format!("step `{step}` has not been destroyed yet"),
                LogName::Attempt(attempt) => {
                    format!("step `{step}` has no output for attempt {attempt}")
                }
            }))
        }
        Err(error) => {
            return Err(Failure::Engine(anyhow::anyhow!(
                "cannot read {}: {error}",
                path.display()
            )))
        }
    };
    let mut out = std::io::stdout();
    let read_error = |error: std::io::Error| {
        Failure::Engine(anyhow::anyhow!("cannot read {}: {error}", path.display()))
    };
    copy_new(&mut file, &mut out).map_err(read_error)?;
    if !follow {
        return Ok(());
    }
    let LogName::Attempt(attempt) = name else {
        return Ok(());
    };
    // The runner writes the log before it records the attempt's end, so once the log shows the
    // attempt ended, one last read has everything.
    loop {
        let running = is_running(&engine.state(id).await?, step, attempt);
        copy_new(&mut file, &mut out).map_err(read_error)?;
        if !running {
            return Ok(());
        }
        tokio::time::sleep(FOLLOW_POLL).await;
    }
}

/// The log asked for; for [`Which::Latest`], the highest attempt that has one.
fn log_name(
    engine: &Engine,
    id: DeploymentId,
    step: &str,
    which: Which,
) -> Result<LogName, Failure> {
    match which {
        Which::Destroy => Ok(LogName::Destroy),
        Which::Attempt(attempt) => Ok(LogName::Attempt(attempt)),
        Which::Latest => {
            let attempts = engine
                .logs
                .attempts(id, step)
                .map_err(|e| Failure::Engine(anyhow::anyhow!("cannot list the logs: {e}")))?;
            attempts
                .last()
                .map(|&a| LogName::Attempt(a))
                .ok_or_else(|| {
                    Failure::BadInput(format!(
                        "step `{step}` has no output yet: no attempt has run"
                    ))
                })
        }
    }
}

fn is_running(state: &DeploymentState, step: &str, attempt: u32) -> bool {
    state
        .steps
        .get(step)
        .is_some_and(|s| s.attempt == attempt && matches!(s.status, StepStatus::Running))
}

/// Copies what was appended to `file` since the last call (reading goes on from where it ended).
fn copy_new(file: &mut std::fs::File, out: &mut impl Write) -> std::io::Result<()> {
    let mut buffer = Vec::new();
    file.read_to_end(&mut buffer)?;
    out.write_all(&buffer)?;
    out.flush()
}
