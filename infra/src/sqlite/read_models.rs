//! The read models' tables: each deployment's and each tenant's view as a JSON document.
//!
//! - [`DeploymentViews`] (the projector's per-stream port): one write checks
//!   that the view is still at the revision it was loaded at, stores it, and adds the change to
//!   its tenant's summary, so a replayed or raced record changes nothing and counters are never
//!   overwritten.
//! - [`ReadModelStore`] (the rebuild's): many views and the checkpoint in one transaction.
//! - [`SqliteReadModels::feed_position`]: how far the embedded engine has fed the log to the
//!   projector; it only moves forward.
//!
//! Views are derived from the log, so their writes do not wait for the disk
//! ([`super::Durability::Derived`]): an OS crash may lose the last ones, together with the feed
//! position past them (commits are lost only from the end), and the projector folds those
//! events again.

use std::collections::BTreeSet;

use async_trait::async_trait;
use overture_domain::projection::{DeploymentView, ReadModels, TenantDelta, TenantView};
use overture_events::DeploymentId;
use overture_projector::{DeploymentViews, ReadModelStore, StoreError, ViewError};
use rusqlite::{params, OptionalExtension};

use super::Database;

/// The checkpoint name of the read models.
const CHECKPOINT: &str = "read-models";

/// Read models stored in the SQLite file.
#[derive(Clone, Debug)]
pub struct SqliteReadModels {
    db: Database,
}

/// A filter for [`SqliteReadModels::list`].
#[derive(Clone, Debug, Default)]
pub struct ListFilter {
    /// Only this tenant's deployments.
    pub tenant: Option<String>,
    /// Only deployments with this status (`running`, `succeeded`, ...).
    pub status: Option<String>,
}

fn store_error(error: impl std::error::Error + Send + Sync + 'static) -> StoreError {
    StoreError::new(error)
}

fn decode<T: serde::de::DeserializeOwned>(json: &str) -> rusqlite::Result<T> {
    serde_json::from_str(json).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Text, Box::new(e))
    })
}

fn encode<T: serde::Serialize>(value: &T) -> rusqlite::Result<String> {
    serde_json::to_string(value).map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))
}

impl SqliteReadModels {
    /// The read models in this database.
    pub fn new(db: Database) -> Self {
        Self { db }
    }

    /// One deployment's view.
    pub async fn deployment(&self, id: DeploymentId) -> Result<Option<DeploymentView>, StoreError> {
        self.db
            .read(move |c| {
                let json: Option<String> = c
                    .prepare_cached("SELECT view FROM deployment_views WHERE id = ?1")?
                    .query_row([id.to_string()], |row| row.get(0))
                    .optional()?;
                json.map(|j| decode(&j)).transpose()
            })
            .await
            .map_err(store_error)
    }

    /// Deployment views, newest first.
    pub async fn list(&self, filter: ListFilter) -> Result<Vec<DeploymentView>, StoreError> {
        self.db
            .read(move |c| {
                let mut statement = c.prepare_cached(
                    "SELECT view FROM deployment_views
                     WHERE (?1 IS NULL OR tenant = ?1) AND (?2 IS NULL OR status = ?2)
                     ORDER BY started_at DESC, id DESC",
                )?;
                let rows = statement.query_map(params![filter.tenant, filter.status], |row| {
                    row.get::<_, String>(0)
                })?;
                rows.map(|json| decode(&json?)).collect()
            })
            .await
            .map_err(store_error)
    }

    /// Every tenant's summary, by tenant name.
    pub async fn tenants(&self) -> Result<Vec<TenantView>, StoreError> {
        self.db
            .read(|c| {
                let mut statement =
                    c.prepare_cached("SELECT view FROM tenant_views ORDER BY tenant")?;
                let rows = statement.query_map([], |row| row.get::<_, String>(0))?;
                rows.map(|json| decode(&json?)).collect()
            })
            .await
            .map_err(store_error)
    }
}

fn unavailable(error: impl std::error::Error + Send + Sync + 'static) -> ViewError {
    ViewError::Unavailable(Box::new(error))
}

fn corrupt(error: impl std::error::Error + Send + Sync + 'static) -> ViewError {
    ViewError::Corrupt(Box::new(error))
}

impl SqliteReadModels {
    /// The log position up to which the embedded engine has handed entries to the projector:
    /// the checkpoint a rebuild sets too ([`ReadModelStore::save`]), so after `overture replay`
    /// the feed goes on from the end of the log.
    pub async fn feed_position(&self) -> Result<u64, StoreError> {
        self.checkpoint().await
    }

    /// Records that entries up to `position` have been projected. Several processes feed the
    /// projector; the position never moves back, so none makes another fold twice for nothing.
    pub async fn advance_feed_position(&self, position: u64) -> Result<(), StoreError> {
        self.db
            .with_derived(move |c| {
                c.prepare_cached(
                    "INSERT INTO checkpoints (name, position) VALUES (?1, ?2)
                     ON CONFLICT (name) DO UPDATE SET position = max(position, excluded.position)",
                )?
                .execute(params![CHECKPOINT, position as i64])
                .map(|_| ())
            })
            .await
            .map_err(store_error)
    }
}

#[async_trait]
impl DeploymentViews for SqliteReadModels {
    async fn view(&self, deployment: DeploymentId) -> Result<Option<DeploymentView>, ViewError> {
        let json: Option<String> = self
            .db
            .read(move |c| {
                c.prepare_cached("SELECT view FROM deployment_views WHERE id = ?1")?
                    .query_row([deployment.to_string()], |row| row.get(0))
                    .optional()
            })
            .await
            .map_err(unavailable)?;
        json.map(|j| serde_json::from_str(&j).map_err(corrupt))
            .transpose()
    }

    async fn save(
        &self,
        view: &DeploymentView,
        loaded_at: Option<u64>,
        delta: &TenantDelta,
    ) -> Result<(), ViewError> {
        let json = serde_json::to_string(view).map_err(corrupt)?;
        let (id, tenant, status) = (view.id, view.tenant.clone(), view.status.as_str());
        let started_at = view
            .started_at
            .to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
        let delta = delta.clone();
        let saved = self
            .db
            .with_derived(move |c| {
                let tx = c.savepoint()?;
                let stored: Option<Option<i64>> = tx
                    .prepare_cached(
                        "SELECT json_extract(view, '$.revision') FROM deployment_views WHERE id = ?1",
                    )?
                    .query_row([id.to_string()], |row| row.get(0))
                    .optional()?;
                let stored = stored.map(|revision| revision.unwrap_or(-1));
                if stored != loaded_at.map(|r| r as i64) {
                    return Ok(Err(ViewError::Conflict {
                        deployment: id,
                        loaded_at,
                    }));
                }
                tx.prepare_cached(
                    "INSERT INTO deployment_views (id, tenant, status, started_at, view) VALUES (?1, ?2, ?3, ?4, ?5)
                     ON CONFLICT (id) DO UPDATE SET status = excluded.status, view = excluded.view",
                )?
                .execute(params![id.to_string(), tenant, status, started_at, json])?;
                if !delta.is_empty() {
                    let summary: Option<String> = tx
                        .prepare_cached("SELECT view FROM tenant_views WHERE tenant = ?1")?
                        .query_row([&tenant], |row| row.get(0))
                        .optional()?;
                    let summary = match summary.map(|j| serde_json::from_str(&j)).transpose() {
                        Ok(summary) => summary,
                        Err(error) => return Ok(Err(corrupt(error))),
                    };
                    let summary = delta.apply_to(summary, &tenant);
                    tx.prepare_cached(
                        "INSERT INTO tenant_views (tenant, view) VALUES (?1, ?2) ON CONFLICT (tenant) DO UPDATE SET view = excluded.view",
                    )?
                    .execute(params![tenant, encode(&summary)?])?;
                }
                tx.commit()?;
                Ok(Ok(()))
            })
            .await
            .map_err(unavailable)?;
        saved
    }

    async fn tenant(&self, tenant: &str) -> Result<Option<TenantView>, ViewError> {
        let tenant = tenant.to_owned();
        let json: Option<String> = self
            .db
            .read(move |c| {
                c.prepare_cached("SELECT view FROM tenant_views WHERE tenant = ?1")?
                    .query_row([tenant], |row| row.get(0))
                    .optional()
            })
            .await
            .map_err(unavailable)?;
        json.map(|j| serde_json::from_str(&j).map_err(corrupt))
            .transpose()
    }
}

#[async_trait]
impl ReadModelStore for SqliteReadModels {
    async fn checkpoint(&self) -> Result<u64, StoreError> {
        self.db
            .read(|c| {
                let position: Option<i64> = c
                    .prepare_cached("SELECT position FROM checkpoints WHERE name = ?1")?
                    .query_row([CHECKPOINT], |row| row.get(0))
                    .optional()?;
                Ok(position.unwrap_or(0).max(0) as u64)
            })
            .await
            .map_err(store_error)
    }

    async fn load(
        &self,
        deployments: &BTreeSet<DeploymentId>,
        tenants: &BTreeSet<String>,
    ) -> Result<ReadModels, StoreError> {
        let ids: Vec<DeploymentId> = deployments.iter().copied().collect();
        let tenants: Vec<String> = tenants.iter().cloned().collect();
        self.db
            .read(move |c| {
                let mut models = ReadModels::default();
                let mut by_id =
                    c.prepare_cached("SELECT view FROM deployment_views WHERE id = ?1")?;
                for id in ids {
                    let json: Option<String> = by_id
                        .query_row([id.to_string()], |row| row.get(0))
                        .optional()?;
                    if let Some(json) = json {
                        models.deployments.insert(id, decode(&json)?);
                    }
                }
                let mut by_tenant =
                    c.prepare_cached("SELECT view FROM tenant_views WHERE tenant = ?1")?;
                for tenant in tenants {
                    let json: Option<String> = by_tenant
                        .query_row([&tenant], |row| row.get(0))
                        .optional()?;
                    if let Some(json) = json {
                        models.tenants.insert(tenant, decode(&json)?);
                    }
                }
                Ok(models)
            })
            .await
            .map_err(store_error)
    }

    async fn save(&self, models: &ReadModels, checkpoint: u64) -> Result<(), StoreError> {
        let models = models.clone();
        self.db
            .with_derived(move |c| {
                let tx = c.savepoint()?;
                {
                    let mut put_deployment = tx.prepare_cached(
                        "INSERT INTO deployment_views (id, tenant, status, started_at, view) VALUES (?1, ?2, ?3, ?4, ?5)
                         ON CONFLICT (id) DO UPDATE SET status = excluded.status, view = excluded.view",
                    )?;
                    for view in models.deployments.values() {
                        put_deployment.execute(params![
                            view.id.to_string(),
                            view.tenant,
                            view.status.as_str(),
                            view.started_at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
                            encode(view)?
                        ])?;
                    }
                    let mut put_tenant = tx.prepare_cached(
                        "INSERT INTO tenant_views (tenant, view) VALUES (?1, ?2) ON CONFLICT (tenant) DO UPDATE SET view = excluded.view",
                    )?;
                    for view in models.tenants.values() {
                        put_tenant.execute(params![view.tenant, encode(view)?])?;
                    }
                    tx.prepare_cached(
                        "INSERT INTO checkpoints (name, position) VALUES (?1, ?2) ON CONFLICT (name) DO UPDATE SET position = excluded.position",
                    )?
                    .execute(params![CHECKPOINT, checkpoint as i64])?;
                }
                tx.commit()
            })
            .await
            .map_err(store_error)
    }

    async fn load_all(&self) -> Result<ReadModels, StoreError> {
        self.db
            .read(|c| {
                let mut models = ReadModels::default();
                let mut deployments = c.prepare_cached("SELECT view FROM deployment_views")?;
                for json in deployments.query_map([], |row| row.get::<_, String>(0))? {
                    let view: DeploymentView = decode(&json?)?;
                    models.deployments.insert(view.id, view);
                }
                let mut tenants = c.prepare_cached("SELECT view FROM tenant_views")?;
                for json in tenants.query_map([], |row| row.get::<_, String>(0))? {
                    let view: TenantView = decode(&json?)?;
                    models.tenants.insert(view.tenant.clone(), view);
                }
                Ok(models)
            })
            .await
            .map_err(store_error)
    }

    async fn clear(&self) -> Result<(), StoreError> {
        self.db
            .with_derived(|c| {
                let tx = c.savepoint()?;
                tx.execute_batch("DELETE FROM deployment_views; DELETE FROM tenant_views;")?;
                tx.execute("DELETE FROM checkpoints WHERE name = ?1", [CHECKPOINT])?;
                tx.commit()
            })
            .await
            .map_err(store_error)
    }
}
