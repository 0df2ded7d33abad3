//! What the orchestrator's tests share: fakes of its ports (a queue that records what is sent,
//! one that cannot be reached, ports that do nothing, a stopped clock), the fixtures' day and
//! deployment, and the histories they start from, built with the domain's test kit.

#![allow(dead_code)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use overture_domain::deployment::BastionAccess;
use overture_domain::testing::events::{blueprint, requested};
use overture_events::{CloudAccount, DeploymentEvent as E, DeploymentId, Timestamp};
use overture_kit::memory::MemoryLog;
use overture_kit::queue::{Job, QueueError, SendJobs};
use overture_kit::{Cause, Clock, DeploymentLog};
use overture_orchestrator::{
    OrchestratorPorts, PurgeSecrets, QueueWork, RevokeAccess, WaitingAttempt, WorkError,
};

/// The deployment the JSON fixtures speak of.
pub const DEPLOYMENT: &str = "01a20800-0000-7000-8000-000000000001";

/// [`DEPLOYMENT`], parsed.
pub fn deployment() -> DeploymentId {
    DEPLOYMENT.parse().expect("an id")
}

/// A queue that keeps what is sent to it, with SQS's delay bound; clones share it.
#[derive(Clone, Default)]
pub struct SentJobs(Arc<Mutex<Vec<Job>>>);

impl SentJobs {
    /// What was sent, in order.
    pub fn jobs(&self) -> Vec<Job> {
        self.0.lock().expect("not poisoned").clone()
    }
}

/// Attempts and timers on queues of their own, as the stack sends them.
pub fn queues_apart() -> overture_orchestrator::queued::QueueOn<SentJobs> {
    overture_orchestrator::queued::QueueOn {
        attempts: SentJobs::default(),
        timers: SentJobs::default(),
    }
}

/// The messages a batch's answer gives back to be delivered again, by id.
pub fn kept(response: &aws_lambda_events::event::sqs::SqsBatchResponse) -> Vec<&str> {
    response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.as_str())
        .collect()
}

#[async_trait]
impl SendJobs for SentJobs {
    fn max_delay(&self) -> Option<Duration> {
        Some(Duration::from_secs(900))
    }
    async fn send(&self, jobs: Vec<Job>) -> Result<(), QueueError> {
        self.0.lock().expect("not poisoned").extend(jobs);
        Ok(())
    }
}

/// A queue that cannot be reached.
pub struct Throttled;

#[derive(Debug, thiserror::Error)]
#[error("throttled")]
struct ThrottledError;

#[async_trait]
impl SendJobs for Throttled {
    fn max_delay(&self) -> Option<Duration> {
        Some(Duration::from_secs(900))
    }
    async fn send(&self, _: Vec<Job>) -> Result<(), QueueError> {
        Err(QueueError::Unavailable(Box::new(ThrottledError)))
    }
}

/// The orchestrator's work as it asked for it: each batch of attempts (with its deployment and
/// cause) and each timer (with its deployment), in order.
#[derive(Default)]
pub struct Queued {
    /// Each call to queue attempts.
    pub attempts: Mutex<Vec<(DeploymentId, Vec<WaitingAttempt>, uuid::Uuid)>>,
    /// Each timer set.
    pub wakes: Mutex<Vec<(DeploymentId, Timestamp)>>,
}

impl Queued {
    /// The attempts queued so far, one by one, in order.
    pub fn attempts(&self) -> Vec<WaitingAttempt> {
        let calls = self.attempts.lock().expect("not poisoned");
        calls.iter().flat_map(|(_, a, _)| a.clone()).collect()
    }

    /// The attempts queued since the last take, as (step, attempt), sorted.
    pub fn take(&self) -> Vec<(String, u32)> {
        let calls = std::mem::take(&mut *self.attempts.lock().expect("not poisoned"));
        let mut queued: Vec<_> = calls
            .into_iter()
            .flat_map(|(_, a, _)| a)
            .map(|a| (a.step, a.attempt))
            .collect();
        queued.sort();
        queued
    }

    /// The timers set so far.
    pub fn wakes(&self) -> Vec<(DeploymentId, Timestamp)> {
        self.wakes.lock().expect("not poisoned").clone()
    }

    /// The timers set since the last take.
    pub fn take_wakes(&self) -> Vec<(DeploymentId, Timestamp)> {
        std::mem::take(&mut *self.wakes.lock().expect("not poisoned"))
    }
}

#[async_trait]
impl QueueWork for Queued {
    async fn run_attempts(
        &self,
        deployment: DeploymentId,
        attempts: &[WaitingAttempt],
        cause: uuid::Uuid,
    ) -> Result<(), WorkError> {
        self.attempts
            .lock()
            .expect("not poisoned")
            .push((deployment, attempts.to_vec(), cause));
        Ok(())
    }

    async fn wake_at(
        &self,
        deployment: DeploymentId,
        at: Timestamp,
        _: uuid::Uuid,
    ) -> Result<(), WorkError> {
        self.wakes
            .lock()
            .expect("not poisoned")
            .push((deployment, at));
        Ok(())
    }
}

/// Secrets and bastions that need nothing done, and a clock stopped at the Unix epoch.
pub struct Nothing;

#[async_trait]
impl PurgeSecrets for Nothing {
    async fn purge(&self, _: DeploymentId) -> Result<(), WorkError> {
        Ok(())
    }
}

#[async_trait]
impl RevokeAccess for Nothing {
    async fn revoke(
        &self,
        _: DeploymentId,
        _: &CloudAccount,
        _: &BastionAccess,
    ) -> Result<overture_orchestrator::Revocation, WorkError> {
        Ok(overture_orchestrator::Revocation::Deleted)
    }

    async fn revoke_unrecorded(
        &self,
        _: DeploymentId,
        _: &CloudAccount,
        _: Option<&BastionAccess>,
    ) -> Result<usize, WorkError> {
        Ok(0)
    }
}

/// A registry in which nothing is registered and nobody waits.
#[async_trait]
impl overture_orchestrator::ServiceDirectory for Nothing {
    async fn instances(
        &self,
        _: &str,
    ) -> Result<Vec<overture_domain::services::RegisteredInstance>, WorkError> {
        Ok(vec![])
    }

    async fn interested(&self, _: &str, _: &str) -> Result<Vec<DeploymentId>, WorkError> {
        Ok(vec![])
    }
}

impl Clock for Nothing {
    fn now(&self) -> Timestamp {
        Timestamp::UNIX_EPOCH
    }
}

/// A clock stopped at one instant.
pub struct FixedClock(pub Timestamp);

impl Clock for FixedClock {
    fn now(&self) -> Timestamp {
        self.0
    }
}

/// The orchestrator's ports on this log, queue and clock; secrets, bastions and the registry
/// need nothing done.
pub fn ports<'a>(
    log: &'a dyn DeploymentLog,
    work: &'a dyn QueueWork,
    clock: &'a dyn Clock,
) -> OrchestratorPorts<'a> {
    OrchestratorPorts {
        log,
        work,
        secrets: &Nothing,
        access: &Nothing,
        services: &Nothing,
        clock,
    }
}

/// Appends the events to the deployment's stream of tenant `acme` in one append, as `actor`.
pub async fn record(log: &MemoryLog, deployment: DeploymentId, actor: &str, events: Vec<E>) {
    let cause = Cause::new(actor, deployment, uuid::Uuid::now_v7());
    log.append(deployment, "acme", None, events, &cause)
        .await
        .expect("recorded");
}

/// An instant of the fixtures' day, 2026-11-23, at `hh:mm` UTC.
pub fn at(time: &str) -> Timestamp {
    format!("2026-11-23T{time}:00Z")
        .parse()
        .expect("an instant")
}

/// The step's attempt was scheduled to start at `not_before`.
pub fn scheduled_at(step: &str, attempt: u32, not_before: Timestamp) -> E {
    E::StepScheduled {
        step: step.into(),
        attempt,
        not_before,
    }
}

/// A deployment of two `noop` steps, `build` and `lint`, requested by ada for acme, both
/// scheduled at 09:50.
pub fn two_steps_scheduled_at_nine_fifty() -> Vec<E> {
    vec![
        requested(
            "x.yaml",
            blueprint("name: x\nsteps:\n  build: { run: noop }\n  lint: { run: noop }\n"),
        ),
        scheduled_at("build", 1, at("09:50")),
        scheduled_at("lint", 1, at("09:50")),
    ]
}
