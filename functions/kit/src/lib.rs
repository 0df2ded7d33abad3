//! What every function handler shares.
//!
//! - [`DeploymentLog`]: the port through which handlers load a deployment and append its events.
//! - [`Clock`]: the port that tells the time, so handlers (and their tests) control it.
//! - [`folds::Folds`]: each deployment's last fold, for log adapters that read only what is new.
//! - [`ReadStream`]: the port through which the audit trail reads a deployment's events as
//!   recorded, envelopes and all.
//! - [`TokenCustody`]: the port that keeps a user's cloud token while their deployment runs.
//! - [`batch`]: how a trigger's batch failed, as Lambda is told: partial failures, or, when
//!   every item failed, a failed invocation whose stable error type says whether a retry helps.
//! - [`execute`]: load, decide with the aggregate, append; on a conflicting writer, load again
//!   and decide again. It keeps "the command was refused" (`Ok(Err(_))`) apart from "the
//!   outcome could not be recorded" (`Err(_)`).
//! - [`query`]: the query port ([`query::QueryDeployments`]): views, lists, tenants, the audit
//!   trail and attempts' output, read the same on every backend; `query_contract` (feature
//!   `query-contract`) the answers every query adapter must give.
//! - [`registry`]: the service registry's read port ([`registry::ReadServiceRegistry`]): a
//!   tenant's registered instances, and the deployments interested in a service.
//! - [`queue`]: the job queue's port ([`queue::SendJobs`], [`queue::ReceiveJobs`]) and its
//!   contract: at least once, unordered, not before due, delays bounded.
//! - `queue_contract` (feature `queue-contract`): the tests every queue adapter must pass, so
//!   the SQLite and the SQS queues cannot drift apart.
//! - `esrs_store` (feature `esrs`): any deployment log as an `esrs` event store.
//! - `memory` (feature `memory`): a deployment log in memory, for handlers' own tests.
//! - `contract` (feature `contract`): the tests every log adapter must pass, so the SQLite and
//!   the DynamoDB logs cannot drift apart.
//! - [`leases`]: bastion leases: the lease table's port ([`leases::LeaseBastionRules`]), the
//!   grant and revocation that go through it, an in-memory table; `leases_contract` (feature
//!   `leases-contract`) the tests every lease adapter must pass.
//! - [`payload`]: the port that keeps large, non-secret bytes (a blueprint's files) by content
//!   hash outside the log; `payload_contract` (feature `payload-contract`) its adapters' tests.
//! - `stream_record` (feature `stream-records`): a DynamoDB stream record of the event table read
//!   back into the event it carries, the one parsing the orchestrator's and the projector's
//!   triggers share.
//! - `sqs_message` (feature `sqs-messages`): an SQS message of a jobs queue read back into its
//!   job, as every trigger on those queues reads it.

pub mod batch;
#[cfg(feature = "contract")]
pub mod contract;
#[cfg(feature = "esrs")]
pub mod esrs_store;
pub mod folds;
pub mod leases;
#[cfg(feature = "leases-contract")]
pub mod leases_contract;
#[cfg(feature = "memory")]
pub mod memory;
pub mod payload;
#[cfg(feature = "payload-contract")]
pub mod payload_contract;
pub mod query;
#[cfg(feature = "query-contract")]
pub mod query_contract;
pub mod queue;
#[cfg(feature = "queue-contract")]
pub mod queue_contract;
pub mod registry;
#[cfg(feature = "sqs-messages")]
pub mod sqs_message;
#[cfg(feature = "stream-records")]
pub mod stream_record;

use async_trait::async_trait;
use overture_domain::secret::SecretString;
use overture_domain::{Deployment, DeploymentCommand, DeploymentError, DeploymentState};
use overture_events::{DeploymentEvent, DeploymentId, Envelope, Timestamp};
use uuid::Uuid;

/// The actor the orchestrator appends under. Fed records, it takes the decisions of those
/// under this name for its own, queued when it appended them: another writer's decisions
/// (a submit's first steps) must not be recorded under it.
pub const ORCHESTRATOR_ACTOR: &str = "orchestrator";

/// How often [`execute`] decides again after losing a race to another writer.
const CONFLICT_RETRIES: usize = 20;

/// Who appends events and why: the metadata every appended event carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cause {
    /// The user or function appending.
    pub actor: String,
    /// The deployment's correlation id (its id, for every event of its chain).
    pub correlation_id: Uuid,
    /// The event or request that caused these events.
    pub causation_id: Uuid,
}

impl Cause {
    /// A cause within a deployment's own chain.
    pub fn new(actor: impl Into<String>, deployment: DeploymentId, causation_id: Uuid) -> Self {
        Self {
            actor: actor.into(),
            correlation_id: deployment.uuid(),
            causation_id,
        }
    }
}

/// A deployment folded from its stream.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Loaded {
    /// Its state.
    pub state: DeploymentState,
    /// The last revision folded in; `None` when the stream does not exist.
    pub revision: Option<u64>,
}

/// Why the log could not load or append.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// Another writer appended first; load again and decide again.
    #[error(
        "deployment {deployment} was changed by another writer (expected revision {expected:?})"
    )]
    Conflict {
        deployment: DeploymentId,
        expected: Option<u64>,
    },
    /// The events of one command cannot be stored as one all-or-nothing append (too many, or
    /// one too large for the store); recording it again will not help.
    #[error("deployment {deployment}: {reason}")]
    TooLarge {
        deployment: DeploymentId,
        reason: String,
    },
    /// The request names the deployment with a name another deployment of the tenant holds
    /// (one not destroyed): nothing was recorded, and asking again will not help until that
    /// one is destroyed.
    #[error(
        "tenant `{tenant}` already has a deployment named `{name}` that is not destroyed: {holder}; \
         choose another name, or destroy {holder} first"
    )]
    NameTaken {
        tenant: String,
        name: String,
        holder: DeploymentId,
    },
    /// The log could not be read or written.
    #[error("the event log failed: {0}")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl LogError {
    /// Whether trying the same call again later may succeed.
    pub const fn is_retryable(&self) -> bool {
        !matches!(self, LogError::TooLarge { .. } | LogError::NameTaken { .. })
    }
}

/// Loads deployments and appends their events.
#[async_trait]
pub trait DeploymentLog: Send + Sync {
    /// The deployment's current state.
    async fn load(&self, deployment: DeploymentId) -> Result<Loaded, LogError>;

    /// Appends all of `events` or none, if the stream's last revision is still `expected`.
    async fn append(
        &self,
        deployment: DeploymentId,
        tenant: &str,
        expected: Option<u64>,
        events: Vec<DeploymentEvent>,
        cause: &Cause,
    ) -> Result<(), LogError>;

    /// Waits until no other task of this process is deciding on `deployment`, and keeps others
    /// waiting until the returned turn is dropped ([`execute_all`] holds it from loading to
    /// appending). Without it, attempts of one deployment finishing together all decide on the
    /// same revision and all but one append conflicts, again and again. Other processes are kept
    /// apart by the revision check of [`DeploymentLog::append`] alone, and a log that is never
    /// shared by tasks of one process need not take turns (the default).
    ///
    /// A task must not wait for a deployment's turn while a future of its own that it does not
    /// poll meanwhile may hold that turn: keep polling that future alongside (`select!`).
    async fn turn(&self, _deployment: DeploymentId) -> Option<Turn> {
        None
    }
}

/// A task's turn to decide on a deployment ([`DeploymentLog::turn`]); over when dropped.
pub type Turn = Box<dyn Send>;

/// Reads a deployment's events as recorded.
#[async_trait]
pub trait ReadStream: Send + Sync {
    /// Its events from revision `from` on, in order; none when the stream does not exist.
    async fn read_stream(
        &self,
        deployment: DeploymentId,
        from: u64,
    ) -> Result<Vec<Envelope>, LogError>;
}

/// Keeps the user's cloud token while their deployment runs: every call in their cloud and
/// every seal locked by the token needs it, and the process that was handed the token may not
/// live as long as the deployment (on AWS, no function does).
///
/// Embedded, the token stays in the memory of the process that runs the deployment; on AWS it
/// is kept encrypted under KMS, bound to the tenant and the deployment. Either way it is let go
/// of once the deployment's secrets are purged.
#[async_trait]
pub trait TokenCustody: Send + Sync {
    /// Keeps `token` for `deployment` of `tenant`, replacing what was kept.
    async fn keep(
        &self,
        deployment: DeploymentId,
        tenant: &str,
        token: &SecretString,
    ) -> Result<(), CustodyError>;
    /// The token kept for `deployment` of `tenant`, if any.
    async fn token(
        &self,
        deployment: DeploymentId,
        tenant: &str,
    ) -> Result<Option<SecretString>, CustodyError>;
    /// Lets go of the deployment's token; letting go of none succeeds.
    async fn forget(&self, deployment: DeploymentId) -> Result<(), CustodyError>;
}

/// The token could not be kept, read back or let go of; never carries the token.
#[derive(Debug, thiserror::Error)]
pub enum CustodyError {
    /// The store or the key service failed in a way that may pass.
    #[error("the token's custody failed: {0}")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// What is kept does not open for this tenant and deployment (moved, or tampered with).
    #[error("the kept token of deployment {deployment} does not open for tenant `{tenant}`")]
    Refused {
        deployment: DeploymentId,
        tenant: String,
    },
}

impl CustodyError {
    /// Whether trying the same call again later may succeed.
    pub const fn is_retryable(&self) -> bool {
        matches!(self, CustodyError::Unavailable(_))
    }
}

/// Tells the time.
pub trait Clock: Send + Sync {
    /// Now.
    fn now(&self) -> Timestamp;
}

/// Reads the machine's clock: the [`Clock`] every deployed function and the engine use (tests
/// give handlers their own).
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        chrono::Utc::now()
    }
}

/// What a successful [`execute`] recorded.
#[derive(Clone, Debug, PartialEq)]
pub struct Executed {
    /// The state after the new events.
    pub state: DeploymentState,
    /// The events appended (possibly none).
    pub events: Vec<DeploymentEvent>,
}

/// Loads the deployment, asks `command_for` what to do given its state, and appends the
/// resulting events; repeats when another writer got there first.
pub async fn execute(
    log: &dyn DeploymentLog,
    deployment: DeploymentId,
    tenant_for_new: &str,
    cause: &Cause,
    command_for: impl Fn(&DeploymentState) -> DeploymentCommand + Send,
) -> Result<Result<Executed, DeploymentError>, LogError> {
    execute_all(log, deployment, tenant_for_new, cause, move |state| {
        vec![command_for(state)]
    })
    .await
}

/// Like [`execute`] for several commands at once: each is decided on the state the ones before
/// it leave, and all their events go into one append, so they cost one commit (one disk sync)
/// instead of one each. The first refusal refuses them all and nothing is appended.
///
/// Ending a list with `Advance { now }` records what an outcome makes happen next (the steps it
/// makes ready, the deployment's end) in the same commit as the outcome.
pub async fn execute_all(
    log: &dyn DeploymentLog,
    deployment: DeploymentId,
    tenant_for_new: &str,
    cause: &Cause,
    commands_for: impl Fn(&DeploymentState) -> Vec<DeploymentCommand> + Send,
) -> Result<Result<Executed, DeploymentError>, LogError> {
    let _turn = log.turn(deployment).await;
    let mut attempts = 0;
    loop {
        let Loaded { state, revision } = log.load(deployment).await?;
        let tenant = if state.tenant.is_empty() {
            tenant_for_new.to_owned()
        } else {
            state.tenant.clone()
        };
        let (state, events) = match decide(state, &commands_for) {
            Ok(decided) => decided,
            Err(refused) => return Ok(Err(refused)),
        };
        if events.is_empty() {
            return Ok(Ok(Executed { state, events }));
        }
        match log
            .append(deployment, &tenant, revision, events.clone(), cause)
            .await
        {
            Ok(()) => return Ok(Ok(Executed { state, events })),
            Err(LogError::Conflict { .. }) if attempts < CONFLICT_RETRIES => attempts += 1,
            Err(error) => return Err(error),
        }
    }
}

/// Handles each command on the state the events before it leave; returns the state after all
/// of them and their events.
fn decide(
    mut state: DeploymentState,
    commands_for: &impl Fn(&DeploymentState) -> Vec<DeploymentCommand>,
) -> Result<(DeploymentState, Vec<DeploymentEvent>), DeploymentError> {
    let mut decided = Vec::new();
    for command in commands_for(&state) {
        let events = Deployment::handle(&state, command)?;
        state = events.iter().cloned().fold(state, Deployment::apply);
        decided.extend(events);
    }
    Ok((state, decided))
}
