//! What the read commands print: tables for people, JSON for scripts.
//!
//! The JSON shapes are a stable interface: `status --json` is the deployment view, `list --json`
//! an array of them without steps, `tenants --json` an array of tenant views, `services
//! --json` the registry by tenant and service, and `events --json` one envelope per line.

use std::fmt::Write;

use overture_domain::projection::{DeploymentView, TenantView};
use overture_domain::services::RegisteredInstance;
use overture_domain::text::escaped;
use serde::Serialize;

use crate::progress::human;

pub use overture_api::grants::{grant_rows, GrantRow};

/// Pretty JSON of anything serialisable.
pub fn json<T: Serialize>(value: &T) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

/// One line of JSON.
pub fn json_line<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

/// `status --json`.
pub fn status_json(view: &DeploymentView) -> String {
    json(view)
}

/// `list --json`: status objects without their steps.
pub fn list_json(views: &[DeploymentView]) -> String {
    let rows: Vec<serde_json::Value> = views
        .iter()
        .map(|view| {
            let mut value = serde_json::to_value(view).unwrap_or_default();
            if let Some(object) = value.as_object_mut() {
                object.remove("steps");
            }
            value
        })
        .collect();
    json(&rows)
}

/// A deployment's status for people.
pub fn status(view: &DeploymentView) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "deployment {}  ({} for tenant {})",
        view.id, view.blueprint, view.tenant
    );
    if let Some(name) = &view.name {
        let _ = writeln!(out, "name       {name}");
    }
    let took = view
        .finished_at
        .map(|end| (end - view.started_at).num_milliseconds().max(0) as u64);
    let _ = writeln!(
        out,
        "status     {}{}",
        view.status.as_str(),
        took.map(|ms| format!(" in {}", human(ms)))
            .unwrap_or_default()
    );
    if let Some(reason) = &view.reason {
        let _ = writeln!(out, "reason     {reason}");
    }
    if let Some(destroy) = &view.destroy {
        let _ = writeln!(
            out,
            "destroy    {} at {}{}",
            destroy.status.as_str(),
            destroy.at.format("%Y-%m-%d %H:%M:%S"),
            destroy
                .reason
                .as_ref()
                .map(|reason| format!(": {reason}"))
                .unwrap_or_default()
        );
    }
    let _ = writeln!(
        out,
        "\n  {:<20} {:<10} {:>8}  {:<10}  outputs",
        "STEP", "STATUS", "ATTEMPTS", "TOOK"
    );
    for (name, step) in &view.steps {
        let took = match (step.started_at, step.finished_at) {
            (Some(start), Some(end)) => human((end - start).num_milliseconds().max(0) as u64),
            _ => String::new(),
        };
        let outputs = step
            .outputs
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ");
        let _ = writeln!(
            out,
            "  {name:<20} {:<10} {:>8}  {took:<10}  {outputs}",
            step.status.as_str(),
            step.attempts
        );
    }
    out
}

/// `list` for people.
pub fn list(views: &[DeploymentView]) -> String {
    let mut out = format!(
        "{:<36}  {:<12} {:<20} {:<20} {:<10} {}\n",
        "ID", "TENANT", "NAME", "BLUEPRINT", "STATUS", "STARTED"
    );
    for view in views {
        let _ = writeln!(
            out,
            "{:<36}  {:<12} {:<20} {:<20} {:<10} {}",
            view.id.to_string(),
            view.tenant,
            view.name.as_deref().unwrap_or("-"),
            view.blueprint,
            view.status.as_str(),
            view.started_at.format("%Y-%m-%d %H:%M:%S")
        );
    }
    out
}

/// `grants --json`.
pub fn grants_json(rows: &[GrantRow]) -> String {
    json(&rows)
}

/// `grants` for people.
pub fn grants(rows: &[GrantRow]) -> String {
    let mut out = format!(
        "{:<36}  {:<12} {:<15} {:<19} {:<19} {}\n",
        "DEPLOYMENT", "TENANT", "GRANT", "OPENED", "CLOSED", "WHAT"
    );
    for row in rows {
        let closed = match (row.grant.closed_at, row.deployment_ended) {
            (Some(at), _) => at.format("%Y-%m-%d %H:%M:%S").to_string(),
            (None, false) => "open".to_owned(),
            (None, true) => "OPEN (ended!)".to_owned(),
        };
        let _ = writeln!(
            out,
            "{:<36}  {:<12} {:<15} {:<19} {:<19} {}: {}{}",
            row.deployment.to_string(),
            row.tenant,
            row.grant.kind.as_str(),
            row.grant.opened_at.format("%Y-%m-%d %H:%M:%S"),
            closed,
            row.grant.reference,
            row.grant.detail,
            shared(row)
        );
    }
    out
}

/// What a bastion rule's row says of the rule's other holders: who holds it with this
/// deployment, or for whom it was kept when this deployment's lease closed.
fn shared(row: &GrantRow) -> String {
    if row.holders.len() > 1 {
        let holders: Vec<String> = row
            .holders
            .iter()
            .map(|h| format!("{} since {}", h.deployment, h.since.format("%H:%M:%S")))
            .collect();
        return format!("; held by {}", holders.join(", "));
    }
    if !row.grant.kept_for.is_empty() {
        let kept: Vec<String> = row.grant.kept_for.iter().map(ToString::to_string).collect();
        return format!("; rule kept for {}", kept.join(", "));
    }
    String::new()
}

/// `tenants` for people.
pub fn tenants(views: &[TenantView]) -> String {
    let mut out = format!(
        "{:<16} {:>8} {:>10} {:>7} {:>6}  {}\n",
        "TENANT", "RUNNING", "SUCCEEDED", "FAILED", "TOTAL", "LAST DEPLOYMENT"
    );
    for view in views {
        let last = view
            .last_deployment_at
            .map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string())
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "{:<16} {:>8} {:>10} {:>7} {:>6}  {last}",
            view.tenant, view.running, view.succeeded, view.failed, view.total
        );
    }
    out
}

/// A tenant's registered instances, in the registry's order (by service, address, port).
pub type TenantRegistry = (String, Vec<RegisteredInstance>);

/// A tenant's instances grouped by service, in order.
fn by_service(instances: &[RegisteredInstance]) -> Vec<(&str, Vec<&RegisteredInstance>)> {
    let mut services: Vec<(&str, Vec<&RegisteredInstance>)> = Vec::new();
    for registered in instances {
        match services.last_mut() {
            Some((service, members)) if *service == registered.instance.service => {
                members.push(registered)
            }
            _ => services.push((&registered.instance.service, vec![registered])),
        }
    }
    services
}

/// How many members the instances make: an address and port registered by two deployments
/// is one member, as a step that requires the service counts it.
fn member_count(instances: &[&RegisteredInstance]) -> usize {
    overture_domain::services::members(instances.iter().map(|r| &r.instance))
        .values()
        .map(std::collections::BTreeSet::len)
        .sum()
}

/// `services --json`: `{"tenants": [{"tenant", "services": [{"service", "count",
/// "instances": [{"host", "address", "port", "member", "deployment", "step",
/// "registered_at"}]}]}]}`, where `count` is the service's members; keys in that order.
pub fn services_json(registry: &[TenantRegistry]) -> String {
    #[derive(Serialize)]
    struct Registry<'a> {
        tenants: Vec<Tenant<'a>>,
    }
    #[derive(Serialize)]
    struct Tenant<'a> {
        tenant: &'a str,
        services: Vec<Service<'a>>,
    }
    #[derive(Serialize)]
    struct Service<'a> {
        service: &'a str,
        count: usize,
        instances: Vec<Instance<'a>>,
    }
    #[derive(Serialize)]
    struct Instance<'a> {
        host: &'a str,
        address: &'a str,
        port: u16,
        member: String,
        deployment: overture_events::DeploymentId,
        step: &'a str,
        registered_at: overture_events::Timestamp,
    }
    let tenants = registry
        .iter()
        .map(|(tenant, instances)| Tenant {
            tenant,
            services: by_service(instances)
                .into_iter()
                .map(|(service, members)| Service {
                    service,
                    count: member_count(&members),
                    instances: members
                        .iter()
                        .map(|r| Instance {
                            host: &r.instance.host,
                            address: &r.instance.address,
                            port: r.instance.port,
                            member: r.instance.member(),
                            deployment: r.deployment,
                            step: &r.instance.step,
                            registered_at: r.registered_at,
                        })
                        .collect(),
                })
                .collect(),
        })
        .collect();
    json(&Registry { tenants })
}

/// `services` for people: a block per tenant, in it each service with its members.
pub fn services(registry: &[TenantRegistry], asked: Option<&str>) -> String {
    let mut out = String::new();
    if registry.iter().all(|(_, instances)| instances.is_empty()) {
        match asked {
            Some(tenant) => {
                let _ = writeln!(
                    out,
                    "no service is registered for tenant {}",
                    escaped(tenant)
                );
            }
            None => out.push_str("no service is registered\n"),
        }
        return out;
    }
    for (i, (tenant, instances)) in registry.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let _ = writeln!(out, "tenant {}", escaped(tenant));
        for (service, members) in by_service(instances) {
            let count = member_count(&members);
            let _ = writeln!(
                out,
                "  {}  {count} member{}",
                escaped(service),
                if count == 1 { "" } else { "s" }
            );
            for r in members {
                let _ = writeln!(
                    out,
                    "    {:<22} host {}  deployment {}  step {}  since {}",
                    escaped(&r.instance.member()),
                    escaped(&r.instance.host),
                    r.deployment,
                    escaped(&r.instance.step),
                    r.registered_at.format("%Y-%m-%d %H:%M:%S")
                );
            }
        }
    }
    out
}
