//! `overture list`: deployments, newest first.

use clap::ValueEnum;
use overture_domain::projection::DeploymentStatus;
use overture_kit::query::DeploymentFilter;

use crate::backend::Backend;
use crate::{render, Failure};

/// `overture list`.
#[derive(clap::Args)]
pub struct ListArgs {
    #[arg(long)]
    tenant: Option<String>,
    /// Only deployments with this status.
    #[arg(long, value_enum)]
    status: Option<StatusFilter>,
    #[arg(long)]
    json: bool,
}

/// The statuses `--status` takes.
#[derive(Clone, Copy, ValueEnum)]
enum StatusFilter {
    Running,
    Succeeded,
    Failed,
    Cancelled,
}

impl ListArgs {
    /// Prints the deployments.
    pub async fn run(self, backend: &dyn Backend) -> Result<(), Failure> {
        let queries = backend.queries().await?;
        let status = self.status.map(|s| match s {
            StatusFilter::Running => DeploymentStatus::Running,
            StatusFilter::Succeeded => DeploymentStatus::Succeeded,
            StatusFilter::Failed => DeploymentStatus::Failed,
            StatusFilter::Cancelled => DeploymentStatus::Cancelled,
        });
        let filter = DeploymentFilter {
            tenant: self.tenant,
            status,
        };
        let views = queries.list(&filter).await?;
        if self.json {
            outln!("{}", render::list_json(&views));
        } else {
            out!("{}", render::list(&views));
        }
        Ok(())
    }
}
