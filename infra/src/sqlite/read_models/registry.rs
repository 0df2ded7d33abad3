//! The tenants' service registry in `service_instances` and `service_interests`: written with
//! the views the records folded into, read through [`ReadServiceRegistry`].

use async_trait::async_trait;
use overture_domain::projection::Header;
use overture_domain::registry::{still_interested, InstanceKey, InterestKey, Registry};
use overture_domain::services::{RegisteredInstance, ServiceInstance};
use overture_events::DeploymentId;
use overture_kit::registry::{ReadServiceRegistry, RegistryError};
use rusqlite::{params, Connection};

use super::rows::{bad_column, time_column, TimeColumn};
use super::{decode, SqliteReadModels};
use crate::sqlite::DbError;

/// Writes what `registry` sets: its removed instances deleted, its instances and interests
/// put. Every row is keyed in full, so writing it again changes nothing.
pub(super) fn write_registry(c: &Connection, registry: &Registry) -> rusqlite::Result<()> {
    if registry.is_empty() {
        return Ok(());
    }
    let mut delete = c.prepare_cached(
        "DELETE FROM service_instances
         WHERE tenant = ?1 AND service = ?2 AND address = ?3 AND port = ?4 AND deployment = ?5",
    )?;
    for key in &registry.removed {
        delete.execute(params![
            key.tenant,
            key.service,
            key.address,
            key.port,
            key.deployment.to_string()
        ])?;
    }
    let mut put = c.prepare_cached(
        "INSERT INTO service_instances (tenant, service, address, port, deployment, step, host,
             registered_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
         ON CONFLICT (tenant, service, address, port, deployment) DO UPDATE SET
             step = excluded.step, host = excluded.host, registered_at = excluded.registered_at",
    )?;
    for (key, registered) in &registry.instances {
        put.execute(params![
            key.tenant,
            key.service,
            key.address,
            key.port,
            key.deployment.to_string(),
            registered.instance.step,
            registered.instance.host,
            TimeColumn(Some(registered.registered_at)),
        ])?;
    }
    let mut interest = c.prepare_cached(
        "INSERT INTO service_interests (tenant, service, deployment, watched)
         VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (tenant, service, deployment) DO UPDATE SET
             watched = max(watched, excluded.watched)",
    )?;
    for (key, watched) in &registry.interests {
        interest.execute(params![
            key.tenant,
            key.service,
            key.deployment.to_string(),
            watched
        ])?;
    }
    Ok(())
}

pub(super) fn deployment_column(
    row: &rusqlite::Row<'_>,
    index: usize,
) -> rusqlite::Result<DeploymentId> {
    let text = row.get_ref(index)?.as_str()?;
    text.parse()
        .map_err(|e| bad_column(index, format!("`{text}`, not a deployment id: {e}")))
}

/// One row of `SELECT tenant, service, address, port, deployment, step, host, registered_at`.
pub(super) fn instance_row(
    row: &rusqlite::Row<'_>,
) -> rusqlite::Result<(InstanceKey, RegisteredInstance)> {
    let key = InstanceKey {
        tenant: row.get(0)?,
        service: row.get(1)?,
        address: row.get(2)?,
        port: row.get(3)?,
        deployment: deployment_column(row, 4)?,
    };
    let registered_at =
        time_column(row, 7)?.ok_or_else(|| bad_column(7, "no time of registration".into()))?;
    let registered = RegisteredInstance {
        deployment: key.deployment,
        instance: ServiceInstance {
            service: key.service.clone(),
            step: row.get(5)?,
            host: row.get(6)?,
            address: key.address.clone(),
            port: key.port,
        },
        registered_at,
    };
    Ok((key, registered))
}

pub(super) const SELECT_INSTANCES: &str =
    "SELECT tenant, service, address, port, deployment, step, host, registered_at
     FROM service_instances";

/// The whole registry, as [`ReadModelStore::load_all`] gives it.
pub(super) fn read_registry(c: &Connection) -> rusqlite::Result<Registry> {
    let mut registry = Registry::default();
    let mut select = c.prepare_cached(SELECT_INSTANCES)?;
    let mut rows = select.query([])?;
    while let Some(row) = rows.next()? {
        let (key, registered) = instance_row(row)?;
        registry.instances.insert(key, registered);
    }
    let mut select =
        c.prepare_cached("SELECT tenant, service, deployment, watched FROM service_interests")?;
    let mut rows = select.query([])?;
    while let Some(row) = rows.next()? {
        let key = InterestKey {
            tenant: row.get(0)?,
            service: row.get(1)?,
            deployment: deployment_column(row, 2)?,
        };
        registry.interests.insert(key, row.get(3)?);
    }
    Ok(registry)
}

/// A stored row that does not decode is corrupt; any other failure may pass.
pub(super) fn registry_error(error: DbError) -> RegistryError {
    match &error {
        DbError::Sqlite {
            source: rusqlite::Error::FromSqlConversionFailure(..),
            ..
        } => RegistryError::Corrupt(Box::new(error)),
        _ => RegistryError::Unavailable(Box::new(error)),
    }
}

#[async_trait]
impl ReadServiceRegistry for SqliteReadModels {
    async fn service_instances(
        &self,
        tenant: &str,
    ) -> Result<Vec<RegisteredInstance>, RegistryError> {
        let tenant = tenant.to_owned();
        self.db
            .read(move |c| {
                let mut select = c.prepare_cached(&format!(
                    "{SELECT_INSTANCES} WHERE tenant = ?1
                     ORDER BY service, address, port, deployment"
                ))?;
                let rows = select.query_map([tenant], instance_row)?;
                rows.map(|row| row.map(|(_, registered)| registered))
                    .collect()
            })
            .await
            .map_err(registry_error)
    }

    async fn interested_deployments(
        &self,
        tenant: &str,
        service: &str,
    ) -> Result<Vec<DeploymentId>, RegistryError> {
        let (tenant, service) = (tenant.to_owned(), service.to_owned());
        self.db
            .read(move |c| {
                let mut select = c.prepare_cached(
                    "SELECT i.deployment, i.watched, d.view
                     FROM service_interests AS i JOIN deployment_views AS d ON d.id = i.deployment
                     WHERE i.tenant = ?1 AND i.service = ?2 ORDER BY i.deployment",
                )?;
                let mut rows = select.query(params![tenant, service])?;
                let mut interested = Vec::new();
                while let Some(row) = rows.next()? {
                    let watched: bool = row.get(1)?;
                    let head: Header = decode(row.get_ref(2)?.as_str()?)?;
                    let destroy = head.destroy.as_ref().map(|d| d.status);
                    if still_interested(head.status, destroy, watched) {
                        interested.push(deployment_column(row, 0)?);
                    }
                }
                Ok(interested)
            })
            .await
            .map_err(registry_error)
    }
}
