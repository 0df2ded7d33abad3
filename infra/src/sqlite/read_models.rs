//! The read models' tables: each deployment's and each tenant's view as a JSON document, and
//! the projector's checkpoint, written together in one transaction.

use std::collections::BTreeSet;

use async_trait::async_trait;
use overture_domain::projection::{DeploymentView, ReadModels, TenantView};
use overture_events::DeploymentId;
use overture_projector::{ReadModelStore, StoreError};
use rusqlite::{params, OptionalExtension, TransactionBehavior};

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
            .with_connection(move |c| {
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
            .with_connection(move |c| {
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
            .with_connection(|c| {
                let mut statement =
                    c.prepare_cached("SELECT view FROM tenant_views ORDER BY tenant")?;
                let rows = statement.query_map([], |row| row.get::<_, String>(0))?;
                rows.map(|json| decode(&json?)).collect()
            })
            .await
            .map_err(store_error)
    }
}

#[async_trait]
impl ReadModelStore for SqliteReadModels {
    async fn checkpoint(&self) -> Result<u64, StoreError> {
        self.db
            .with_connection(|c| {
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
            .with_connection(move |c| {
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
            .with_connection(move |c| {
                let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
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
            .with_connection(|c| {
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
            .with_connection(|c| {
                let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
                tx.execute_batch("DELETE FROM deployment_views; DELETE FROM tenant_views;")?;
                tx.execute("DELETE FROM checkpoints WHERE name = ?1", [CHECKPOINT])?;
                tx.commit()
            })
            .await
            .map_err(store_error)
    }
}
