//! Read models as pure folds over the log: each deployment's status and each tenant's summary.
//!
//! [`project`] folds records of one deployment's stream into its view and returns, with the
//! view, the change to its tenant's summary ([`TenantDelta`]). It applies a record only when its
//! revision is the view's revision + 1, so a replayed record changes nothing and a record after a
//! missing one waits. [`ReadModels`] folds many streams in memory with it (a rebuild, a check).

use std::collections::BTreeMap;

use indexmap::IndexMap;
use overture_events::{DeploymentEvent, DeploymentId, Envelope, ErrorClass, Timestamp};
use serde::{Deserialize, Serialize};

use crate::deployment::StepStatus;

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
    /// Its tenant.
    pub tenant: String,
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
        summary
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
            next: view.as_ref().map_or(0, |v| v.revision + 1),
            view,
            delta: TenantDelta::default(),
            applied: 0,
            gap: false,
        }
    }
}

/// Folds `records` in as [`project`] says; on an error, what was folded before it stays.
fn fold_records(projected: &mut Projected, records: &[Envelope]) -> Result<(), ProjectionError> {
    for record in records {
        if record.revision < projected.next {
            continue;
        }
        if record.revision > projected.next {
            projected.gap = true;
            break;
        }
        if !fold_record(projected, record)? {
            break;
        }
    }
    Ok(())
}

/// Folds the record the view needs next; false when it cannot start a view (an event before a
/// deployment's `DeploymentRequested`, which no stream holds).
fn fold_record(projected: &mut Projected, envelope: &Envelope) -> Result<bool, ProjectionError> {
    let id = DeploymentId::from_stream(&envelope.stream)?;
    let event = DeploymentEvent::from_parts(&envelope.event_type, envelope.data.clone())?;
    let at = envelope.metadata.recorded_at;
    if let Some(view) = projected.view.as_ref().filter(|v| v.id != id) {
        return Err(ProjectionError::OtherStream {
            view: view.id,
            found: envelope.stream.clone(),
        });
    }
    let Some(view) = projected.view.as_mut() else {
        let DeploymentEvent::DeploymentRequested {
            tenant, blueprint, ..
        } = &event
        else {
            return Ok(false);
        };
        let steps = blueprint
            .steps
            .iter()
            .map(|s| {
                let view = StepView {
                    status: StepStatus::Pending,
                    attempts: 0,
                    started_at: None,
                    finished_at: None,
                    error_class: None,
                    outputs: BTreeMap::new(),
                };
                (s.name.clone(), view)
            })
            .collect();
        projected.view = Some(DeploymentView {
            id,
            tenant: tenant.clone(),
            blueprint: blueprint.name.clone(),
            status: DeploymentStatus::Running,
            steps,
            started_at: at,
            finished_at: None,
            reason: None,
            destroy: None,
            grants: Vec::new(),
            revision: envelope.revision,
        });
        projected.delta.total += 1;
        projected.delta.running += 1;
        projected.delta.requested_at = Some(at);
        projected.applied += 1;
        projected.next = envelope.revision + 1;
        return Ok(true);
    };
    view.revision = envelope.revision;
    let before = view.status;
    fold(view, event, at);
    if view.status != before {
        *projected.delta.counter(before) -= 1;
        *projected.delta.counter(view.status) += 1;
    }
    projected.applied += 1;
    projected.next = envelope.revision + 1;
    Ok(true)
}

/// Many deployments' and tenants' views, folded in memory: what a rebuild folds the whole log
/// into, batch by batch, and what `replay --check` compares the stored views with. It folds
/// with [`project`], as the projector does stream by stream, so both agree.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReadModels {
    /// Deployment views by id.
    pub deployments: BTreeMap<DeploymentId, DeploymentView>,
    /// Tenant views by tenant.
    pub tenants: BTreeMap<String, TenantView>,
}

impl ReadModels {
    /// Folds one envelope in. Envelopes a view has already seen, and those after a missing one
    /// or before a deployment's `DeploymentRequested`, change nothing.
    pub fn apply(&mut self, envelope: &Envelope) -> Result<(), ProjectionError> {
        let id = DeploymentId::from_stream(&envelope.stream)?;
        // Taken out and put back rather than cloned: a rebuild folds millions of records.
        let mut projected = Projected::from_view(self.deployments.remove(&id));
        let folded = fold_records(&mut projected, std::slice::from_ref(envelope));
        if let Some(view) = projected.view {
            if !projected.delta.is_empty() {
                let summary = self.tenants.remove(&view.tenant);
                let summary = projected.delta.apply_to(summary, &view.tenant);
                self.tenants.insert(view.tenant.clone(), summary);
            }
            self.deployments.insert(id, view);
        }
        folded
    }
}

fn fold(view: &mut DeploymentView, event: DeploymentEvent, at: Timestamp) {
    use DeploymentEvent as E;
    let mut step = |name: &str, change: &mut dyn FnMut(&mut StepView)| {
        if let Some(s) = view.steps.get_mut(name) {
            change(s);
        }
    };
    match event {
        E::StepScheduled { step: name, .. } => {
            step(&name, &mut |s| s.status = StepStatus::Scheduled)
        }
        E::StepRetryScheduled { step: name, .. } => {
            step(&name, &mut |s| s.status = StepStatus::Retrying)
        }
        E::StepStarted {
            step: name,
            attempt,
            ..
        } => step(&name, &mut |s| {
            s.status = StepStatus::Running;
            s.attempts = s.attempts.max(attempt);
            s.started_at.get_or_insert(at);
        }),
        E::StepSucceeded {
            step: name,
            outputs,
            ..
        } => step(&name, &mut |s| {
            s.status = StepStatus::Succeeded;
            s.outputs = outputs.clone();
            s.finished_at = Some(at);
        }),
        E::StepAttemptFailed {
            step: name,
            error_class,
            ..
        } => step(&name, &mut |s| s.error_class = Some(error_class)),
        E::StepFailed { step: name, .. } => step(&name, &mut |s| {
            s.status = StepStatus::Failed;
            s.finished_at = Some(at);
        }),
        E::StepAbandoned { step: name, .. } => step(&name, &mut |s| {
            s.status = StepStatus::Abandoned;
            s.finished_at = Some(at);
        }),
        E::DeploymentSucceeded {} => finish(view, DeploymentStatus::Succeeded, None, at),
        E::DeploymentFailed { reason } => finish(view, DeploymentStatus::Failed, Some(reason), at),
        E::DeploymentCancelled { reason, .. } => {
            finish(view, DeploymentStatus::Cancelled, Some(reason), at)
        }
        E::DestroyRequested { .. } => set_destroy(view, DestroyStatus::Destroying, None, at),
        E::StepDestroyFailed {
            step: name,
            exit_code,
            ..
        } => {
            let how = exit_code.map_or_else(String::new, |code| format!(" (exit code {code})"));
            let reason = format!("destroying step `{name}` failed{how}");
            set_destroy(view, DestroyStatus::Failed, Some(reason), at)
        }
        E::DeploymentDestroyed {} => set_destroy(view, DestroyStatus::Destroyed, None, at),
        E::DeploymentRedriven { steps, .. } => {
            for name in &steps {
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
        E::StepNetworkPolicyApplied { .. } => {}
        E::CredentialsSealed {
            seal,
            ssh_public_key,
            token,
            ..
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
        E::BastionAccessGranted {
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
        E::BastionAccessRevoked { kept_for, .. } => {
            for grant in view
                .grants
                .iter_mut()
                .filter(|g| g.is_open() && g.kind == GrantKind::BastionRule)
            {
                grant.kept_for.clone_from(&kept_for);
            }
            close_grants(view, GrantKind::closed_by_revocation, at);
        }
        E::SecretsPurged {} => close_grants(view, |kind| !kind.closed_by_revocation(), at),
        // The attempt's failure, which follows, is what the view shows.
        E::StepJobDeadLettered { .. } | E::HostKeysPinned { .. } => {}
        E::DeploymentRequested { .. }
        | E::StepDestroyed { .. }
        | E::FailureGracePeriodStarted { .. }
        | E::CancellationRequested { .. } => {}
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
