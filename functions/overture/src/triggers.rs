//! `overture trigger send EVENT.json --triggers FILE` and `overture triggers log`: events in,
//! deployments out, every decision recorded.
//!
//! The rules are the domain's ([`overture_domain::trigger`]) and dispatching is the triggers
//! function's ([`overture_triggers::dispatch`]); this module gives it the data directory's
//! ledger and the blueprint files beside the trigger file. A match claims (source, event id,
//! trigger) in the ledger before it submits the deployment, so a redelivered event starts
//! nothing new however many processes receive it at once. `send` drives what it started to its
//! end, and feeds each end back in as an `overture` event, so chains of triggers run in one
//! command, up to the domain's depth limit.
//! `overture serve --triggers FILE` uses the same [`Dispatcher`] for `POST /v1/events`.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use overture_domain::projection::{DeploymentStatus, DeploymentView};
use overture_domain::text::escaped;
use overture_domain::trigger::{self, IncomingEvent, TriggerFile};
use overture_infra::sqlite::{Database, SqliteTriggerLedger};
use overture_kit::query::QueryDeployments;
use overture_kit::SystemClock;
use overture_triggers::bundle::TriggerBundle;
use overture_triggers::{
    dispatch, BlueprintSource, BlueprintUnavailable, FindBlueprints, ProcessEnvironment,
    TriggerDecision, TriggerLedger, TriggerPorts,
};

use crate::commands::trigger::SendArgs;
use crate::input::{problems_in, read_blueprint, shown};
use crate::lock::{DriveLock, EngineLock};
use crate::progress::Progress;
use crate::Failure;
use overture_embedded::{Engine, Unwatched, Watch};

/// Reads and checks a trigger file; problems are bad input naming the file and the field.
pub fn read_trigger_file(file: &Path) -> Result<TriggerFile, Failure> {
    read_trigger_text(file).map(|(_, checked)| checked)
}

/// Reads and checks a trigger file: its text, and the file as checked.
fn read_trigger_text(file: &Path) -> Result<(String, TriggerFile), Failure> {
    let text = std::fs::read_to_string(file).map_err(|e| {
        Failure::BadInput(format!(
            "{}: cannot read the trigger file: {e}",
            shown(file)
        ))
    })?;
    let checked = trigger::parse(&text)
        .map_err(|problems| Failure::BadInput(problems_in(file, &problems)))?;
    Ok((text, checked))
}

/// Reads an event from JSON text; `what` names where it came from in messages.
pub fn read_event(text: &str, what: &str) -> Result<IncomingEvent, String> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("{what}: not JSON: {e}"))?;
    IncomingEvent::from_json(value).map_err(|e| format!("{what}: {e}"))
}

/// Evaluates a trigger file against events and starts what it decides, recording each
/// decision in the data directory's ledger.
pub struct Dispatcher {
    engine: Arc<Engine>,
    ledger: SqliteTriggerLedger,
    file: TriggerFile,
    blueprints: BlueprintFiles,
    /// How many steps of one deployment may run at once.
    parallelism: usize,
}

/// A deployment a trigger started, and where driving it reads the log from.
#[derive(Clone, Debug)]
pub struct Started {
    /// The deployment, and the trigger and depth that started it.
    pub by: overture_triggers::Started,
    /// The log's head just before it was submitted: driving it reads on from there.
    pub from: u64,
}

/// What [`Dispatcher::dispatch`] did with one event.
#[derive(Debug, Default)]
pub struct Dispatched {
    /// The deployments it started.
    pub started: Vec<Started>,
    /// Every decision it took, as recorded.
    pub decisions: Vec<TriggerDecision>,
}

/// The blueprints a trigger file deploys, read from the files its `deploy` paths name,
/// relative to the trigger file's folder.
struct BlueprintFiles {
    base: PathBuf,
}

#[async_trait::async_trait]
impl FindBlueprints for BlueprintFiles {
    async fn blueprint(&self, deploy: &str) -> Result<BlueprintSource, BlueprintUnavailable> {
        let file = self.base.join(deploy);
        let (text, parsed) = read_blueprint(&file).map_err(|failure| match failure {
            Failure::BadInput(why) => BlueprintUnavailable(why),
            other => BlueprintUnavailable(other.to_string()),
        })?;
        Ok(BlueprintSource {
            source: file.display().to_string(),
            text,
            files: parsed.snapshot.files,
        })
    }
}

impl Dispatcher {
    /// A dispatcher for this trigger file on the engine's data directory.
    pub async fn new(
        engine: Arc<Engine>,
        data_dir: &Path,
        file: TriggerFile,
        path: &Path,
        parallelism: usize,
    ) -> Result<Self, Failure> {
        Ok(Self {
            engine,
            ledger: ledger(data_dir).await?,
            file,
            blueprints: BlueprintFiles {
                base: path.parent().map(Path::to_path_buf).unwrap_or_default(),
            },
            parallelism,
        })
    }

    /// Evaluates every trigger for the event and starts each deployment they decide on.
    /// With `tenant`, a trigger that would deploy for another tenant is refused.
    pub async fn dispatch(
        &self,
        event: &IncomingEvent,
        tenant: Option<&str>,
    ) -> Result<Dispatched, Failure> {
        let from = self
            .engine
            .log
            .head_position()
            .await
            .context("reading the log")?;
        let ports = TriggerPorts {
            ledger: &self.ledger,
            blueprints: &self.blueprints,
            secrets: &ProcessEnvironment,
            submit: self.engine.submit_ports(),
            clock: &SystemClock,
        };
        let dispatched = dispatch(&self.file, event, tenant, &ports)
            .await
            .map_err(|error| Failure::Engine(error.into()))?;
        for decision in &dispatched.decisions {
            eprintln!(
                "trigger {}: event {} {}: {}{}",
                decision.trigger,
                escaped(&decision.source),
                escaped(&decision.event_id),
                decision.decision.as_str(),
                if decision.reason.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", escaped(&decision.reason))
                }
            );
        }
        Ok(Dispatched {
            started: dispatched
                .started
                .into_iter()
                .map(|by| Started { by, from })
                .collect(),
            decisions: dispatched.decisions,
        })
    }

    /// Drives each started deployment to its end and feeds its end back in as an `overture`
    /// event, until the chain ends; returns every deployment's final view, in order.
    pub async fn follow(
        &self,
        started: Vec<Started>,
        tenant: Option<&str>,
        show_progress: bool,
    ) -> Result<Vec<DeploymentView>, Failure> {
        let mut pending = VecDeque::from(started);
        let mut views = Vec::new();
        while let Some(Started { by, from }) = pending.pop_front() {
            if show_progress {
                eprintln!("deployment {} (trigger {})", by.id, by.trigger);
            }
            let data_dir = &self.engine.data_dir;
            // As for `deploy`: only a `cancel` racing this line could hold it, and it would then
            // drive the deployment beside this process, which is harmless (every action is
            // idempotent); this process waits for the end either way.
            let _driving = DriveLock::take(data_dir, by.id).context("taking the drive lock")?;
            let mut watch: Box<dyn Watch + Send> = if show_progress {
                Box::new(Progress::new())
            } else {
                Box::new(Unwatched)
            };
            self.engine
                .drive(Some(by.id), self.parallelism, watch.as_mut(), from)
                .await?;
            self.engine.project().await?;
            let view = self
                .engine
                .queries()
                .deployment(by.id)
                .await?
                .with_context(|| format!("deployment {} has no view", by.id))?;
            let ended = IncomingEvent::deployment_ended(
                &view.id.to_string(),
                &view.tenant,
                &view.blueprint,
                view.status.as_str(),
                by.depth,
            );
            pending.extend(self.dispatch(&ended, tenant).await?.started);
            views.push(view);
        }
        Ok(views)
    }
}

/// The data directory's trigger ledger.
async fn ledger(data_dir: &Path) -> Result<SqliteTriggerLedger, Failure> {
    let db = Database::open(data_dir.join("overture.db"))
        .await
        .context("opening the trigger ledger")?;
    Ok(SqliteTriggerLedger::new(db))
}

/// `overture trigger send`: dispatches the event, drives what it started, follows chains.
pub async fn send(data_dir: &Path, args: SendArgs) -> Result<(), Failure> {
    let Some(path) = &args.triggers else {
        return Err(Failure::BadInput(
            "--triggers: give the trigger file the event is delivered to (with --backend aws, \
             the published one is used instead)"
                .into(),
        ));
    };
    let file = read_trigger_file(path)?;
    let (_, event) = read_event_file(&args.event)?;
    let engine = Engine::open(data_dir).await?;
    engine.preflight()?;
    let _lock = EngineLock::take(data_dir, false).map_err(|e| Failure::BadInput(e.to_string()))?;
    let dispatcher =
        Dispatcher::new(Arc::clone(&engine), data_dir, file, path, args.parallelism).await?;
    let started = dispatcher.dispatch(&event, None).await?.started;
    let views = dispatcher.follow(started, None, true).await?;
    if args.json {
        let all: Vec<serde_json::Value> = views
            .iter()
            .map(|view| serde_json::from_str(&crate::render::status_json(view)))
            .collect::<Result<_, _>>()
            .context("rendering the statuses")?;
        outln!("{}", serde_json::Value::Array(all));
    } else {
        for view in &views {
            outln!("{} {} {}", view.id, view.blueprint, view.status.as_str());
        }
    }
    let unsuccessful = views
        .iter()
        .filter(|view| view.status != DeploymentStatus::Succeeded)
        .count();
    if unsuccessful == 0 {
        Ok(())
    } else {
        Err(Failure::Unsuccessful(format!(
            "{unsuccessful} of {} deployments started by triggers did not succeed",
            views.len()
        )))
    }
}

/// Reads an event from a JSON file (`-`: standard input): its text, and the event.
fn read_event_file(path: &Path) -> Result<(String, IncomingEvent), Failure> {
    let text = if path == Path::new("-") {
        std::io::read_to_string(std::io::stdin())
    } else {
        std::fs::read_to_string(path)
    }
    .map_err(|e| Failure::BadInput(format!("{}: cannot read the event: {e}", shown(path))))?;
    let event = read_event(&text, &shown(path)).map_err(Failure::BadInput)?;
    Ok((text, event))
}

/// `overture --backend aws trigger send`: checks the event and puts it on the trigger events
/// queue, where the triggers function dispatches it against the published trigger file.
pub async fn send_to_aws(args: SendArgs) -> Result<(), Failure> {
    if args.triggers.is_some() {
        return Err(Failure::BadInput(
            "--triggers: with --backend aws the event goes to the published trigger file; \
             publish a new one with `overture --backend aws triggers publish FILE`"
                .into(),
        ));
    }
    let (text, event) = read_event_file(&args.event)?;
    let queue = crate::backend::aws::trigger_events().await?;
    let message = queue
        .send(&text, None)
        .await
        .context("putting the event on the trigger events queue")?;
    eprintln!(
        "event {} {} queued for the triggers (message {message}); see `overture --backend aws \
         triggers log`",
        escaped(&event.source),
        escaped(&event.id)
    );
    Ok(())
}

/// `overture --backend aws triggers publish FILE`: the trigger file and every blueprint it
/// deploys, read and checked here as `deploy` would, stored as one bundle.
pub async fn publish(path: &Path) -> Result<(), Failure> {
    let (text, file) = read_trigger_text(path)?;
    let blueprints = BlueprintFiles {
        base: path.parent().map(Path::to_path_buf).unwrap_or_default(),
    };
    let mut bundle = TriggerBundle {
        triggers: text,
        blueprints: std::collections::BTreeMap::new(),
    };
    let mut problems = Vec::new();
    for trigger in &file.triggers {
        match blueprints.blueprint(&trigger.deploy).await {
            Ok(blueprint) => {
                bundle.blueprints.insert(trigger.deploy.clone(), blueprint);
            }
            Err(unavailable) => problems.push(format!(
                "{}: triggers.{}.deploy: {unavailable}",
                shown(path),
                trigger.name
            )),
        }
    }
    if !problems.is_empty() {
        return Err(Failure::BadInput(problems.join("\n")));
    }
    crate::backend::aws::trigger_bundle()
        .await?
        .publish(&bundle)
        .await
        .context("storing the trigger file")?;
    outln!(
        "published {} with {} trigger(s) and {} blueprint(s)",
        shown(path),
        file.triggers.len(),
        bundle.blueprints.len()
    );
    Ok(())
}

/// `overture --backend aws triggers log`.
pub async fn log_on_aws(json: bool) -> Result<(), Failure> {
    let records = crate::backend::aws::trigger_ledger()
        .await?
        .decisions()
        .await
        .context("reading the trigger ledger")?;
    print_decisions(&records, json)
}

/// `overture triggers log`.
pub async fn log(data_dir: &Path, json: bool) -> Result<(), Failure> {
    let records = ledger(data_dir)
        .await?
        .decisions()
        .await
        .context("reading the trigger ledger")?;
    print_decisions(&records, json)
}

fn print_decisions(records: &[TriggerDecision], json: bool) -> Result<(), Failure> {
    if json {
        let text = serde_json::to_string_pretty(&records).context("rendering the log")?;
        outln!("{text}");
        return Ok(());
    }
    for r in records {
        outln!(
            "{}  {} {}  {}  {}  {}  {}",
            r.at,
            escaped(&r.source),
            escaped(&r.event_id),
            r.trigger,
            r.decision.as_str(),
            r.deployment.as_deref().unwrap_or("-"),
            escaped(&r.reason)
        );
    }
    Ok(())
}
