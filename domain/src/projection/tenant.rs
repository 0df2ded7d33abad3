//! A tenant's summary (`tenants --json`) and the deltas that folding one deployment's records
//! adds to it.

use overture_events::Timestamp;
use serde::{Deserialize, Serialize};

use super::DeploymentStatus;

/// One tenant's summary: the `tenants --json` objects.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = DateTime))]
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

    pub(super) fn counter(&mut self, status: DeploymentStatus) -> &mut i64 {
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
