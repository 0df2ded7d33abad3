//! `overture services`: the service registry, per tenant.

use crate::backend::Backend;
use crate::{render, Failure};

/// `overture services`.
#[derive(clap::Args)]
pub struct ServicesArgs {
    /// Only this tenant's services.
    #[arg(long)]
    tenant: Option<String>,
    #[arg(long)]
    json: bool,
}

impl ServicesArgs {
    /// Prints each tenant's services and their registered instances.
    pub async fn run(self, backend: &dyn Backend) -> Result<(), Failure> {
        let Self { tenant, json } = self;
        let queries = backend.queries().await?;
        let tenants = match &tenant {
            Some(tenant) => vec![tenant.clone()],
            None => queries
                .tenants()
                .await?
                .into_iter()
                .map(|view| view.tenant)
                .collect(),
        };
        let mut registry = Vec::with_capacity(tenants.len());
        for name in tenants {
            let instances = queries.service_instances(&name).await?;
            // The tenant asked for is listed whatever it holds; of all, those with some.
            if tenant.is_some() || !instances.is_empty() {
                registry.push((name, instances));
            }
        }
        if json {
            outln!("{}", render::services_json(&registry));
        } else {
            out!("{}", render::services(&registry, tenant.as_deref()));
        }
        Ok(())
    }
}
