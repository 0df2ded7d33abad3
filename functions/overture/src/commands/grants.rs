//! `overture grants`: the temporary grants of access deployments held.

use overture_kit::query::DeploymentFilter;

use crate::backend::Backend;
use crate::{render, Failure};

/// `overture grants`.
#[derive(clap::Args)]
pub struct GrantsArgs {
    /// Only grants still open.
    #[arg(long)]
    open: bool,
    /// Only this tenant's deployments.
    #[arg(long)]
    tenant: Option<String>,
    #[arg(long)]
    json: bool,
}

impl GrantsArgs {
    /// Prints the grants.
    pub async fn run(self, backend: &dyn Backend) -> Result<(), Failure> {
        let queries = backend.queries().await?;
        let views = queries
            .list(&DeploymentFilter {
                tenant: self.tenant,
                status: None,
            })
            .await?;
        let grants = render::grant_rows(&views, self.open);
        if self.json {
            outln!("{}", render::grants_json(&grants));
        } else {
            out!("{}", render::grants(&grants));
        }
        Ok(())
    }
}
