//! The read models' tables: each deployment's view as a header row and a row per step, each
//! tenant's summary as a JSON document.
//!
//! - `deployment_views` holds a deployment's header: the view without its steps, as JSON, with
//!   its tenant, status, start and revision in columns of their own (filters, the conflict
//!   check). `step_views` holds each step's view in columns, with its position in the blueprint.
//!   Saving a projected record writes the header and the steps it changed only, so its cost
//!   does not grow with the deployment.
//! - [`DeploymentViews`] (the projector's per-stream port): one write, in a savepoint, stores
//!   the header only if it is still at the revision it was loaded at (the conditional write
//!   comes first, so it takes the write lock before anything is read), the changed steps, and
//!   the change to its tenant's summary, so a replayed or raced record changes nothing and
//!   counters are never overwritten.
//! - [`ReadModelStore`] (the rebuild's): many headers and steps and the checkpoint in one write.
//! - [`LogChanges`]: the log read as a rebuild folds it, decoding only what the views need, on
//!   a connection of its own so that reading and writing run side by side.
//! - `service_instances` and `service_interests` hold the tenants' service registry
//!   ([`overture_domain::registry`]), written in the same write as the views the records
//!   folded into (both ports), read through [`ReadServiceRegistry`].
//! - [`SqliteReadModels::feed_position`]: how far the embedded engine has fed the log to the
//!   projector; it only moves forward.
//!
//! Where things are: `rows` reads and writes a view's rows and a tenant's summary; `views` is
//! the projector's port, `rebuild` the rebuild's, `log_changes` the log as a rebuild reads it,
//! `registry` the service registry; here are the store and its queries.

use overture_domain::projection::{DeploymentView, Header, TenantView};
use overture_events::DeploymentId;
use overture_projector::{ReadModelStore, StoreError};
use rusqlite::params;

use super::Database;
use rows::{read_steps, read_view, Steps};

pub use log_changes::LogChanges;

mod log_changes;
mod rebuild;
mod registry;
mod rows;
mod views;

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
            .read(move |c| read_view(c, id, Steps::All))
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
                let heads = statement
                    .query_map(params![filter.tenant, filter.status], |row| {
                        row.get::<_, String>(0)
                    })?
                    .map(|json| decode::<Header>(&json?))
                    .collect::<rusqlite::Result<Vec<_>>>()?;
                heads
                    .into_iter()
                    .map(|head| {
                        let steps = read_steps(c, head.id, Steps::All)?;
                        Ok(head.with_steps(steps))
                    })
                    .collect()
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
