//! `overture trigger send EVENT.json --triggers FILE` and `overture triggers log`: events in,
//! deployments out, every decision recorded.
//!
//! The rules are the domain's ([`overture_domain::trigger`]); this module acts on them.
//! [`Dispatcher::dispatch`] evaluates every trigger of the file for one event: a match claims
//! (source, event id, trigger) in the data directory's ledger ([`TriggerLedger::claim`]) before
//! it submits the deployment, so a redelivered event starts nothing new however many processes
//! receive it at once. `send` drives what it started to its end, and feeds each end back in as an
//! `overture` event, so chains of triggers run in one command, up to the domain's depth limit.
//! `overture serve --triggers FILE` uses the same [`Dispatcher`] for `POST /v1/events`.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use clap::{Args, Subcommand};
use overture_domain::projection::{DeploymentStatus, DeploymentView};
use overture_domain::text::escaped;
use overture_domain::trigger::{self, Decision, IncomingEvent, TriggerFile};
use overture_events::DeploymentId;
use overture_infra::sqlite::{triggers, Database, TriggerDecisionRecord, TriggerLedger};
use overture_kit::query::QueryDeployments;
use overture_submit::{Submission, SubmitError};

use crate::engine::{Engine, Unwatched, Watch};
use crate::lock::{DriveLock, EngineLock};
use crate::progress::Progress;
use crate::{problems_in, read_blueprint, read_secrets, shown, Failure};

/// `overture trigger ...`
#[derive(Debug, Subcommand)]
pub enum TriggerCommand {
    /// Deliver one event (CloudEvents 1.0 or EventBridge JSON) to a trigger file: every matching
    /// trigger deploys, once per event however often it is sent; chains are followed.
    Send(SendArgs),
}

/// `overture trigger send`.
#[derive(Debug, Args)]
pub struct SendArgs {
    /// The event, as a JSON file (`-` for standard input).
    pub event: PathBuf,
    /// The trigger file (YAML).
    #[arg(long)]
    pub triggers: PathBuf,
    /// How many steps may run at once.
    #[arg(long, default_value_t = 8)]
    pub parallelism: usize,
    /// Print the started deployments' final statuses as a JSON array.
    #[arg(long)]
    pub json: bool,
}

/// `overture triggers ...`
#[derive(Debug, Subcommand)]
pub enum TriggersCommand {
    /// Every trigger decision, oldest first: deployed, duplicate, not matched, refused, and why.
    Log {
        #[arg(long)]
        json: bool,
    },
}

/// Reads and checks a trigger file; problems are bad input naming the file and the field.
pub fn read_trigger_file(file: &Path) -> Result<TriggerFile, Failure> {
    let text = std::fs::read_to_string(file).map_err(|e| {
        Failure::BadInput(format!(
            "{}: cannot read the trigger file: {e}",
            shown(file)
        ))
    })?;
    trigger::parse(&text).map_err(|problems| Failure::BadInput(problems_in(file, &problems)))
}

/// Reads an event from JSON text; `what` names where it came from in messages.
pub fn read_event(text: &str, what: &str) -> Result<IncomingEvent, String> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("{what}: not JSON: {e}"))?;
    IncomingEvent::from_json(value).map_err(|e| format!("{what}: {e}"))
}

/// Evaluates trigger files against events and starts what they decide, recording each decision.
pub struct Dispatcher {
    engine: Arc<Engine>,
    ledger: TriggerLedger,
    file: TriggerFile,
    /// The trigger file's folder: `deploy` paths are relative to it.
    base: PathBuf,
    /// How many steps of one deployment may run at once.
    parallelism: usize,
}

/// A deployment a trigger started.
#[derive(Clone, Debug)]
pub struct Started {
    /// Its id.
    pub id: DeploymentId,
    /// The trigger that started it.
    pub trigger: String,
    /// The depth of the event that started it.
    pub depth: u32,
    /// The log's head just before it was submitted: driving it reads on from there.
    pub from: u64,
}

/// What [`Dispatcher::dispatch`] did with one event.
#[derive(Debug, Default)]
pub struct Dispatched {
    /// The deployments it started.
    pub started: Vec<Started>,
    /// Every decision it took, as recorded.
    pub decisions: Vec<TriggerDecisionRecord>,
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
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
        let db = Database::open(data_dir.join("overture.db"))
            .await
            .context("opening the trigger ledger")?;
        Ok(Self {
            engine,
            ledger: TriggerLedger::new(db),
            file,
            base: path.parent().map(Path::to_path_buf).unwrap_or_default(),
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
        let mut done = Dispatched::default();
        let from = self
            .engine
            .log
            .head_position()
            .await
            .context("reading the log")?;
        for trigger in &self.file.triggers {
            let record = |decision: &str, deployment: Option<String>, reason: String| {
                eprintln!(
                    "trigger {}: event {} {}: {decision}{}",
                    trigger.name,
                    escaped(&event.source),
                    escaped(&event.id),
                    if reason.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", escaped(&reason))
                    }
                );
                TriggerDecisionRecord {
                    at: now(),
                    source: event.source.clone(),
                    event_id: event.id.clone(),
                    trigger: trigger.name.clone(),
                    decision: decision.into(),
                    deployment,
                    reason,
                }
            };
            let params = match trigger.evaluate(event) {
                Decision::NotMatched(why) => {
                    self.keep(&mut done, record("not-matched", None, why))
                        .await?;
                    continue;
                }
                Decision::Refused(why) => {
                    self.keep(&mut done, record("refused", None, why)).await?;
                    continue;
                }
                Decision::Deploy { params } => params,
            };
            if let Some(caller) = tenant.filter(|caller| *caller != trigger.tenant) {
                let why = format!(
                    "tenant `{}` is not the caller's tenant `{caller}`; a trigger deploys only into its caller's tenant",
                    trigger.tenant
                );
                self.keep(&mut done, record("refused", None, why)).await?;
                continue;
            }
            let claimed = self
                .ledger
                .claim(&event.source, &event.id, &trigger.name, &now())
                .await
                .context("claiming the event")?;
            if !claimed {
                // The ledger recorded it with the claim, in the same transaction.
                done.decisions
                    .push(record("duplicate", None, triggers::DUPLICATE_REASON.into()));
                continue;
            }
            let blueprint = self.base.join(&trigger.deploy);
            match self.start(trigger, &blueprint, params, event).await {
                Ok(id) => {
                    let why = format!("{} for tenant {}", shown(&blueprint), trigger.tenant);
                    self.keep(&mut done, record("deployed", Some(id.to_string()), why))
                        .await?;
                    done.started.push(Started {
                        id,
                        trigger: trigger.name.clone(),
                        depth: event.depth,
                        from,
                    });
                }
                Err(Failure::BadInput(why)) => {
                    self.keep(&mut done, record("refused", None, why)).await?;
                }
                Err(other) => return Err(other),
            }
        }
        Ok(done)
    }

    async fn keep(
        &self,
        done: &mut Dispatched,
        record: TriggerDecisionRecord,
    ) -> Result<(), Failure> {
        self.ledger
            .record(record.clone())
            .await
            .context("recording a trigger decision")?;
        done.decisions.push(record);
        Ok(())
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
        while let Some(started) = pending.pop_front() {
            if show_progress {
                eprintln!("deployment {} (trigger {})", started.id, started.trigger);
            }
            let data_dir = &self.engine.data_dir;
            // As for `deploy`: only a `cancel` racing this line could hold it, and it would then
            // drive the deployment beside this process, which is harmless (every action is
            // idempotent); this process waits for the end either way.
            let _driving =
                DriveLock::take(data_dir, started.id).context("taking the drive lock")?;
            let mut watch: Box<dyn Watch + Send> = if show_progress {
                Box::new(Progress::new())
            } else {
                Box::new(Unwatched)
            };
            self.engine
                .drive(
                    Some(started.id),
                    self.parallelism,
                    watch.as_mut(),
                    started.from,
                )
                .await?;
            self.engine.project().await?;
            let view = self
                .engine
                .queries()
                .deployment(started.id)
                .await?
                .with_context(|| format!("deployment {} has no view", started.id))?;
            let ended = IncomingEvent::deployment_ended(
                &view.id.to_string(),
                &view.tenant,
                &view.blueprint,
                view.status.as_str(),
                started.depth,
            );
            pending.extend(self.dispatch(&ended, tenant).await?.started);
            views.push(view);
        }
        Ok(views)
    }

    /// Submits the trigger's deployment as `overture deploy` would; bad input is a refusal.
    async fn start(
        &self,
        trigger: &trigger::Trigger,
        blueprint: &Path,
        params: std::collections::BTreeMap<String, String>,
        event: &IncomingEvent,
    ) -> Result<DeploymentId, Failure> {
        let (text, parsed) = read_blueprint(blueprint)?;
        let pairs: Vec<String> = trigger
            .secrets
            .iter()
            .map(|(name, variable)| format!("{name}={variable}"))
            .collect();
        let secrets = read_secrets(&pairs)?;
        let submission = Submission {
            triggered_by: None,
            cloud: None,
            source: blueprint.display().to_string(),
            text,
            tenant: trigger.tenant.clone(),
            // The event is what asked; its source and id are read back from the record.
            requested_by: format!("event:{}/{}", event.source, event.id),
            trigger: format!("trigger:{}", trigger.name),
            params,
            secrets,
            files: parsed.snapshot.files.clone(),
        };
        self.engine
            .submit(submission)
            .await
            .map_err(|error| match error {
                SubmitError::Invalid(problems) => {
                    Failure::BadInput(problems_in(blueprint, &problems))
                }
                other => Failure::Engine(other.into()),
            })
    }
}

/// `overture trigger send`: dispatches the event, drives what it started, follows chains.
pub async fn send(data_dir: &Path, args: SendArgs) -> Result<(), Failure> {
    let file = read_trigger_file(&args.triggers)?;
    let text = if args.event == Path::new("-") {
        std::io::read_to_string(std::io::stdin())
    } else {
        std::fs::read_to_string(&args.event)
    }
    .map_err(|e| {
        Failure::BadInput(format!(
            "{}: cannot read the event: {e}",
            shown(&args.event)
        ))
    })?;
    let event = read_event(&text, &shown(&args.event)).map_err(Failure::BadInput)?;
    let engine = Engine::open(data_dir).await?;
    let _lock = EngineLock::take(data_dir, false).map_err(|e| Failure::BadInput(e.to_string()))?;
    let dispatcher = Dispatcher::new(
        Arc::clone(&engine),
        data_dir,
        file,
        &args.triggers,
        args.parallelism,
    )
    .await?;
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

/// `overture triggers log`.
pub async fn log(data_dir: &Path, json: bool) -> Result<(), Failure> {
    let db = Database::open(data_dir.join("overture.db"))
        .await
        .context("opening the trigger ledger")?;
    let records = TriggerLedger::new(db)
        .list()
        .await
        .context("reading the trigger ledger")?;
    if json {
        let text = serde_json::to_string_pretty(&records).context("rendering the log")?;
        outln!("{text}");
        return Ok(());
    }
    for r in &records {
        outln!(
            "{}  {} {}  {}  {}  {}  {}",
            r.at,
            escaped(&r.source),
            escaped(&r.event_id),
            r.trigger,
            r.decision,
            r.deployment.as_deref().unwrap_or("-"),
            escaped(&r.reason)
        );
    }
    Ok(())
}
