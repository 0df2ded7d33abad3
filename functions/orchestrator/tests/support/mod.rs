//! Fakes of the orchestrator's ports shared by the SQS triggers' tests: a queue that records
//! what is sent, the orchestrator's work on it, and ports that do nothing.

#![allow(dead_code)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use overture_domain::deployment::BastionAccess;
use overture_events::{CloudAccount, DeploymentId, Timestamp};
use overture_kit::queue::{Job, QueueError, SendJobs};
use overture_kit::Clock;
use overture_orchestrator::{PurgeSecrets, RevokeAccess, WorkError};

/// A queue that keeps what is sent to it, with SQS's delay bound; clones share it.
#[derive(Clone, Default)]
pub struct SentJobs(Arc<Mutex<Vec<Job>>>);

impl SentJobs {
    /// What was sent, in order.
    pub fn jobs(&self) -> Vec<Job> {
        self.0.lock().expect("not poisoned").clone()
    }
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

/// Secrets and bastions that need nothing done.
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

/// A clock stopped at one instant.
pub struct FixedClock(pub Timestamp);

impl Clock for FixedClock {
    fn now(&self) -> Timestamp {
        self.0
    }
}

/// An instant of the fixtures' day, 2026-11-23, at `hh:mm` UTC.
pub fn at(time: &str) -> Timestamp {
    format!("2026-11-23T{time}:00Z")
        .parse()
        .expect("an instant")
}

/// A deployment of two `noop` steps, `build` and `lint`, requested by ada for acme, both
/// scheduled at 09:50.
pub fn two_steps_scheduled_at_nine_fifty() -> Vec<overture_events::DeploymentEvent> {
    use overture_events::DeploymentEvent as E;
    let blueprint = overture_domain::blueprint::parse(
        "name: x\nsteps:\n  build: { run: noop }\n  lint: { run: noop }\n",
    )
    .expect("valid")
    .snapshot;
    vec![
        E::DeploymentRequested {
            triggered_by: None,
            tenant: "acme".into(),
            requested_by: "ada".into(),
            trigger: "cli".into(),
            source: "x.yaml".into(),
            blueprint,
            blueprint_hash: "h".into(),
            params: std::collections::BTreeMap::new(),
            cloud: None,
        },
        E::StepScheduled {
            step: "build".into(),
            attempt: 1,
            not_before: at("09:50"),
        },
        E::StepScheduled {
            step: "lint".into(),
            attempt: 1,
            not_before: at("09:50"),
        },
    ]
}
