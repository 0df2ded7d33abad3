//! The temporary grants of access deployments held, one row each.

use overture_domain::projection::{DeploymentStatus, DeploymentView, GrantView};
use overture_events::DeploymentId;
use serde::Serialize;

/// One row of the grants ledger: a grant and the deployment that held it.
#[derive(Debug, Serialize)]
pub struct GrantRow {
    /// The deployment.
    pub deployment: DeploymentId,
    /// Its tenant.
    pub tenant: String,
    /// Whether the deployment has ended: a grant still open then is a defect.
    pub deployment_ended: bool,
    /// The grant.
    #[serde(flatten)]
    pub grant: GrantView,
}

/// The grants of these deployments, oldest first; only open ones when `open_only`.
pub fn grant_rows(views: &[DeploymentView], open_only: bool) -> Vec<GrantRow> {
    let mut rows: Vec<GrantRow> = views
        .iter()
        .flat_map(|view| {
            view.grants.iter().map(|grant| GrantRow {
                deployment: view.id,
                tenant: view.tenant.clone(),
                deployment_ended: view.status != DeploymentStatus::Running,
                grant: grant.clone(),
            })
        })
        .filter(|row| !open_only || row.grant.is_open())
        .collect();
    rows.sort_by_key(|row| row.grant.opened_at);
    rows
}
