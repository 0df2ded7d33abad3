//! The drive loop: feed new log entries to the orchestrator, hand due jobs to workers, fold
//! what was fed into the read models, until the driven deployments have ended.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::try_join_all;
use overture_domain::DeploymentState;
use overture_events::{CloudAccount, DeploymentId, LogEntry, Timestamp};
use overture_infra::session::SessionTokens;
use overture_infra::sqlite::Handoff;
use overture_kit::Clock;
use overture_orchestrator::{orchestrate, OrchestratorPorts, Since};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use uuid::Uuid;

use crate::error::EngineError;
use crate::fold::{Fed, Unfolded};
use crate::scope::{Scope, Watch};
use crate::{Engine, FEED_BATCH, LEASE, POLL, PROJECT_IDLE, PROJECT_LAG};

/// The users' tokens a drive was given, with the cloud account each is for.
#[derive(Default)]
pub(crate) struct Lendable(Vec<(CloudAccount, overture_domain::secret::SecretString)>);

impl Lendable {
    /// Notes the tokens the process holds for these deployments.
    fn note(&mut self, custody: &SessionTokens, states: &[(DeploymentId, DeploymentState)]) {
        for (id, state) in states {
            if let (Some(account), Some(token)) = (&state.cloud, custody.token(*id)) {
                self.0.push((account.clone(), token));
            }
        }
    }

    /// The tokens given for the same user of the same project of the same cloud.
    fn tokens_of<'a>(
        &'a self,
        account: &'a CloudAccount,
    ) -> impl Iterator<Item = &'a overture_domain::secret::SecretString> {
        self.0
            .iter()
            .filter(move |(given, _)| {
                given.auth_url == account.auth_url
                    && given.project_id == account.project_id
                    && given.user == account.user
            })
            .map(|(_, token)| token)
    }
}

impl Engine {
    /// Runs deployments until `target` has ended (or, with `None`, until every deployment has).
    /// `progress` sees every new log entry of the driven deployments, in order.
    pub async fn drive(
        self: &Arc<Self>,
        target: Option<DeploymentId>,
        parallelism: usize,
        watch: &mut (dyn Watch + Send),
        from_position: u64,
    ) -> Result<(), EngineError> {
        let scope = match target {
            Some(id) => Scope::One(id),
            None => Scope::Every,
        };
        self.drive_scope(scope, parallelism, watch, from_position)
            .await
    }

    /// Runs the deployments of `scope` until each has ended. `watch` sees every new log entry
    /// of the driven deployments, in order.
    ///
    /// Each pass feeds the new log entries to the orchestrator, starts the attempts it queued
    /// (handed over as they are queued, see [`Handoff`]) and any other due jobs, then folds the
    /// entries into the read models while those attempts run. Whether a driven deployment has
    /// ended is known from the state the orchestrator leaves it in: only new entries change it.
    pub async fn drive_scope(
        self: &Arc<Self>,
        scope: Scope<'_>,
        parallelism: usize,
        watch: &mut (dyn Watch + Send),
        from_position: u64,
    ) -> Result<(), EngineError> {
        let appended = self.log.appended();
        let workers = Arc::new(Semaphore::new(parallelism.max(1)));
        let handoff = Handoff::new(self.queue.clone(), Arc::clone(&workers), LEASE);
        let mut drive = Drive::begin(self, scope, &handoff, workers, watch, from_position).await?;
        loop {
            let notified = appended.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();

            drive.take_joined().await?;
            if let Scope::Joined(joining) = drive.scope {
                // Handing over: what runs ends and is recorded, nothing new starts, and the
                // deployments stay unfinished for the next engine to carry on.
                if joining.stopping() {
                    return drive.end().await;
                }
            }
            drive.feed().await?;
            if drive.let_ended_go() {
                return drive.end().await;
            }
            let next_wake = drive.start_due_jobs().await?;
            // After starting the attempts, so that their commits overlap the views' writes.
            if drive
                .unfolded
                .since
                .is_some_and(|since| since.elapsed() >= PROJECT_LAG)
            {
                drive.fold().await?;
            }
            drive.wait(notified, next_wake).await?;
        }
    }

    /// Who runs the woken deployment `id` (a watching step of it runs again): this process
    /// when it needs no token, holds its own, or was given a token of its cloud account that
    /// opens its seal, which it then lends it; otherwise whoever holds its user's token
    /// (`overture resume --token-file`).
    pub(crate) fn who_runs(
        &self,
        id: DeploymentId,
        state: &DeploymentState,
        lendable: &Lendable,
    ) -> Runs {
        let Some(account) = &state.cloud else {
            return Runs::Here;
        };
        if self.custody.token(id).is_some() {
            return Runs::Here;
        }
        match lendable
            .tokens_of(account)
            .find(|token| self.opens_seal(id, state, token))
        {
            Some(token) => Runs::Lent(token.clone()),
            None => Runs::Elsewhere,
        }
    }

    /// Whether `token` opens the seal of deployment `id`, in `state`: a seal locked with its
    /// user's token opens with that token only, and acting with another would fail its steps.
    pub fn opens_seal(
        &self,
        id: DeploymentId,
        state: &DeploymentState,
        token: &overture_domain::secret::SecretString,
    ) -> bool {
        state.seal.is_none()
            || self
                .keys
                .open_values(id, &state.tenant, Some(token))
                .is_ok()
    }
}

/// Who runs a deployment a drive woke ([`Engine::who_runs`]).
pub(crate) enum Runs {
    /// This process, with what it holds.
    Here,
    /// This process, with a token it was given for another deployment of the same user.
    Lent(overture_domain::secret::SecretString),
    /// Whoever holds its user's token: its attempts are queued, not started here.
    Elsewhere,
}

/// One drive under way: the deployments it runs, their states, and its workers.
struct Drive<'a> {
    engine: &'a Arc<Engine>,
    scope: Scope<'a>,
    /// Where the orchestrator's queued attempts are handed straight to workers.
    handoff: &'a Handoff,
    ports: OrchestratorPorts<'a>,
    workers: Arc<Semaphore>,
    watch: &'a mut (dyn Watch + Send),
    running: JoinSet<()>,
    /// The position of the last log entry read.
    position: u64,
    /// The deployments this drive runs; those started later by other processes are theirs.
    driven: Vec<DeploymentId>,
    /// The state of each driven deployment, as the orchestrator last left it.
    states: Vec<(DeploymentId, DeploymentState)>,
    lendable: Lendable,
    /// The target's last state (with [`Scope::One`]).
    target: Option<DeploymentState>,
    /// Whether no deployment may join any more.
    closed: bool,
    unfolded: Unfolded,
}

impl<'a> Drive<'a> {
    /// A drive of `scope` from the log position `position`, its deployments' states loaded.
    async fn begin(
        engine: &'a Arc<Engine>,
        scope: Scope<'a>,
        handoff: &'a Handoff,
        workers: Arc<Semaphore>,
        watch: &'a mut (dyn Watch + Send),
        position: u64,
    ) -> Result<Self, EngineError> {
        let ports = OrchestratorPorts {
            work: handoff,
            ..engine.orchestrator_ports()
        };
        let driven: Vec<DeploymentId> = match scope {
            Scope::One(id) => vec![id],
            Scope::Every => engine.unfinished().await?,
            Scope::Joined(_) => Vec::new(),
        };
        // The state of each driven deployment is loaded once; after that, the orchestrator
        // says what it is whenever new entries move it on.
        let mut states = Vec::with_capacity(driven.len());
        for id in &driven {
            states.push((*id, engine.state(*id).await?));
        }
        // The users' tokens this drive was given, by cloud account: a deployment it wakes (a
        // watching step runs again) may run here only with a token of its own account that
        // opens its seal. Taken now, as a deployment's end lets go of its token.
        let mut lendable = Lendable::default();
        lendable.note(&engine.custody, &states);
        Ok(Self {
            engine,
            scope,
            handoff,
            ports,
            workers,
            watch,
            running: JoinSet::new(),
            position,
            driven,
            states,
            lendable,
            target: None,
            closed: !matches!(scope, Scope::Joined(_)),
            unfolded: Unfolded::new(position),
        })
    }

    /// Adds the deployments that joined since the last pass ([`Scope::Joined`]).
    async fn take_joined(&mut self) -> Result<(), EngineError> {
        let Scope::Joined(joining) = self.scope else {
            return Ok(());
        };
        let (joined, more) = joining.take();
        self.closed = !more;
        // Their first records may have been fed before they joined: a recovery pass
        // queues whatever each waits for.
        let recovered = joined
            .iter()
            .map(|id| orchestrate(*id, Uuid::now_v7(), Since::Unknown, &self.ports));
        let recovered = try_join_all(recovered).await?;
        self.driven.extend(&joined);
        let joined: Vec<(DeploymentId, DeploymentState)> =
            joined.into_iter().zip(recovered).collect();
        self.lendable.note(&self.engine.custody, &joined);
        self.states.extend(joined);
        Ok(())
    }

    /// Feeds every new entry to the orchestrator, which moves its deployment on, and keeps it
    /// for the read models; a backlog is folded batch by batch, as it is read.
    async fn feed(&mut self) -> Result<(), EngineError> {
        loop {
            let entries = self.engine.log.read_all(self.position, FEED_BATCH).await?;
            let full = entries.len() == FEED_BATCH;
            let (fed, causes) = self.read(entries);
            // Side by side, so that the jobs they queue share the writer's commits.
            let moved = causes.iter().map(|(id, cause)| {
                let records = fed.streams.get(id).map_or(&[][..], Vec::as_slice);
                orchestrate(*id, *cause, Since::Records(records), &self.ports)
            });
            let moved = try_join_all(moved).await?;
            self.wake_watchers().await?;
            let handed = self.handoff.take();
            let started = !handed.is_empty();
            self.engine.start(&mut self.running, handed, &self.unfolded);
            if started {
                // The attempts get to their first commit before the drive's bookkeeping
                // below: on one thread (`deploy`, `overture engine`) they would wait for
                // its next wait, and their commits overlap it.
                tokio::task::yield_now().await;
            }
            // The orchestrator loads a deployment's whole stream: it may have ended it, or
            // found it ended, on records appended after this read. They are read before
            // the deployment is let go, so that `watch` sees its every record.
            let ending = moved.iter().any(DeploymentState::is_finished);
            for ((id, _), state) in causes.into_iter().zip(moved) {
                if let Some(known) = self.states.iter_mut().find(|(seen, _)| *seen == id) {
                    known.1 = state;
                }
            }
            self.unfolded.add(fed);
            if !full && !ending {
                return Ok(());
            }
            self.fold().await?;
        }
    }

    /// Takes in entries read from the log: the driven deployments' go to `watch`, and each
    /// driven deployment's last record is the cause of what the orchestrator does.
    fn read(&mut self, entries: Vec<LogEntry>) -> (Fed, Vec<(DeploymentId, Uuid)>) {
        let mut fed = Fed::default();
        let mut causes: Vec<(DeploymentId, Uuid)> = Vec::new();
        for entry in entries {
            self.position = entry.position;
            fed.through = Some(entry.position);
            let Ok(id) = DeploymentId::from_stream(&entry.envelope.stream) else {
                continue;
            };
            if matches!(self.scope, Scope::Every) || self.driven.contains(&id) {
                self.watch.entry(&entry);
                match causes.iter_mut().find(|(seen, _)| *seen == id) {
                    Some(slot) => slot.1 = entry.envelope.id,
                    None => causes.push((id, entry.envelope.id)),
                }
            }
            fed.streams.entry(id).or_default().push(entry.envelope);
        }
        (fed, causes)
    }

    /// Deployments whose services changed are moved on now, and driven until they end again,
    /// when they are not driven already: a watching step runs again. (Driving every
    /// deployment, the drive gets their timers from the queue.)
    ///
    /// One this process cannot run (see [`Engine::who_runs`]) is moved on all the same, so
    /// that its re-run is recorded, but its attempt is only queued, for whoever holds its
    /// user's token: started here, it could not open its seal, and would be found running,
    /// and interrupted, by the `overture resume` that then carries it on.
    async fn wake_watchers(&mut self) -> Result<(), EngineError> {
        let woken = self.handoff.take_woken();
        if matches!(self.scope, Scope::Every) {
            return Ok(());
        }
        for id in woken {
            if self.driven.contains(&id) {
                continue;
            }
            let runs = self
                .engine
                .who_runs(id, &self.engine.state(id).await?, &self.lendable);
            let queued_only = OrchestratorPorts {
                work: &self.engine.queue,
                ..self.ports
            };
            let ports = match runs {
                Runs::Elsewhere => &queued_only,
                Runs::Here | Runs::Lent(_) => &self.ports,
            };
            let state = orchestrate(id, Uuid::now_v7(), Since::Records(&[]), ports).await?;
            if state.is_finished() {
                continue;
            }
            match runs {
                Runs::Elsewhere => {
                    self.watch.waits_for_a_token(id, &state);
                    continue;
                }
                Runs::Lent(token) => self.engine.custody.remember(id, token),
                Runs::Here => {}
            }
            self.driven.push(id);
            self.states.push((id, state));
        }
        Ok(())
    }

    /// Lets the deployments that have ended go, and shows `watch` the target's state; says
    /// whether the drive is over.
    fn let_ended_go(&mut self) -> bool {
        let (scope, target) = (self.scope, &mut self.target);
        self.states.retain(|(id, state)| {
            if let Scope::One(target_id) = scope {
                if *id == target_id {
                    *target = Some(state.clone());
                }
            }
            let ended = state.is_finished();
            if let (true, Scope::Joined(joining)) = (ended, scope) {
                joining.ended(*id);
            }
            !ended
        });
        let states = &self.states;
        self.driven
            .retain(|id| states.iter().any(|(known, _)| known == id));
        if let Some(state) = &self.target {
            self.watch.tick(state);
        }
        self.driven.is_empty() && self.closed
    }

    /// Ends the drive: waits for its attempts, and folds what it fed.
    async fn end(mut self) -> Result<(), EngineError> {
        // Attempts abandoned at the end notice within a heartbeat and kill their sandboxes.
        while self.running.join_next().await.is_some() {}
        self.fold().await
    }

    /// Hands other due jobs (retries, timers, jobs queued while every worker was busy) to
    /// workers while there is room; only looking is a read, taking them a write. Returns when
    /// the next job is due.
    async fn start_due_jobs(&mut self) -> Result<Option<Timestamp>, EngineError> {
        let engine = self.engine;
        let only = (!matches!(self.scope, Scope::Every)).then_some(self.driven.as_slice());
        let next_wake = engine.queue.next_wake(only).await?;
        let room = self.workers.available_permits();
        if room == 0 || next_wake.is_none_or(|at| at > engine.clock.now()) {
            return Ok(next_wake);
        }
        let jobs = engine
            .queue
            .receive_up_to(room, engine.clock.now(), LEASE, only)
            .await?;
        let handed = jobs
            .into_iter()
            .map(|job| {
                let permit = Arc::clone(&self.workers).try_acquire_owned()?;
                Ok((job, permit))
            })
            .collect::<Result<Vec<_>, EngineError>>()?;
        engine.start(&mut self.running, handed, &self.unfolded);
        engine
            .queue
            .next_wake(only)
            .await
            .map_err(EngineError::from)
    }

    /// Folds what the drive has fed into the read models.
    async fn fold(&mut self) -> Result<(), EngineError> {
        self.engine
            .fold_unfolded(&mut self.unfolded, self.position)
            .await
    }

    /// Waits for news: a new log entry, a free worker for a due job, or the next due job;
    /// folds what was fed when nothing came meanwhile.
    async fn wait(
        &mut self,
        notified: std::pin::Pin<&mut tokio::sync::futures::Notified<'_>>,
        next_wake: Option<Timestamp>,
    ) -> Result<(), EngineError> {
        // With every worker busy, a due job waits for one to finish rather than spinning.
        let mut sleep = match self.workers.available_permits() {
            0 => POLL,
            _ => next_wake
                .map(|at| {
                    (at - self.engine.clock.now())
                        .to_std()
                        .unwrap_or(Duration::ZERO)
                })
                .unwrap_or(POLL)
                .min(POLL),
        };
        // Workers that finished while others were free are reaped here.
        while self.running.try_join_next().is_some() {}
        let folding = !self.unfolded.is_empty();
        if folding {
            sleep = sleep.min(PROJECT_IDLE);
        }
        let quiet = tokio::select! {
            () = notified => false,
            // A finished worker is news only to jobs waiting for a free one.
            Some(_) = self.running.join_next(), if self.workers.available_permits() == 0 => false,
            () = tokio::time::sleep(sleep) => true,
        };
        if quiet && folding {
            self.fold().await?;
        }
        Ok(())
    }
}
