//! Deployment names: which deployment holds each of a tenant's names, claimed and released in
//! the transaction that appends the events that claim and release them.
//!
//! A `DeploymentRequested` with a `name` claims it; `DeploymentDestroyed` releases it. The
//! table's primary key (tenant, name) makes the claim atomic: of two requests for one name,
//! however close together and from however many processes, the second one's insert fails, its
//! whole append is rolled back, and nothing of it is recorded.

use overture_events::CloudAccount;
use rusqlite::{params, Connection, OptionalExtension};
use serde::Deserialize;

use super::log::LogError;

/// The fields of `DeploymentRequested` a claim needs.
#[derive(Deserialize)]
struct Requested {
    tenant: String,
    #[serde(default)]
    cloud: Option<CloudAccount>,
    #[serde(default)]
    name: Option<String>,
}

/// Claims or releases the name `stream`'s event of `event_type` calls for, inside the caller's
/// transaction; refused when another deployment of the tenant holds the name.
pub(super) fn follow(
    tx: &Connection,
    stream: &str,
    event_type: &str,
    data: &serde_json::Value,
) -> rusqlite::Result<Result<(), LogError>> {
    match event_type {
        "DeploymentRequested" => {
            let Ok(Requested {
                tenant,
                cloud,
                name: Some(name),
            }) = Requested::deserialize(data)
            else {
                return Ok(Ok(()));
            };
            let tenant = overture_domain::tenancy::tenant_of(&tenant, cloud.as_ref());
            claim(tx, stream, tenant, &name)
        }
        "DeploymentDestroyed" => {
            tx.prepare_cached("DELETE FROM deployment_names WHERE deployment = ?1")?
                .execute(params![stream])?;
            Ok(Ok(()))
        }
        _ => Ok(Ok(())),
    }
}

fn claim(
    tx: &Connection,
    stream: &str,
    tenant: &str,
    name: &str,
) -> rusqlite::Result<Result<(), LogError>> {
    let holder: Option<String> = tx
        .prepare_cached("SELECT deployment FROM deployment_names WHERE tenant = ?1 AND name = ?2")?
        .query_row(params![tenant, name], |row| row.get(0))
        .optional()?;
    if let Some(holder) = holder.filter(|holder| holder != stream) {
        return Ok(Err(LogError::NameTaken {
            tenant: tenant.to_owned(),
            name: name.to_owned(),
            holder,
        }));
    }
    tx.prepare_cached(
        "INSERT INTO deployment_names (tenant, name, deployment) VALUES (?1, ?2, ?3)
         ON CONFLICT DO NOTHING",
    )?
    .execute(params![tenant, name, stream])?;
    Ok(Ok(()))
}

/// The stream of the deployment of `tenant` that holds `name`, if one does.
pub(super) fn holder(
    connection: &Connection,
    tenant: &str,
    name: &str,
) -> rusqlite::Result<Option<String>> {
    connection
        .prepare_cached("SELECT deployment FROM deployment_names WHERE tenant = ?1 AND name = ?2")?
        .query_row(params![tenant, name], |row| row.get(0))
        .optional()
}
