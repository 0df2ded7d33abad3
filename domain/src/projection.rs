//! Read models as pure folds over the log: each deployment's status and each tenant's summary.
//!
//! [`project`] folds records of one deployment's stream into its view and returns, with the
//! view, the change to its tenant's summary ([`TenantDelta`]). It applies a record only when its
//! revision is the view's revision + 1, so a replayed record changes nothing and a record after a
//! missing one waits. [`ReadModels`] folds many streams in memory with it (a rebuild, a check).
//!
//! Views are stored incrementally: a header (everything but the steps) and one entry per step.
//! [`Projected::steps`] names the steps the folded records changed, so a store writes the header
//! and those steps only, and [`steps_of`] names the steps records may change, so a projector
//! loads only those. [`Change`] is an event decoded only as far as the views need
//! ([`Change::decode`] reads it straight from the log's text), which a rebuild folds with
//! [`ReadModels::apply_change`].
//!
//! The tenants' service registry ([`crate::registry`]) is folded in the same pass: what the
//! records register, deregister and take an interest in comes out as [`Projected::registry`]
//! (and [`ReadModels::registry`]), under the same revision rule, so a store writes it with the
//! view, once.

use std::collections::{BTreeMap, BTreeSet};

use indexmap::IndexMap;
use overture_events::deployment::SchemaError;
use overture_events::{
    CloudAccount, DeploymentEvent, DeploymentId, Envelope, ErrorClass, Timestamp,
};
use serde::{Deserialize, Serialize};

use crate::deployment::StepStatus;
use crate::registry::Registry;
use crate::tenancy::tenant_of;
pub use crate::tenancy::ProjectLabel;

/// A deployment's overall status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeploymentStatus {
    /// Steps are still being run.
    Running,
    /// Every step succeeded.
    Succeeded,
    /// A step failed for good.
    Failed,
    /// A user cancelled it.
    Cancelled,
}

impl DeploymentStatus {
    /// The name used in output and filters.
    pub const fn as_str(&self) -> &'static str {
        match self {
            DeploymentStatus::Running => "running",
            DeploymentStatus::Succeeded => "succeeded",
            DeploymentStatus::Failed => "failed",
            DeploymentStatus::Cancelled => "cancelled",
        }
    }
}

/// One step within a deployment's status.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepView {
    /// Where it stands.
    pub status: StepStatus,
    /// How many attempts have started.
    pub attempts: u32,
    /// When its first attempt started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Timestamp>,
    /// When it succeeded, failed for good or was abandoned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Timestamp>,
    /// The class of its last failed attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_class: Option<ErrorClass>,
    /// What its successful attempt produced (masked).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub outputs: BTreeMap<String, String>,
}

/// The status of one deployment: the `status --json` object.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeploymentView {
    /// The deployment id.
    pub id: DeploymentId,
    /// Its tenant: the cloud project's id ([`crate::tenancy`]), or the name a deployment made
    /// without a token was given.
    pub tenant: String,
    /// The project the tenant id stands for, for people; none without a cloud account.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<ProjectLabel>,
    /// The blueprint's name.
    pub blueprint: String,
    /// Overall status.
    pub status: DeploymentStatus,
    /// Every step, in blueprint order.
    pub steps: IndexMap<String, StepView>,
    /// When it was requested.
    pub started_at: Timestamp,
    /// When it ended.
    pub finished_at: Option<Timestamp>,
    /// Why it failed or was cancelled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Where tearing it down stands, once a user asked for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destroy: Option<DestroyView>,
    /// Every temporary grant of access the deployment held, open or closed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub grants: Vec<GrantView>,
    /// The last revision of its stream folded in.
    pub revision: u64,
}

/// A deployment view's header as stores keep it: everything but the steps, which are kept one
/// by one ([`DeploymentView::header`], [`Header::with_steps`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Header {
    /// The deployment id.
    pub id: DeploymentId,
    /// Its tenant: the cloud project's id ([`crate::tenancy`]), or the name a deployment made
    /// without a token was given.
    pub tenant: String,
    /// The project the tenant id stands for, for people; none without a cloud account.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<ProjectLabel>,
    /// The blueprint's name.
    pub blueprint: String,
    /// Overall status.
    pub status: DeploymentStatus,
    /// When it was requested.
    pub started_at: Timestamp,
    /// When it ended.
    pub finished_at: Option<Timestamp>,
    /// Why it failed or was cancelled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Where tearing it down stands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destroy: Option<DestroyView>,
    /// Its temporary grants of access.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub grants: Vec<GrantView>,
    /// The last revision of its stream folded in.
    pub revision: u64,
}

impl Header {
    /// The view of this header with these steps.
    pub fn with_steps(self, steps: IndexMap<String, StepView>) -> DeploymentView {
        DeploymentView {
            id: self.id,
            tenant: self.tenant,
            project: self.project,
            blueprint: self.blueprint,
            status: self.status,
            steps,
            started_at: self.started_at,
            finished_at: self.finished_at,
            reason: self.reason,
            destroy: self.destroy,
            grants: self.grants,
            revision: self.revision,
        }
    }
}

impl DeploymentView {
    /// Its header: everything but the steps (small, whatever the deployment's size).
    pub fn header(&self) -> Header {
        Header {
            id: self.id,
            tenant: self.tenant.clone(),
            project: self.project.clone(),
            blueprint: self.blueprint.clone(),
            status: self.status,
            started_at: self.started_at,
            finished_at: self.finished_at,
            reason: self.reason.clone(),
            destroy: self.destroy.clone(),
            grants: self.grants.clone(),
            revision: self.revision,
        }
    }
}

/// One temporary grant of access, opened by one event and closed by another: the ledger that
/// `overture grants` shows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrantView {
    /// What is granted.
    pub kind: GrantKind,
    /// What identifies it: the rule's id, the bastion, the key's fingerprint, the seal.
    pub reference: String,
    /// What it admits, for people.
    pub detail: String,
    /// When it was opened.
    pub opened_at: Timestamp,
    /// When it was closed; `None` while it is open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closed_at: Option<Timestamp>,
    /// For a bastion rule whose lease closed while other deployments still held the rule: those
    /// deployments, for which the rule was kept rather than deleted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kept_for: Vec<DeploymentId>,
}

impl GrantView {
    /// Whether the grant is still open.
    pub fn is_open(&self) -> bool {
        self.closed_at.is_none()
    }
}

/// The kinds of temporary grant a deployment holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GrantKind {
    /// A security-group rule admitting the engine to the bastion's SSH port.
    BastionRule,
    /// Forwarding through the bastion to the hosts behind it, which that rule opens.
    TcpForwarding,
    /// The deployment's own SSH key, authorized on its servers, its private half sealed.
    SshKey,
    /// The user's cloud token, sealed.
    Token,
}

impl GrantKind {
    /// The name used in output.
    pub const fn as_str(&self) -> &'static str {
        match self {
            GrantKind::BastionRule => "bastion-rule",
            GrantKind::TcpForwarding => "tcp-forwarding",
            GrantKind::SshKey => "ssh-key",
            GrantKind::Token => "token",
        }
    }

    /// Whether events of this kind are closed by `BastionAccessRevoked` (rather than by the purge).
    const fn closed_by_revocation(&self) -> bool {
        matches!(self, GrantKind::BastionRule | GrantKind::TcpForwarding)
    }
}

/// Where tearing a deployment down stands: the `destroy` object of `status --json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DestroyView {
    /// `destroying`, `destroyed` or `failed` (asking again carries on).
    pub status: DestroyStatus,
    /// When this status was reached.
    pub at: Timestamp,
    /// Why the last try failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Where tearing a deployment down stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DestroyStatus {
    /// Resources are being destroyed.
    Destroying,
    /// Every resource is gone.
    Destroyed,
    /// Destroying a step's resources failed.
    Failed,
}

impl DestroyStatus {
    /// The name used in output.
    pub const fn as_str(&self) -> &'static str {
        match self {
            DestroyStatus::Destroying => "destroying",
            DestroyStatus::Destroyed => "destroyed",
            DestroyStatus::Failed => "failed",
        }
    }
}

/// One tenant's summary: the `tenants --json` objects.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantView {
    /// The tenant.
    pub tenant: String,
    /// Deployments still running.
    pub running: u64,
    /// Deployments that succeeded.
    pub succeeded: u64,
    /// Deployments that failed.
    pub failed: u64,
    /// Deployments that were cancelled.
    pub cancelled: u64,
    /// Every deployment.
    pub total: u64,
    /// When the newest deployment was requested.
    pub last_deployment_at: Option<Timestamp>,
}

impl TenantView {
    /// A summary of no deployments yet.
    pub fn new(tenant: &str) -> Self {
        Self {
            tenant: tenant.to_owned(),
            running: 0,
            succeeded: 0,
            failed: 0,
            cancelled: 0,
            total: 0,
            last_deployment_at: None,
        }
    }
}

/// An envelope the projection cannot fold.
#[derive(Debug, thiserror::Error)]
pub enum ProjectionError {
    /// The data does not match the event schema.
    #[error(transparent)]
    Schema(#[from] overture_events::deployment::SchemaError),
    /// The stream is not a deployment stream.
    #[error(transparent)]
    Stream(#[from] overture_events::ParseIdError),
    /// A record of another deployment's stream was given with this deployment's view.
    #[error("a record of stream `{found}` cannot be folded into the view of deployment {view}")]
    OtherStream {
        /// The view's deployment.
        view: DeploymentId,
        /// The record's stream.
        found: String,
    },
}

/// What records of one deployment's stream change in its tenant's summary: counters to add (a
/// status change is one counter -1 and another +1) and, for a new deployment, when it was
/// requested. Stores apply it as atomic increments, so projectors of different deployments of
/// one tenant never overwrite each other's counts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TenantDelta {
    /// Change in deployments running.
    pub running: i64,
    /// Change in deployments that succeeded.
    pub succeeded: i64,
    /// Change in deployments that failed.
    pub failed: i64,
    /// Change in deployments that were cancelled.
    pub cancelled: i64,
    /// Change in deployments in all.
    pub total: i64,
    /// When a deployment these records start was requested; the summary keeps the newest.
    pub requested_at: Option<Timestamp>,
}

impl TenantDelta {
    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    fn counter(&mut self, status: DeploymentStatus) -> &mut i64 {
        match status {
            DeploymentStatus::Running => &mut self.running,
            DeploymentStatus::Succeeded => &mut self.succeeded,
            DeploymentStatus::Failed => &mut self.failed,
            DeploymentStatus::Cancelled => &mut self.cancelled,
        }
    }

    /// The summary after this change (a new summary for a tenant that had none).
    pub fn apply_to(&self, summary: Option<TenantView>, tenant: &str) -> TenantView {
        let mut summary = summary.unwrap_or_else(|| TenantView::new(tenant));
        self.apply_in_place(&mut summary);
        summary
    }

    /// Changes `summary` as [`Self::apply_to`] does.
    pub fn apply_in_place(&self, summary: &mut TenantView) {
        // Counters never go below zero, even on a store that lost a record it had counted.
        let add = |count: u64, change: i64| count.saturating_add_signed(change);
        summary.running = add(summary.running, self.running);
        summary.succeeded = add(summary.succeeded, self.succeeded);
        summary.failed = add(summary.failed, self.failed);
        summary.cancelled = add(summary.cancelled, self.cancelled);
        summary.total = add(summary.total, self.total);
        if let Some(at) = self.requested_at {
            summary.last_deployment_at =
                Some(summary.last_deployment_at.map_or(at, |last| last.max(at)));
        }
    }
}

/// One deployment's view after folding records of its stream in ([`project`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Projected {
    /// The view; `None` while no `DeploymentRequested` has been folded in.
    pub view: Option<DeploymentView>,
    /// What the folded records change in the tenant's summary.
    pub delta: TenantDelta,
    /// How many records were folded in.
    pub applied: usize,
    /// The revision the view needs next.
    pub next: u64,
    /// Whether a record was held back because one before it is missing.
    pub gap: bool,
    /// The steps whose views the folded records changed (every step of a view they started):
    /// with the header, all a store has to write.
    pub steps: BTreeSet<String>,
    /// What the folded records set in the tenant's service registry.
    pub registry: Registry,
}

/// Folds records of one deployment's stream into its view: only a record whose revision is
/// exactly the view's revision + 1 (0 for a deployment without a view) is applied. Records
/// already folded in change nothing; a record after a missing one, and every record after it,
/// waits (`gap`), so nothing is ever skipped. `records` must be in revision order.
pub fn project(
    view: Option<DeploymentView>,
    records: &[Envelope],
) -> Result<Projected, ProjectionError> {
    let mut projected = Projected::from_view(view);
    fold_records(&mut projected, records)?;
    Ok(projected)
}

impl Projected {
    fn from_view(view: Option<DeploymentView>) -> Self {
        Self {
            next: view.as_ref().map_or(0, |v| v.revision.saturating_add(1)),
            view,
            delta: TenantDelta::default(),
            applied: 0,
            gap: false,
            steps: BTreeSet::new(),
            registry: Registry::default(),
        }
    }
}

/// Folds `records` in as [`project`] says; on an error, what was folded before it stays.
fn fold_records(projected: &mut Projected, records: &[Envelope]) -> Result<(), ProjectionError> {
    for record in records {
        let id = DeploymentId::from_stream(&record.stream)?;
        let at = record.metadata.recorded_at;
        let change = || {
            let event = DeploymentEvent::from_parts(&record.event_type, record.data.clone())?;
            Ok(Change::from(event))
        };
        if !fold_record(projected, id, record.revision, at, change)? {
            break;
        }
    }
    Ok(())
}

/// Folds one record if it is the one the view needs next (`change` decodes it only then);
/// false when the records after it must wait: it is after a missing one, or it cannot start a
/// view (an event before a deployment's `DeploymentRequested`, which no stream holds).
fn fold_record(
    projected: &mut Projected,
    id: DeploymentId,
    revision: u64,
    at: Timestamp,
    change: impl FnOnce() -> Result<Change, ProjectionError>,
) -> Result<bool, ProjectionError> {
    if revision < projected.next {
        return Ok(true);
    }
    if revision > projected.next {
        projected.gap = true;
        return Ok(false);
    }
    if let Some(view) = projected.view.as_ref().filter(|v| v.id != id) {
        return Err(ProjectionError::OtherStream {
            view: view.id,
            found: id.stream(),
        });
    }
    let change = change()?;
    let Some(view) = projected.view.as_mut() else {
        let Change::Requested {
            tenant,
            project,
            blueprint,
            steps,
            services,
        } = change
        else {
            return Ok(false);
        };
        for (service, watched) in &services {
            projected.registry.interest(&tenant, id, service, *watched);
        }
        let steps: IndexMap<String, StepView> = steps
            .into_iter()
            .map(|name| {
                let view = StepView {
                    status: StepStatus::Pending,
                    attempts: 0,
                    started_at: None,
                    finished_at: None,
                    error_class: None,
                    outputs: BTreeMap::new(),
                };
                (name, view)
            })
            .collect();
        projected.steps.extend(steps.keys().cloned());
        projected.view = Some(DeploymentView {
            id,
            tenant,
            project,
            blueprint,
            status: DeploymentStatus::Running,
            steps,
            started_at: at,
            finished_at: None,
            reason: None,
            destroy: None,
            grants: Vec::new(),
            revision,
        });
        projected.delta.total += 1;
        projected.delta.running += 1;
        projected.delta.requested_at = Some(at);
        projected.applied += 1;
        projected.next = revision.saturating_add(1);
        return Ok(true);
    };
    view.revision = revision;
    let before = view.status;
    projected.registry.fold(&view.tenant, id, &change, at);
    fold(view, change, at, Some(&mut projected.steps));
    if view.status != before {
        *projected.delta.counter(before) -= 1;
        *projected.delta.counter(view.status) += 1;
    }
    projected.applied += 1;
    projected.next = revision.saturating_add(1);
    Ok(true)
}

/// The steps whose views `records` may change, by name: what a projector loads beside the
/// header. Read from the records' data without decoding them (a record that does not read is
/// reported when it is folded).
pub fn steps_of(records: &[Envelope]) -> BTreeSet<String> {
    let mut steps = BTreeSet::new();
    for record in records {
        if record.event_type == "DeploymentRedriven" {
            let named = record.data.get("steps").and_then(|s| s.as_array());
            steps.extend(
                named
                    .into_iter()
                    .flatten()
                    .filter_map(|s| s.as_str().map(str::to_owned)),
            );
        } else if let Some(step) = record.data.get("step").and_then(|s| s.as_str()) {
            steps.insert(step.to_owned());
        }
    }
    steps
}

/// An event decoded only as far as the read models need: what [`project`] and
/// [`ReadModels`] fold.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// `DeploymentRequested`: the view starts, its steps pending.
    Requested {
        /// The tenant: the project's id when the record has a cloud account
        /// ([`crate::tenancy::tenant_of`]).
        tenant: String,
        /// The project, for people.
        project: Option<ProjectLabel>,
        /// The blueprint's name.
        blueprint: String,
        /// The blueprint's steps, in order.
        steps: Vec<String>,
        /// The services its steps require or watch: whether some step watches each.
        services: BTreeMap<String, bool>,
    },
    /// `StepScheduled`.
    StepScheduled {
        /// The step.
        step: String,
    },
    /// `StepRetryScheduled`.
    StepRetryScheduled {
        /// The step.
        step: String,
    },
    /// `StepAwaitingServices`.
    StepAwaitingServices {
        /// The step.
        step: String,
    },
    /// `StepRerunRequested`: a watched service changed, the step runs again.
    StepRerun {
        /// The step.
        step: String,
    },
    /// `StepStarted`.
    StepStarted {
        /// The step.
        step: String,
        /// The attempt.
        attempt: u32,
    },
    /// `StepSucceeded`.
    StepSucceeded {
        /// The step.
        step: String,
        /// Its outputs (masked).
        outputs: BTreeMap<String, String>,
    },
    /// `StepAttemptFailed`.
    StepAttemptFailed {
        /// The step.
        step: String,
        /// Why the attempt failed.
        error_class: ErrorClass,
    },
    /// `StepFailed`.
    StepFailed {
        /// The step.
        step: String,
    },
    /// `StepAbandoned`.
    StepAbandoned {
        /// The step.
        step: String,
    },
    /// `DeploymentSucceeded`.
    Succeeded,
    /// `DeploymentFailed`.
    Failed {
        /// Why.
        reason: String,
    },
    /// `DeploymentCancelled`.
    Cancelled {
        /// Why.
        reason: String,
    },
    /// `DestroyRequested`.
    DestroyRequested,
    /// `StepDestroyFailed`.
    StepDestroyFailed {
        /// The step.
        step: String,
        /// The exit code, if the command exited.
        exit_code: Option<i32>,
    },
    /// `DeploymentDestroyed`.
    Destroyed,
    /// `DeploymentRedriven`.
    Redriven {
        /// The steps run again.
        steps: Vec<String>,
    },
    /// `CredentialsSealed`.
    CredentialsSealed {
        /// Where the sealed values are kept.
        seal: String,
        /// The deployment's SSH public key, if it has one.
        ssh_public_key: Option<String>,
        /// Whether the user's token is sealed too.
        token: bool,
    },
    /// `BastionAccessGranted`.
    BastionAccessGranted {
        /// The rule's id.
        rule: String,
        /// The bastion's security group.
        security_group: String,
        /// The bastion's address.
        bastion: String,
        /// The address admitted.
        source: String,
        /// The port admitted.
        port: u16,
    },
    /// `BastionAccessRevoked`.
    BastionAccessRevoked {
        /// The deployments the rule was kept for.
        kept_for: Vec<DeploymentId>,
    },
    /// `SecretsPurged`.
    SecretsPurged,
    /// `ServiceRegistered`: an instance joins the tenant's registry.
    ServiceRegistered {
        /// The service.
        service: String,
        /// The step that configured the host.
        step: String,
        /// The server.
        host: String,
        /// Where the service answers.
        address: String,
        /// Its port.
        port: u16,
    },
    /// `ServiceDeregistered`: an instance leaves it.
    ServiceDeregistered {
        /// The service.
        service: String,
        /// Where it answered.
        address: String,
        /// Its port.
        port: u16,
    },
    /// An event that changes no view.
    Nothing,
}

impl From<DeploymentEvent> for Change {
    fn from(event: DeploymentEvent) -> Self {
        use DeploymentEvent as E;
        match event {
            E::DeploymentRequested {
                tenant,
                blueprint,
                cloud,
                ..
            } => Change::Requested {
                tenant: tenant_of(&tenant, cloud.as_ref()).to_owned(),
                project: ProjectLabel::of(cloud.as_ref()),
                services: services_of(blueprint.steps.iter().map(|s| {
                    (
                        s.requires.iter().map(|need| need.service.as_str()),
                        s.watch.iter().map(String::as_str),
                    )
                })),
                steps: blueprint.steps.into_iter().map(|s| s.name).collect(),
                blueprint: blueprint.name,
            },
            E::StepScheduled { step, .. } => Change::StepScheduled { step },
            E::StepRetryScheduled { step, .. } => Change::StepRetryScheduled { step },
            E::StepAwaitingServices { step, .. } => Change::StepAwaitingServices { step },
            E::StepRerunRequested { step, .. } => Change::StepRerun { step },
            E::StepStarted { step, attempt, .. } => Change::StepStarted { step, attempt },
            E::StepSucceeded { step, outputs, .. } => Change::StepSucceeded { step, outputs },
            E::StepAttemptFailed {
                step, error_class, ..
            } => Change::StepAttemptFailed { step, error_class },
            E::StepFailed { step, .. } => Change::StepFailed { step },
            E::StepAbandoned { step, .. } => Change::StepAbandoned { step },
            E::DeploymentSucceeded {} => Change::Succeeded,
            E::DeploymentFailed { reason } => Change::Failed { reason },
            E::DeploymentCancelled { reason, .. } => Change::Cancelled { reason },
            E::DestroyRequested { .. } => Change::DestroyRequested,
            E::StepDestroyFailed {
                step, exit_code, ..
            } => Change::StepDestroyFailed { step, exit_code },
            E::DeploymentDestroyed {} => Change::Destroyed,
            E::DeploymentRedriven { steps, .. } => Change::Redriven { steps },
            E::CredentialsSealed {
                seal,
                ssh_public_key,
                token,
                ..
            } => Change::CredentialsSealed {
                seal,
                ssh_public_key,
                token,
            },
            E::BastionAccessGranted {
                rule,
                security_group,
                bastion,
                source,
                port,
            } => Change::BastionAccessGranted {
                rule,
                security_group,
                bastion,
                source,
                port,
            },
            E::BastionAccessRevoked { kept_for, .. } => Change::BastionAccessRevoked { kept_for },
            E::SecretsPurged {} => Change::SecretsPurged,
            E::ServiceRegistered {
                service,
                step,
                host,
                address,
                port,
            } => Change::ServiceRegistered {
                service,
                step,
                host,
                address,
                port,
            },
            E::ServiceDeregistered {
                service,
                address,
                port,
                ..
            } => Change::ServiceDeregistered {
                service,
                address,
                port,
            },
            // The attempt's failure, which follows, is what the view shows.
            E::StepJobDeadLettered { .. }
            | E::HostKeysPinned { .. }
            | E::StepNetworkPolicyApplied { .. }
            | E::StepDestroyed { .. }
            | E::FailureGracePeriodStarted { .. }
            | E::CancellationRequested { .. }
            // The members a step's attempt saw: the registry's own records say what changed.
            | E::ServicesResolved { .. } => Change::Nothing,
        }
    }
}

/// The fields of `DeploymentRequested` the views need.
#[derive(Deserialize)]
struct RequestedFields {
    tenant: String,
    #[serde(default)]
    cloud: Option<CloudAccount>,
    blueprint: BlueprintFields,
}

#[derive(Deserialize)]
struct BlueprintFields {
    name: String,
    steps: Vec<StepName>,
}

#[derive(Deserialize)]
struct StepName {
    name: String,
    #[serde(default)]
    requires: Vec<ServiceField>,
    #[serde(default)]
    watch: Vec<String>,
}

#[derive(Deserialize)]
struct ServiceField {
    service: String,
}

#[derive(Deserialize)]
struct RegisteredFields {
    service: String,
    step: String,
    host: String,
    address: String,
    port: u16,
}

#[derive(Deserialize)]
struct DeregisteredFields {
    service: String,
    address: String,
    port: u16,
}

/// The services steps require or watch (each step's required and watched names): whether
/// some step watches each.
fn services_of<'a, R, W>(steps: impl Iterator<Item = (R, W)>) -> BTreeMap<String, bool>
where
    R: Iterator<Item = &'a str>,
    W: Iterator<Item = &'a str>,
{
    let mut services = BTreeMap::new();
    for (requires, watch) in steps {
        for service in requires {
            services.entry(service.to_owned()).or_insert(false);
        }
        for service in watch {
            services.insert(service.to_owned(), true);
        }
    }
    services
}

#[derive(Deserialize)]
struct StepField {
    step: String,
}

#[derive(Deserialize)]
struct StartedFields {
    step: String,
    attempt: u32,
}

#[derive(Deserialize)]
struct SucceededFields {
    step: String,
    outputs: BTreeMap<String, String>,
}

#[derive(Deserialize)]
struct AttemptFailedFields {
    step: String,
    error_class: ErrorClass,
}

#[derive(Deserialize)]
struct ReasonField {
    reason: String,
}

#[derive(Deserialize)]
struct DestroyFailedFields {
    step: String,
    exit_code: Option<i32>,
}

#[derive(Deserialize)]
struct StepsField {
    steps: Vec<String>,
}

#[derive(Deserialize)]
struct SealedFields {
    seal: String,
    #[serde(default)]
    ssh_public_key: Option<String>,
    #[serde(default)]
    token: bool,
}

#[derive(Deserialize)]
struct GrantedFields {
    rule: String,
    security_group: String,
    bastion: String,
    source: String,
    port: u16,
}

#[derive(Deserialize)]
struct RevokedFields {
    #[serde(default)]
    kept_for: Vec<DeploymentId>,
}

impl Change {
    /// The steps whose views it may change, by name.
    pub fn steps(&self) -> &[String] {
        match self {
            Change::StepScheduled { step }
            | Change::StepRetryScheduled { step }
            | Change::StepAwaitingServices { step }
            | Change::StepRerun { step }
            | Change::StepStarted { step, .. }
            | Change::StepSucceeded { step, .. }
            | Change::StepAttemptFailed { step, .. }
            | Change::StepFailed { step }
            | Change::StepAbandoned { step } => std::slice::from_ref(step),
            Change::Redriven { steps } => steps,
            _ => &[],
        }
    }

    /// Reads the change of an event from its type and its data as the log stores it (JSON
    /// text), decoding only the fields the views need: the fast path of a rebuild. It agrees
    /// with decoding the whole [`DeploymentEvent`] and converting it.
    pub fn decode(event_type: &str, data: &str) -> Result<Change, ProjectionError> {
        fn read<'a, T: Deserialize<'a>>(event_type: &str, data: &'a str) -> Result<T, SchemaError> {
            serde_json::from_str(data).map_err(|source| SchemaError {
                event_type: event_type.to_owned(),
                source,
            })
        }
        let change = match event_type {
            "DeploymentRequested" => {
                let fields: RequestedFields = read(event_type, data)?;
                let steps = &fields.blueprint.steps;
                Change::Requested {
                    tenant: tenant_of(&fields.tenant, fields.cloud.as_ref()).to_owned(),
                    project: ProjectLabel::of(fields.cloud.as_ref()),
                    services: services_of(steps.iter().map(|s| {
                        (
                            s.requires.iter().map(|need| need.service.as_str()),
                            s.watch.iter().map(String::as_str),
                        )
                    })),
                    blueprint: fields.blueprint.name,
                    steps: fields.blueprint.steps.into_iter().map(|s| s.name).collect(),
                }
            }
            "StepScheduled" => Change::StepScheduled {
                step: read::<StepField>(event_type, data)?.step,
            },
            "StepRetryScheduled" => Change::StepRetryScheduled {
                step: read::<StepField>(event_type, data)?.step,
            },
            "StepAwaitingServices" => Change::StepAwaitingServices {
                step: read::<StepField>(event_type, data)?.step,
            },
            "StepRerunRequested" => Change::StepRerun {
                step: read::<StepField>(event_type, data)?.step,
            },
            "StepStarted" => {
                let fields: StartedFields = read(event_type, data)?;
                Change::StepStarted {
                    step: fields.step,
                    attempt: fields.attempt,
                }
            }
            "StepSucceeded" => {
                let fields: SucceededFields = read(event_type, data)?;
                Change::StepSucceeded {
                    step: fields.step,
                    outputs: fields.outputs,
                }
            }
            "StepAttemptFailed" => {
                let fields: AttemptFailedFields = read(event_type, data)?;
                Change::StepAttemptFailed {
                    step: fields.step,
                    error_class: fields.error_class,
                }
            }
            "StepFailed" => Change::StepFailed {
                step: read::<StepField>(event_type, data)?.step,
            },
            "StepAbandoned" => Change::StepAbandoned {
                step: read::<StepField>(event_type, data)?.step,
            },
            "DeploymentSucceeded" => Change::Succeeded,
            "DeploymentFailed" => Change::Failed {
                reason: read::<ReasonField>(event_type, data)?.reason,
            },
            "DeploymentCancelled" => Change::Cancelled {
                reason: read::<ReasonField>(event_type, data)?.reason,
            },
            "DestroyRequested" => Change::DestroyRequested,
            "StepDestroyFailed" => {
                let fields: DestroyFailedFields = read(event_type, data)?;
                Change::StepDestroyFailed {
                    step: fields.step,
                    exit_code: fields.exit_code,
                }
            }
            "DeploymentDestroyed" => Change::Destroyed,
            "DeploymentRedriven" => Change::Redriven {
                steps: read::<StepsField>(event_type, data)?.steps,
            },
            "CredentialsSealed" => {
                let fields: SealedFields = read(event_type, data)?;
                Change::CredentialsSealed {
                    seal: fields.seal,
                    ssh_public_key: fields.ssh_public_key,
                    token: fields.token,
                }
            }
            "BastionAccessGranted" => {
                let fields: GrantedFields = read(event_type, data)?;
                Change::BastionAccessGranted {
                    rule: fields.rule,
                    security_group: fields.security_group,
                    bastion: fields.bastion,
                    source: fields.source,
                    port: fields.port,
                }
            }
            "BastionAccessRevoked" => Change::BastionAccessRevoked {
                kept_for: read::<RevokedFields>(event_type, data)?.kept_for,
            },
            "SecretsPurged" => Change::SecretsPurged,
            "ServiceRegistered" => {
                let fields: RegisteredFields = read(event_type, data)?;
                Change::ServiceRegistered {
                    service: fields.service,
                    step: fields.step,
                    host: fields.host,
                    address: fields.address,
                    port: fields.port,
                }
            }
            "ServiceDeregistered" => {
                let fields: DeregisteredFields = read(event_type, data)?;
                Change::ServiceDeregistered {
                    service: fields.service,
                    address: fields.address,
                    port: fields.port,
                }
            }
            "StepJobDeadLettered"
            | "HostKeysPinned"
            | "StepNetworkPolicyApplied"
            | "StepDestroyed"
            | "FailureGracePeriodStarted"
            | "CancellationRequested"
            | "ServicesResolved" => Change::Nothing,
            // Not a type this build knows: the whole decoding says why.
            _ => {
                let data = read::<serde_json::Value>(event_type, data)?;
                DeploymentEvent::from_parts(event_type, data)?.into()
            }
        };
        Ok(change)
    }
}

/// One record of the log as a rebuild folds it: whose, which revision, when, and its change.
#[derive(Clone, Debug, PartialEq)]
pub struct Folding {
    /// The deployment whose stream holds it.
    pub deployment: DeploymentId,
    /// Its revision in that stream.
    pub revision: u64,
    /// When the log recorded it.
    pub at: Timestamp,
    /// What it changes.
    pub change: Change,
}

/// The steps of one deployment's view that a rebuild's folds changed: what a store writes
/// beside the header.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChangedSteps {
    /// The folds started the view, so every step of it is new; `named` is then left empty, as
    /// a rebuild starts hundreds of thousands of steps.
    pub all: bool,
    /// The steps changed, when not `all`.
    pub named: BTreeSet<String>,
}

impl ChangedSteps {
    /// Whether the step named `name` changed.
    pub fn contains(&self, name: &str) -> bool {
        self.all || self.named.contains(name)
    }
}

/// The steps whose views a rebuild's folds changed, by deployment.
pub type Touched = BTreeMap<DeploymentId, ChangedSteps>;

/// Many deployments' and tenants' views, folded in memory: what a rebuild folds the whole log
/// into, batch by batch, and what `replay --check` compares the stored views with. It folds
/// with [`project`], as the projector does stream by stream, so both agree.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReadModels {
    /// Deployment views by id.
    pub deployments: BTreeMap<DeploymentId, DeploymentView>,
    /// Tenant views by tenant.
    pub tenants: BTreeMap<String, TenantView>,
    /// The service registry rows the folds set (in a rebuild's batch: what it writes; folded
    /// from the whole log: the whole registry).
    pub registry: Registry,
}

impl ReadModels {
    /// Folds one envelope in. Envelopes a view has already seen, and those after a missing one
    /// or before a deployment's `DeploymentRequested`, change nothing.
    pub fn apply(&mut self, envelope: &Envelope) -> Result<(), ProjectionError> {
        let id = DeploymentId::from_stream(&envelope.stream)?;
        self.fold_one(id, |projected| {
            fold_records(projected, std::slice::from_ref(envelope))
        })
        .map(|_| ())
    }

    /// Folds one record decoded as far as the views need, as [`Self::apply`] folds its
    /// envelope, and adds the steps it changed to `touched`. The view is changed where it is
    /// kept: a rebuild folds millions of records.
    pub fn apply_change(&mut self, folding: Folding, touched: &mut Touched) {
        let Folding {
            deployment,
            revision,
            at,
            change,
        } = folding;
        let Some(view) = self.deployments.get_mut(&deployment) else {
            // Only a deployment's first record starts its view.
            if revision == 0 {
                let _ = self.fold_one(deployment, |projected| {
                    fold_record(projected, deployment, revision, at, || Ok(change)).map(|_| ())
                });
                if self.deployments.contains_key(&deployment) {
                    touched.entry(deployment).or_default().all = true;
                }
            }
            return;
        };
        // Records already folded and records after a missing one change nothing.
        if Some(revision) != view.revision.checked_add(1) {
            return;
        }
        view.revision = revision;
        let before = view.status;
        self.registry.fold(&view.tenant, deployment, &change, at);
        let changed = touched.entry(deployment).or_default();
        let named = (!changed.all).then_some(&mut changed.named);
        fold(view, change, at, named);
        if view.status != before {
            let mut delta = TenantDelta::default();
            *delta.counter(before) -= 1;
            *delta.counter(view.status) += 1;
            match self.tenants.get_mut(&view.tenant) {
                Some(summary) => delta.apply_in_place(summary),
                None => {
                    let summary = delta.apply_to(None, &view.tenant);
                    self.tenants.insert(view.tenant.clone(), summary);
                }
            }
        }
    }

    fn fold_one(
        &mut self,
        id: DeploymentId,
        fold: impl FnOnce(&mut Projected) -> Result<(), ProjectionError>,
    ) -> Result<BTreeSet<String>, ProjectionError> {
        // Taken out and put back rather than cloned: a rebuild folds millions of records.
        let mut projected = Projected::from_view(self.deployments.remove(&id));
        let folded = fold(&mut projected);
        if let Some(view) = projected.view {
            if !projected.delta.is_empty() {
                let summary = self.tenants.remove(&view.tenant);
                let summary = projected.delta.apply_to(summary, &view.tenant);
                self.tenants.insert(view.tenant.clone(), summary);
            }
            self.deployments.insert(id, view);
        }
        self.registry.merge(projected.registry);
        folded.map(|()| projected.steps)
    }
}

/// Folds `change` into `view`, adding the steps it changes to `touched` (`None`: they are
/// written anyway).
fn fold(
    view: &mut DeploymentView,
    change: Change,
    at: Timestamp,
    mut touched: Option<&mut BTreeSet<String>>,
) {
    let mut step = |name: String, change: &mut dyn FnMut(&mut StepView)| {
        if let Some(s) = view.steps.get_mut(&name) {
            change(s);
            if let Some(touched) = touched.as_mut() {
                touched.insert(name);
            }
        }
    };
    match change {
        Change::StepScheduled { step: name } => {
            step(name, &mut |s| s.status = StepStatus::Scheduled)
        }
        Change::StepRetryScheduled { step: name } => {
            step(name, &mut |s| s.status = StepStatus::Retrying)
        }
        Change::StepAwaitingServices { step: name } => {
            step(name, &mut |s| s.status = StepStatus::Awaiting)
        }
        // Its outputs stay until the new attempt replaces them: nothing else runs again.
        Change::StepRerun { step: name } => {
            step(name, &mut |s| {
                s.status = StepStatus::Pending;
                s.finished_at = None;
            });
            view.status = DeploymentStatus::Running;
            view.reason = None;
            view.finished_at = None;
        }
        Change::StepStarted {
            step: name,
            attempt,
        } => step(name, &mut |s| {
            s.status = StepStatus::Running;
            s.attempts = s.attempts.max(attempt);
            s.started_at.get_or_insert(at);
        }),
        Change::StepSucceeded {
            step: name,
            outputs,
        } => {
            let mut outputs = Some(outputs);
            step(name, &mut |s| {
                s.status = StepStatus::Succeeded;
                s.outputs = outputs.take().unwrap_or_default();
                s.finished_at = Some(at);
            })
        }
        Change::StepAttemptFailed {
            step: name,
            error_class,
        } => step(name, &mut |s| s.error_class = Some(error_class)),
        Change::StepFailed { step: name } => step(name, &mut |s| {
            s.status = StepStatus::Failed;
            s.finished_at = Some(at);
        }),
        Change::StepAbandoned { step: name } => step(name, &mut |s| {
            s.status = StepStatus::Abandoned;
            s.finished_at = Some(at);
        }),
        Change::Succeeded => finish(view, DeploymentStatus::Succeeded, None, at),
        Change::Failed { reason } => finish(view, DeploymentStatus::Failed, Some(reason), at),
        Change::Cancelled { reason } => finish(view, DeploymentStatus::Cancelled, Some(reason), at),
        Change::DestroyRequested => set_destroy(view, DestroyStatus::Destroying, None, at),
        Change::StepDestroyFailed {
            step: name,
            exit_code,
        } => {
            let how = exit_code.map_or_else(String::new, |code| format!(" (exit code {code})"));
            let reason = format!("destroying step `{name}` failed{how}");
            set_destroy(view, DestroyStatus::Failed, Some(reason), at)
        }
        Change::Destroyed => set_destroy(view, DestroyStatus::Destroyed, None, at),
        Change::Redriven { steps } => {
            for name in steps {
                step(name, &mut |s| {
                    s.status = StepStatus::Pending;
                    s.finished_at = None;
                    s.outputs.clear();
                });
            }
            view.status = DeploymentStatus::Running;
            view.reason = None;
            view.finished_at = None;
        }
        Change::CredentialsSealed {
            seal,
            ssh_public_key,
            token,
        } => {
            if let Some(key) = ssh_public_key {
                let detail =
                    "the deployment's SSH key: public half on its servers, private half sealed";
                open_grant(
                    view,
                    GrantKind::SshKey,
                    key_fingerprint(&key),
                    detail.into(),
                    at,
                );
            }
            if token {
                let detail = "the user's cloud token, sealed under a key it derives";
                open_grant(view, GrantKind::Token, seal, detail.into(), at);
            }
        }
        Change::BastionAccessGranted {
            rule,
            security_group,
            bastion,
            source,
            port,
        } => {
            let detail = format!(
                "tcp/{port} from {source} to bastion {bastion} (security group {security_group})"
            );
            open_grant(view, GrantKind::BastionRule, rule, detail, at);
            let detail = format!("SSH forwarding through {bastion} to the deployment's hosts");
            open_grant(view, GrantKind::TcpForwarding, bastion, detail, at);
        }
        Change::BastionAccessRevoked { kept_for } => {
            for grant in view
                .grants
                .iter_mut()
                .filter(|g| g.is_open() && g.kind == GrantKind::BastionRule)
            {
                grant.kept_for.clone_from(&kept_for);
            }
            close_grants(view, GrantKind::closed_by_revocation, at);
        }
        Change::SecretsPurged => close_grants(view, |kind| !kind.closed_by_revocation(), at),
        Change::Requested { .. }
        | Change::ServiceRegistered { .. }
        | Change::ServiceDeregistered { .. }
        | Change::Nothing => {}
    }
}

fn open_grant(
    view: &mut DeploymentView,
    kind: GrantKind,
    reference: String,
    detail: String,
    at: Timestamp,
) {
    view.grants.push(GrantView {
        kind,
        reference,
        detail,
        opened_at: at,
        closed_at: None,
        kept_for: Vec::new(),
    });
}

fn close_grants(view: &mut DeploymentView, which: impl Fn(&GrantKind) -> bool, at: Timestamp) {
    for grant in view
        .grants
        .iter_mut()
        .filter(|g| g.is_open() && which(&g.kind))
    {
        grant.closed_at = Some(at);
    }
}

/// A short, stable name for a public key: the start of the SHA-256 of its OpenSSH text.
fn key_fingerprint(public_key: &str) -> String {
    use sha2::{Digest, Sha256};
    let algorithm = public_key.split_whitespace().next().unwrap_or("key");
    let digest = hex::encode(Sha256::digest(public_key.trim().as_bytes()));
    format!("{algorithm} {}", &digest[..16])
}

fn set_destroy(
    view: &mut DeploymentView,
    status: DestroyStatus,
    reason: Option<String>,
    at: Timestamp,
) {
    view.destroy = Some(DestroyView { status, at, reason });
}

fn finish(
    view: &mut DeploymentView,
    status: DeploymentStatus,
    reason: Option<String>,
    at: Timestamp,
) {
    view.status = status;
    view.reason = reason;
    view.finished_at = Some(at);
}
