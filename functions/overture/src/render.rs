//! What the read commands print: tables for people, JSON for scripts.
//!
//! The JSON shapes are a stable interface: `status --json` is the deployment view, `list --json`
//! an array of them without steps, `tenants --json` an array of tenant views, and
//! `events --json` one envelope per line.

use std::fmt::Write;

use overture_domain::projection::{DeploymentView, TenantView};
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
        "{:<36}  {:<12} {:<20} {:<10} {}\n",
        "ID", "TENANT", "BLUEPRINT", "STATUS", "STARTED"
    );
    for view in views {
        let _ = writeln!(
            out,
            "{:<36}  {:<12} {:<20} {:<10} {}",
            view.id.to_string(),
            view.tenant,
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
