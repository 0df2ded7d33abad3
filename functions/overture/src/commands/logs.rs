//! `overture logs`: the output of a step's attempt, as the runner kept it (secrets masked).

use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

use overture_domain::{DeploymentState, StepStatus};
use overture_events::DeploymentId;
use overture_runner::logs::LogName;

use overture_embedded::Engine;
use overture_kit::query::{AttemptLog, QueryDeployments};

use crate::backend::embedded::missing as no_such_deployment;
use crate::input::parse_id;
use crate::output::{find_view, Missing};
use crate::Failure;

/// `overture logs`.
#[derive(clap::Args)]
pub struct LogsArgs {
    /// The deployment: its id, its name, or TENANT/NAME.
    pub id: String,
    /// The step.
    pub step: String,
    /// Which attempt (1-based).
    #[arg(long, conflicts_with = "destroy")]
    attempt: Option<u32>,
    /// The output of `overture destroy` for this step instead.
    #[arg(long)]
    destroy: bool,
    /// Keep printing what the attempt writes until it ends.
    #[arg(long, short)]
    pub follow: bool,
}

impl LogsArgs {
    /// Which output was asked for.
    pub fn which(&self) -> Which {
        match (self.destroy, self.attempt) {
            (true, _) => Which::Destroy,
            (false, Some(attempt)) => Which::Attempt(attempt),
            (false, None) => Which::Latest,
        }
    }
}

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

/// Prints a step's log. With `follow`, keeps printing until the attempt has ended; following
/// the latest attempt also waits for the first one to start and goes on through the retries
/// the step gets, until it has no more.
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
    let mut name = match which {
        Which::Destroy => LogName::Destroy,
        Which::Attempt(attempt) => LogName::Attempt(attempt),
        Which::Latest => match latest_attempt(&engine, id, step, 0, follow).await? {
            Some(attempt) => LogName::Attempt(attempt),
            None => {
                return Err(Failure::BadInput(format!(
                    "step `{step}` has no output yet: no attempt has run"
                )))
            }
        },
    };
    loop {
        print_log(&engine, id, step, name, follow).await?;
        let (LogName::Attempt(shown), Which::Latest, true) = (name, which, follow) else {
            return Ok(());
        };
        match latest_attempt(&engine, id, step, shown, true).await? {
            Some(next) => {
                outln!("--- attempt {next} ---");
                name = LogName::Attempt(next);
            }
            None => return Ok(()),
        }
    }
}

/// Prints one log; with `follow`, until its attempt has ended.
async fn print_log(
    engine: &Engine,
    id: DeploymentId,
    step: &str,
    name: LogName,
    follow: bool,
) -> Result<(), Failure> {
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
    let (true, LogName::Attempt(attempt)) = (follow, name) else {
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

/// The highest attempt above `after` that has a log. With `wait`, while the step may still run
/// another attempt, waits for its log to appear.
async fn latest_attempt(
    engine: &Engine,
    id: DeploymentId,
    step: &str,
    after: u32,
    wait: bool,
) -> Result<Option<u32>, Failure> {
    loop {
        let attempts = engine
            .logs
            .attempts(id, step)
            .map_err(|e| Failure::Engine(anyhow::anyhow!("cannot list the logs: {e}")))?;
        if let Some(&last) = attempts.last().filter(|&&last| last > after) {
            return Ok(Some(last));
        }
        if !wait || !may_run_again(&engine.state(id).await?, step) {
            return Ok(None);
        }
        tokio::time::sleep(FOLLOW_POLL).await;
    }
}

/// Whether the step may still start an attempt, or is running one.
fn may_run_again(state: &DeploymentState, step: &str) -> bool {
    !state.is_finished()
        && state.steps.get(step).is_some_and(|s| {
            matches!(
                s.status,
                StepStatus::Pending
                    | StepStatus::Scheduled
                    | StepStatus::Running
                    | StepStatus::Retrying
            )
        })
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
    if let Err(error) = out.write_all(&buffer).and_then(|()| out.flush()) {
        crate::output::end_on_write_error(&error);
    }
    Ok(())
}

/// Prints a step's log through the query port (the aws backend's `logs`): the attempt given,
/// or the step's last.
pub async fn show_queried(
    queries: &dyn QueryDeployments,
    missing: Missing<'_>,
    args: &LogsArgs,
) -> Result<(), Failure> {
    let LogsArgs {
        id,
        step,
        attempt,
        destroy,
        ..
    } = args;
    let (step, attempt, destroy) = (step.as_str(), *attempt, *destroy);
    let view = find_view(queries, missing, id).await?;
    let Some(step_view) = view.steps.get(step) else {
        let steps: Vec<&str> = view.steps.keys().map(String::as_str).collect();
        return Err(Failure::BadInput(format!(
            "deployment {} has no step `{step}`; its steps are: {}",
            view.id,
            steps.join(", ")
        )));
    };
    let log = match (
        destroy,
        attempt.or((step_view.attempts > 0).then_some(step_view.attempts)),
    ) {
        (true, _) => AttemptLog::Destroy,
        (false, Some(attempt)) => AttemptLog::Attempt(attempt),
        (false, None) => {
            return Err(Failure::BadInput(format!(
                "step `{step}` has no output yet: no attempt has run"
            )))
        }
    };
    match queries.attempt_log(view.id, step, log).await? {
        Some(bytes) => {
            out!("{}", String::from_utf8_lossy(&bytes));
            Ok(())
        }
        None => Err(Failure::BadInput(match log {
            AttemptLog::Destroy => format!("step `{step}` has not been destroyed yet"),
            AttemptLog::Attempt(attempt) => {
                format!("step `{step}` has no output for attempt {attempt}")
            }
        })),
    }
}
