//! `overture tenants`: deployments summarised per tenant.

use crate::backend::Backend;
use crate::{render, Failure};

/// `overture tenants`.
#[derive(clap::Args)]
pub struct TenantsArgs {
    #[arg(long)]
    json: bool,
}

impl TenantsArgs {
    /// Prints the summary.
    pub async fn run(self, backend: &dyn Backend) -> Result<(), Failure> {
        let tenants = backend.queries().await?.tenants().await?;
        if self.json {
            outln!("{}", render::json(&tenants));
        } else {
            out!("{}", render::tenants(&tenants));
        }
        Ok(())
    }
}
