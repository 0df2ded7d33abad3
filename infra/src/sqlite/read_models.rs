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

use std::collections::{BTreeMap, BTreeSet};

use async_trait::async_trait;
use indexmap::IndexMap;
use overture_domain::projection::{
    Change, ChangedSteps, DeploymentView, Folding, Header, ReadModels, StepView, TenantDelta,
    TenantView, Touched,
};
use overture_domain::registry::{still_interested, InstanceKey, InterestKey, Registry};
use overture_domain::services::{RegisteredInstance, ServiceInstance};
use overture_events::{DeploymentId, ErrorClass, LogEntry, Timestamp};
use overture_kit::registry::{ReadServiceRegistry, RegistryError};
use overture_projector::{
    ChangeEntry, DeploymentViews, ProjectorError, ReadLog, ReadModelStore, StoreError, ViewError,
};
use rusqlite::{params, Connection, OptionalExtension};
use serde::Deserialize;

use super::{Database, EventLog};

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

/// A step row to write: its deployment's index among the headers written, its columns, and
/// where its name and outputs are in the buffer written with them.
struct StepRow {
    deployment: usize,
    name: std::ops::Range<usize>,
    columns: StepColumns,
    outputs: Option<std::ops::Range<usize>>,
    position: i64,
}

/// The columns of a step's row but its outputs, which are a JSON object.
struct StepColumns {
    status: &'static str,
    attempts: u32,
    started_at: TimeColumn,
    finished_at: TimeColumn,
    error_class: Option<&'static str>,
}

impl From<&StepView> for StepColumns {
    fn from(step: &StepView) -> Self {
        // Every field named: a field added to the view must be given a column too.
        let StepView {
            status,
            attempts,
            started_at,
            finished_at,
            error_class,
            outputs: _,
        } = step;
        Self {
            status: status.as_str(),
            attempts: *attempts,
            started_at: TimeColumn(*started_at),
            finished_at: TimeColumn(*finished_at),
            error_class: error_class.as_ref().map(ErrorClass::as_str),
        }
    }
}

/// The step's outputs as their column holds them: `None` (NULL) for none.
fn outputs_json(outputs: &BTreeMap<String, String>) -> rusqlite::Result<Option<String>> {
    (!outputs.is_empty()).then(|| encode(outputs)).transpose()
}

/// The statement that stores a step's row, its parameters in [`step_params`]' order.
const PUT_STEP: &str = "INSERT INTO step_views (deployment, name, position, status, attempts,
         started_at, finished_at, error_class, outputs) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
     ON CONFLICT (deployment, name) DO UPDATE SET status = excluded.status,
         attempts = excluded.attempts, started_at = excluded.started_at,
         finished_at = excluded.finished_at, error_class = excluded.error_class,
         outputs = excluded.outputs";

fn put_step(
    put: &mut rusqlite::Statement<'_>,
    deployment: &str,
    name: &str,
    position: i64,
    columns: &StepColumns,
    outputs: Option<&str>,
) -> rusqlite::Result<()> {
    put.execute(params![
        deployment,
        name,
        position,
        columns.status,
        columns.attempts,
        columns.started_at,
        columns.finished_at,
        columns.error_class,
        outputs
    ])
    .map(|_| ())
}

/// A time as a step's row holds it: unix nanoseconds, or the view's own JSON text for a time
/// they cannot hold (beyond 1677-2262, or a leap second), or NULL.
struct TimeColumn(Option<Timestamp>);

impl rusqlite::ToSql for TimeColumn {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use chrono::Timelike;
        use rusqlite::types::{ToSqlOutput, Value};
        let Some(time) = self.0 else {
            return Ok(ToSqlOutput::Owned(Value::Null));
        };
        if time.nanosecond() < 1_000_000_000 {
            if let Some(nanos) = time.timestamp_nanos_opt() {
                return Ok(ToSqlOutput::Owned(Value::Integer(nanos)));
            }
        }
        let text = match serde_json::to_value(time) {
            Ok(serde_json::Value::String(text)) => text,
            Ok(other) => other.to_string(),
            Err(error) => return Err(rusqlite::Error::ToSqlConversionFailure(Box::new(error))),
        };
        Ok(ToSqlOutput::Owned(Value::Text(text)))
    }
}

/// Why a step's column does not hold what its view needs.
#[derive(Debug, thiserror::Error)]
#[error("a step view's column holds {0}")]
struct BadColumn(String);

fn bad_column(index: usize, what: String) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(
        index,
        rusqlite::types::Type::Text,
        Box::new(BadColumn(what)),
    )
}

/// Reads a time column written by [`TimeColumn`] (or migrated from a JSON document).
fn time_column(row: &rusqlite::Row<'_>, index: usize) -> rusqlite::Result<Option<Timestamp>> {
    use rusqlite::types::ValueRef;
    match row.get_ref(index)? {
        ValueRef::Null => Ok(None),
        ValueRef::Integer(nanos) => Ok(Some(chrono::DateTime::from_timestamp_nanos(nanos))),
        ValueRef::Text(text) => {
            let text = std::str::from_utf8(text)
                .map_err(|e| bad_column(index, format!("a time that is not UTF-8: {e}")))?;
            match parse_utc(text) {
                Some(time) => Ok(Some(time)),
                None => named::<Timestamp>(index, text).map(Some),
            }
        }
        other => Err(bad_column(
            index,
            format!("a {} where a time belongs", other.data_type()),
        )),
    }
}

/// Reads a value from its serde name (a status, an error class, a time).
fn named<'de, T: Deserialize<'de>>(index: usize, text: &'de str) -> rusqlite::Result<T> {
    use serde::de::IntoDeserializer;
    let text: serde::de::value::StrDeserializer<'_, serde::de::value::Error> =
        text.into_deserializer();
    T::deserialize(text).map_err(|e| bad_column(index, format!("`{text:?}`: {e}")))
}

/// Reads a step's view from its row's columns from `first` on: status, attempts, started_at,
/// finished_at, error_class, outputs.
fn step_from_row(row: &rusqlite::Row<'_>, first: usize) -> rusqlite::Result<StepView> {
    let status = row.get_ref(first)?.as_str()?;
    let error_class = match row.get_ref(first + 4)?.as_str_or_null()? {
        Some(text) => Some(named(first + 4, text)?),
        None => None,
    };
    let outputs = match row.get_ref(first + 5)?.as_str_or_null()? {
        Some(json) => decode(json)?,
        None => BTreeMap::new(),
    };
    Ok(StepView {
        status: named(first, status)?,
        attempts: row.get(first + 1)?,
        started_at: time_column(row, first + 2)?,
        finished_at: time_column(row, first + 3)?,
        error_class,
        outputs,
    })
}

/// Which steps to read with a header.
enum Steps<'a> {
    All,
    Named(&'a BTreeSet<String>),
}

fn started_at_text(view: &DeploymentView) -> String {
    view.started_at
        .to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

/// A deployment's header and the steps asked for; every step in blueprint order.
fn read_view(
    c: &Connection,
    id: DeploymentId,
    steps: Steps<'_>,
) -> rusqlite::Result<Option<DeploymentView>> {
    let json: Option<String> = c
        .prepare_cached("SELECT view FROM deployment_views WHERE id = ?1")?
        .query_row([id.to_string()], |row| row.get(0))
        .optional()?;
    let Some(json) = json else {
        return Ok(None);
    };
    let head: Header = decode(&json)?;
    let views = read_steps(c, id, steps)?;
    Ok(Some(head.with_steps(views)))
}

fn read_steps(
    c: &Connection,
    id: DeploymentId,
    steps: Steps<'_>,
) -> rusqlite::Result<IndexMap<String, StepView>> {
    let deployment = id.to_string();
    let mut views = IndexMap::new();
    match steps {
        Steps::All => {
            let mut select = c.prepare_cached(
                "SELECT name, status, attempts, started_at, finished_at, error_class, outputs
                 FROM step_views WHERE deployment = ?1 ORDER BY position",
            )?;
            let mut rows = select.query([&deployment])?;
            while let Some(row) = rows.next()? {
                let name: String = row.get(0)?;
                views.insert(name, step_from_row(row, 1)?);
            }
        }
        Steps::Named(names) => {
            let mut select = c.prepare_cached(
                "SELECT status, attempts, started_at, finished_at, error_class, outputs
                 FROM step_views WHERE deployment = ?1 AND name = ?2",
            )?;
            for name in names {
                let step = select
                    .query_row(params![deployment, name], |row| step_from_row(row, 0))
                    .optional()?;
                if let Some(step) = step {
                    views.insert(name.clone(), step);
                }
            }
        }
    }
    Ok(views)
}

fn read_tenant(c: &Connection, tenant: &str) -> rusqlite::Result<Option<TenantView>> {
    let json: Option<String> = c
        .prepare_cached("SELECT view FROM tenant_views WHERE tenant = ?1")?
        .query_row([tenant], |row| row.get(0))
        .optional()?;
    json.map(|j| decode(&j)).transpose()
}

fn put_tenant(c: &Connection, view: &TenantView) -> rusqlite::Result<()> {
    c.prepare_cached(
        "INSERT INTO tenant_views (tenant, view) VALUES (?1, ?2)
         ON CONFLICT (tenant) DO UPDATE SET view = excluded.view",
    )?
    .execute(params![view.tenant, encode(view)?])
    .map(|_| ())
}

/// Writes what `registry` sets: its removed instances deleted, its instances and interests
/// put. Every row is keyed in full, so writing it again changes nothing.
fn write_registry(c: &Connection, registry: &Registry) -> rusqlite::Result<()> {
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

fn deployment_column(row: &rusqlite::Row<'_>, index: usize) -> rusqlite::Result<DeploymentId> {
    let text = row.get_ref(index)?.as_str()?;
    text.parse()
        .map_err(|e| bad_column(index, format!("`{text}`, not a deployment id: {e}")))
}

/// One row of `SELECT tenant, service, address, port, deployment, step, host, registered_at`.
fn instance_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<(InstanceKey, RegisteredInstance)> {
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

const SELECT_INSTANCES: &str =
    "SELECT tenant, service, address, port, deployment, step, host, registered_at
     FROM service_instances";

/// The whole registry, as [`ReadModelStore::load_all`] gives it.
fn read_registry(c: &Connection) -> rusqlite::Result<Registry> {
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
fn registry_error(error: super::DbError) -> RegistryError {
    match &error {
        super::DbError::Sqlite {
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

fn unavailable(error: impl std::error::Error + Send + Sync + 'static) -> ViewError {
    ViewError::Unavailable(Box::new(error))
}

fn corrupt(error: impl std::error::Error + Send + Sync + 'static) -> ViewError {
    ViewError::Corrupt(Box::new(error))
}

/// A stored view that does not decode is corrupt; any other failure may pass.
fn view_error(error: super::DbError) -> ViewError {
    match &error {
        super::DbError::Sqlite {
            source: rusqlite::Error::FromSqlConversionFailure(..),
            ..
        } => corrupt(error),
        _ => unavailable(error),
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

#[async_trait]
impl DeploymentViews for SqliteReadModels {
    async fn view(&self, deployment: DeploymentId) -> Result<Option<DeploymentView>, ViewError> {
        self.db
            .read(move |c| read_view(c, deployment, Steps::All))
            .await
            .map_err(view_error)
    }

    async fn view_of_steps(
        &self,
        deployment: DeploymentId,
        steps: &BTreeSet<String>,
    ) -> Result<Option<DeploymentView>, ViewError> {
        let steps = steps.clone();
        self.db
            .read(move |c| read_view(c, deployment, Steps::Named(&steps)))
            .await
            .map_err(view_error)
    }

    async fn save(
        &self,
        view: &DeploymentView,
        loaded_at: Option<u64>,
        delta: &TenantDelta,
        steps: &BTreeSet<String>,
        registry: &Registry,
    ) -> Result<(), ViewError> {
        let head = serde_json::to_string(&view.header()).map_err(corrupt)?;
        let id = view.id;
        let started_at = started_at_text(view);
        // Only what is written is sent to the connection's thread: the header and the steps.
        let (tenant, status, revision) = (view.tenant.clone(), view.status.as_str(), view.revision);
        let mut rows = Vec::with_capacity(steps.len());
        for name in steps {
            // A new view holds every step, in order: a step's position is its index.
            if let Some((position, name, step)) = view.steps.get_full(name) {
                let outputs = outputs_json(&step.outputs).map_err(corrupt)?;
                rows.push((
                    name.clone(),
                    position as i64,
                    StepColumns::from(step),
                    outputs,
                ));
            }
        }
        let delta = delta.clone();
        let registry = registry.clone();
        let saved = self
            .db
            .with_derived(move |c| {
                let sp = c.savepoint()?;
                // The conditional write comes first: it takes the write lock before anything
                // is read, as an IMMEDIATE transaction would.
                let stored = match loaded_at {
                    None => sp
                        .prepare_cached(
                            "INSERT INTO deployment_views (id, tenant, status, started_at, revision, view)
                             VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (id) DO NOTHING",
                        )?
                        .execute(params![
                            id.to_string(),
                            tenant,
                            status,
                            started_at,
                            revision as i64,
                            head,
                        ])?,
                    Some(loaded) => sp
                        .prepare_cached(
                            "UPDATE deployment_views SET status = ?2, revision = ?3, view = ?4
                             WHERE id = ?1 AND revision = ?5",
                        )?
                        .execute(params![
                            id.to_string(),
                            status,
                            revision as i64,
                            head,
                            loaded as i64
                        ])?,
                };
                if stored == 0 {
                    return Ok(Err(ViewError::Conflict {
                        deployment: id,
                        loaded_at,
                    }));
                }
                {
                    let deployment = id.to_string();
                    let mut put = sp.prepare_cached(PUT_STEP)?;
                    for (name, position, columns, outputs) in &rows {
                        let outputs = outputs.as_deref();
                        put_step(&mut put, &deployment, name, *position, columns, outputs)?;
                    }
                }
                if !delta.is_empty() {
                    let summary = match read_tenant(&sp, &tenant) {
                        Ok(summary) => summary,
                        Err(error @ rusqlite::Error::FromSqlConversionFailure(..)) => {
                            return Ok(Err(corrupt(error)))
                        }
                        Err(error) => return Err(error),
                    };
                    put_tenant(&sp, &delta.apply_to(summary, &tenant))?;
                }
                write_registry(&sp, &registry)?;
                sp.commit()?;
                Ok(Ok(()))
            })
            .await
            .map_err(unavailable)?;
        saved
    }

    async fn tenant(&self, tenant: &str) -> Result<Option<TenantView>, ViewError> {
        let tenant = tenant.to_owned();
        self.db
            .read(move |c| read_tenant(c, &tenant))
            .await
            .map_err(view_error)
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
        deployments: &BTreeMap<DeploymentId, BTreeSet<String>>,
        tenants: &BTreeSet<String>,
    ) -> Result<ReadModels, StoreError> {
        let deployments = deployments.clone();
        let mut tenants = tenants.clone();
        self.db
            .read(move |c| {
                let mut models = ReadModels::default();
                for (id, steps) in &deployments {
                    if let Some(view) = read_view(c, *id, Steps::Named(steps))? {
                        tenants.insert(view.tenant.clone());
                        models.deployments.insert(*id, view);
                    }
                }
                for tenant in tenants {
                    if let Some(view) = read_tenant(c, &tenant)? {
                        models.tenants.insert(tenant, view);
                    }
                }
                Ok(models)
            })
            .await
            .map_err(store_error)
    }

    async fn save(
        &self,
        models: &ReadModels,
        touched: &Touched,
        checkpoint: u64,
    ) -> Result<(), StoreError> {
        // Encoded here, beside the fold, so the connection's thread only writes; the steps'
        // names and views go into one buffer, as a rebuild writes hundreds of thousands.
        let mut heads = Vec::with_capacity(models.deployments.len());
        let mut text: Vec<u8> = Vec::with_capacity(1 << 20);
        let mut steps: Vec<StepRow> = Vec::new();
        let none = ChangedSteps::default();
        for view in models.deployments.values() {
            let changed = touched.get(&view.id).unwrap_or(&none);
            let deployment = heads.len();
            let mut push = |position: usize, name: &str, step: &StepView| {
                let start = text.len();
                text.extend_from_slice(name.as_bytes());
                let middle = text.len();
                let outputs = if step.outputs.is_empty() {
                    None
                } else {
                    serde_json::to_writer(&mut text, &step.outputs).map_err(store_error)?;
                    Some(middle..text.len())
                };
                steps.push(StepRow {
                    deployment,
                    name: start..middle,
                    columns: StepColumns::from(step),
                    outputs,
                    position: position as i64,
                });
                Ok::<_, StoreError>(())
            };
            if changed.all {
                // A view the batch started holds every step, in order: a step's position is
                // its index.
                for (position, (name, step)) in view.steps.iter().enumerate() {
                    push(position, name, step)?;
                }
            } else {
                for name in &changed.named {
                    if let Some((position, name, step)) = view.steps.get_full(name) {
                        push(position, name, step)?;
                    }
                }
            }
            let head = serde_json::to_string(&view.header()).map_err(store_error)?;
            heads.push((
                view.id.to_string(),
                view.tenant.clone(),
                view.status.as_str(),
                started_at_text(view),
                view.revision as i64,
                head,
            ));
        }
        // Only names (strings) and serde_json's output went in.
        let text = String::from_utf8(text).map_err(store_error)?;
        let tenants: Vec<(String, String)> = models
            .tenants
            .values()
            .map(|view| Ok((view.tenant.clone(), serde_json::to_string(view)?)))
            .collect::<Result<_, serde_json::Error>>()
            .map_err(store_error)?;
        let registry = models.registry.clone();
        self.db
            .with_derived(move |c| {
                // No savepoint of its own: the writer runs each write in one, and an error
                // here rolls back all of it.
                {
                    let mut put_head = c.prepare_cached(
                        "INSERT INTO deployment_views (id, tenant, status, started_at, revision, view)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                         ON CONFLICT (id) DO UPDATE SET status = excluded.status,
                             revision = excluded.revision, view = excluded.view",
                    )?;
                    for (id, tenant, status, started_at, revision, head) in &heads {
                        put_head.execute(params![id, tenant, status, started_at, revision, head])?;
                    }
                    let mut put = c.prepare_cached(PUT_STEP)?;
                    for row in &steps {
                        put_step(
                            &mut put,
                            &heads[row.deployment].0,
                            &text[row.name.clone()],
                            row.position,
                            &row.columns,
                            row.outputs.clone().map(|range| &text[range]),
                        )?;
                    }
                    let mut put_tenant = c.prepare_cached(
                        "INSERT INTO tenant_views (tenant, view) VALUES (?1, ?2)
                         ON CONFLICT (tenant) DO UPDATE SET view = excluded.view",
                    )?;
                    for (tenant, json) in &tenants {
                        put_tenant.execute(params![tenant, json])?;
                    }
                    write_registry(c, &registry)?;
                    c.prepare_cached(
                        "INSERT INTO checkpoints (name, position) VALUES (?1, ?2)
                         ON CONFLICT (name) DO UPDATE SET position = excluded.position",
                    )?
                    .execute(params![CHECKPOINT, checkpoint as i64])?;
                }
                Ok(())
            })
            .await
            .map_err(store_error)
    }

    async fn load_all(&self) -> Result<ReadModels, StoreError> {
        self.db
            .read(|c| {
                let mut models = ReadModels::default();
                let mut deployments = c.prepare_cached("SELECT view FROM deployment_views")?;
                let heads = deployments
                    .query_map([], |row| row.get::<_, String>(0))?
                    .map(|json| decode::<Header>(&json?))
                    .collect::<rusqlite::Result<Vec<_>>>()?;
                for head in heads {
                    let steps = read_steps(c, head.id, Steps::All)?;
                    let view = head.with_steps(steps);
                    models.deployments.insert(view.id, view);
                }
                let mut tenants = c.prepare_cached("SELECT view FROM tenant_views")?;
                for json in tenants.query_map([], |row| row.get::<_, String>(0))? {
                    let view: TenantView = decode(&json?)?;
                    models.tenants.insert(view.tenant.clone(), view);
                }
                models.registry = read_registry(c)?;
                Ok(models)
            })
            .await
            .map_err(store_error)
    }

    async fn clear(&self) -> Result<(), StoreError> {
        self.db
            .with_derived(|c| {
                let sp = c.savepoint()?;
                sp.execute_batch(
                    "DELETE FROM deployment_views; DELETE FROM step_views; DELETE FROM tenant_views;
                     DELETE FROM service_instances; DELETE FROM service_interests;",
                )?;
                sp.execute("DELETE FROM checkpoints WHERE name = ?1", [CHECKPOINT])?;
                sp.commit()
            })
            .await
            .map_err(store_error)
    }
}

/// The log as a rebuild reads it ([`ReadLog::read_changes`]): only the columns and fields the
/// read models need (the event's type and data, its stream, revision and when it was
/// recorded), decoded on the connection's thread. Give it a connection of its own (a
/// [`Database`] opened on the same file) and reading the next batch overlaps storing this one.
#[derive(Clone, Debug)]
pub struct LogChanges {
    db: Database,
    log: EventLog,
}

/// How much of the file [`LogChanges`] maps into memory.
const MMAP_BYTES: i64 = 1 << 30;

/// The one field of an event's metadata the read models need.
#[derive(Deserialize)]
struct Recorded {
    recorded_at: Timestamp,
}

impl LogChanges {
    /// The log in this database, read through this handle.
    pub fn new(db: Database) -> Self {
        Self {
            log: EventLog::new(db.clone()),
            db,
        }
    }
}

/// The `recorded_at` of metadata as Overture writes it: the object's last member, at the top
/// level (the quote before it follows `{` or `,`, so it is not inside a string), its value
/// closing the object. Anything else is left to the full decoding. The rest of the object is
/// not looked at, so metadata that is not valid JSON around a well-formed end is read here
/// where decoding it whole would refuse it; the log only holds what serde_json wrote.
fn recorded_at(metadata: &str) -> Option<Timestamp> {
    let rest = metadata.trim_end().strip_suffix("\"}")?;
    // The value's opening quote: a time holds none. Found by a search for one byte, which
    // costs less than a search for the key.
    let open = rest.rfind('"')?;
    let before = rest[..open].strip_suffix("\"recorded_at\":")?;
    if !matches!(before.trim_end().chars().next_back(), Some('{' | ',')) {
        return None;
    }
    parse_utc(&rest[open + 1..])
}

/// Parses `YYYY-MM-DDTHH:MM:SS[.fraction]Z`, the form Overture records times in, as chrono
/// would; `None` for any other form (leap seconds, offsets, ...), which chrono then parses.
fn parse_utc(text: &str) -> Option<Timestamp> {
    let b = text.as_bytes();
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b'T'
        || b[13] != b':'
        || b[16] != b':'
        || *b.last()? != b'Z'
    {
        return None;
    }
    let num = |range: std::ops::Range<usize>| -> Option<u32> {
        b[range].iter().try_fold(0u32, |n, &d| {
            d.is_ascii_digit().then(|| n * 10 + u32::from(d - b'0'))
        })
    };
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let nanos = match &b[19..b.len() - 1] {
        [] => 0,
        [b'.', digits @ ..] if (1..=9).contains(&digits.len()) => {
            let n = num(20..20 + digits.len())?;
            n * 10u32.pow(9 - digits.len() as u32)
        }
        _ => return None,
    };
    if second > 59 {
        return None;
    }
    let date = chrono::NaiveDate::from_ymd_opt(i32::try_from(year).ok()?, month, day)?;
    Some(
        date.and_hms_nano_opt(hour, minute, second, nanos)?
            .and_utc(),
    )
}

/// Decodes one row of `SELECT position, stream, revision, type, data, metadata`. `last` is the
/// stream of the row before and its deployment: a stream's records mostly come in runs, and
/// its id need not be parsed again for each.
fn change_entry(
    row: &rusqlite::Row<'_>,
    last: &mut Option<(String, DeploymentId)>,
) -> rusqlite::Result<Result<ChangeEntry, ProjectorError>> {
    let position: i64 = row.get(0)?;
    let position = position.max(0) as u64;
    let stream = row.get_ref(1)?.as_str()?;
    let revision: i64 = row.get(2)?;
    let event_type = row.get_ref(3)?.as_str()?;
    let data = row.get_ref(4)?.as_str()?;
    let metadata = row.get_ref(5)?.as_str()?;
    let invalid = |source| ProjectorError::Projection { position, source };
    let decoded = (|| {
        let deployment = match last {
            Some((text, id)) if text == stream => *id,
            _ => {
                let id = DeploymentId::from_stream(stream)?;
                *last = Some((stream.to_owned(), id));
                id
            }
        };
        let recorded = match recorded_at(metadata) {
            Some(at) => Recorded { recorded_at: at },
            None => serde_json::from_str(metadata).map_err(|source| {
                overture_events::deployment::SchemaError {
                    event_type: event_type.to_owned(),
                    source,
                }
            })?,
        };
        let change = Change::decode(event_type, data)?;
        Ok(Folding {
            deployment,
            revision: revision.max(0) as u64,
            at: recorded.recorded_at,
            change,
        })
    })();
    Ok(decoded
        .map(|folding| ChangeEntry { position, folding })
        .map_err(invalid))
}

#[async_trait]
impl ReadLog for LogChanges {
    async fn read_all(&self, after: u64, limit: usize) -> Result<Vec<LogEntry>, StoreError> {
        ReadLog::read_all(&self.log, after, limit).await
    }

    async fn read_changes(
        &self,
        after: u64,
        limit: usize,
    ) -> Result<Vec<ChangeEntry>, ProjectorError> {
        let read = self
            .db
            .read_long(move |c| {
                // Pages mapped rather than copied by a system call each: a rebuild reads the
                // whole log once.
                c.pragma_update(None, "mmap_size", MMAP_BYTES)?;
                let mut select = c.prepare_cached(
                    "SELECT position, stream, revision, type, data, metadata FROM events
                     WHERE position > ?1 ORDER BY position LIMIT ?2",
                )?;
                let after = i64::try_from(after).unwrap_or(i64::MAX);
                let limit_sql = i64::try_from(limit).unwrap_or(i64::MAX);
                let mut rows = select.query(params![after, limit_sql])?;
                let mut entries = Vec::with_capacity(limit.min(1 << 16));
                let mut last = None;
                while let Some(row) = rows.next()? {
                    match change_entry(row, &mut last)? {
                        Ok(entry) => entries.push(entry),
                        Err(error) => return Ok(Err(error)),
                    }
                }
                Ok(Ok(entries))
            })
            .await
            .map_err(store_error)?;
        read
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use overture_domain::deployment::StepStatus;

    fn at(text: &str) -> Timestamp {
        serde_json::from_value(serde_json::Value::String(text.into())).expect("a time")
    }

    // Steps are stored in columns: every status, error class and shape of step, and times of
    // every precision, the far past and future and a leap second, read back as they were.
    #[test]
    fn steps_read_back_from_their_columns_as_they_were_stored() {
        let times = [
            "2026-11-27T12:31:16Z",
            "2026-11-27T12:31:16.100Z",
            "2026-11-27T12:31:16.000100Z",
            "2026-11-27T12:31:16.356064375Z",
            "1677-09-21T00:12:43.145224192Z",
            "0001-01-01T00:00:00.000000001Z",
            "9999-12-31T23:59:59.999999999Z",
            "+10000-01-01T00:00:00Z",
        ];
        let statuses = [
            StepStatus::Pending,
            StepStatus::Scheduled,
            StepStatus::Running,
            StepStatus::Retrying,
            StepStatus::Succeeded,
            StepStatus::Failed,
            StepStatus::Abandoned,
        ];
        let leap_second = chrono::NaiveDate::from_ymd_opt(2016, 12, 31)
            .and_then(|d| d.and_hms_nano_opt(23, 59, 59, 1_500_000_000))
            .map(|t| t.and_utc());
        let mut steps = vec![StepView {
            status: StepStatus::Pending,
            attempts: 0,
            started_at: None,
            finished_at: leap_second,
            error_class: None,
            outputs: BTreeMap::new(),
        }];
        for (i, time) in times.iter().enumerate() {
            steps.push(StepView {
                status: statuses[i % statuses.len()],
                attempts: 3,
                started_at: Some(at(time)),
                finished_at: Some(at(time) + chrono::TimeDelta::milliseconds(1)),
                error_class: Some(ErrorClass::ALL[i % ErrorClass::ALL.len()]),
                outputs: [("url".to_owned(), "https://x/\"quoted\"\n".to_owned())].into(),
            });
        }
        for (status, class) in statuses.iter().zip(ErrorClass::ALL) {
            steps.push(StepView {
                status: *status,
                attempts: 1,
                started_at: None,
                finished_at: None,
                error_class: Some(class),
                outputs: BTreeMap::new(),
            });
        }
        let mut c = Connection::open_in_memory().expect("in-memory database");
        super::super::schema::migrate(&mut c).expect("migrated");
        let id = DeploymentId::from_uuid(uuid::Uuid::now_v7());
        {
            let mut put = c.prepare(PUT_STEP).expect("prepared");
            for (position, step) in steps.iter().enumerate() {
                let outputs = outputs_json(&step.outputs).expect("encoded");
                let name = format!("s{position}");
                let columns = StepColumns::from(step);
                put_step(
                    &mut put,
                    &id.to_string(),
                    &name,
                    position as i64,
                    &columns,
                    outputs.as_deref(),
                )
                .expect("stored");
            }
        }
        let read = read_steps(&c, id, Steps::All).expect("read");
        let read: Vec<StepView> = read.into_values().collect();
        assert_eq!(read, steps);
    }

    // Views saved by a build that kept each step as a JSON document read back the same once
    // the file is upgraded: what `overture status` shows does not change.
    #[test]
    fn step_documents_read_back_the_same_after_the_upgrade() {
        let c = Connection::open_in_memory().expect("in-memory database");
        super::super::schema::migrate_to(&c, 6).expect("the older schema");
        let id = DeploymentId::from_uuid(uuid::Uuid::now_v7());
        let head = r#"{"id":"ID","tenant":"acme","blueprint":"app","status":"failed",
            "started_at":"2027-01-15T08:00:00Z","finished_at":"2027-01-15T08:01:00.25Z",
            "reason":"no","revision":9}"#
            .replace("ID", &id.to_string());
        c.execute(
            "INSERT INTO deployment_views (id, tenant, status, started_at, revision, view)
             VALUES (?1, 'acme', 'failed', 'x', 9, ?2)",
            params![id.to_string(), head],
        )
        .expect("a header");
        let steps = [
            r#"{"status":"succeeded","attempts":1,"started_at":"2027-01-15T08:00:01Z","finished_at":"2027-01-15T08:00:02.123456789Z","outputs":{"k":"v","url":"https://x/\"q\""}}"#,
            r#"{"status":"failed","attempts":3,"started_at":"2027-01-15T08:00:03.5Z","finished_at":"2027-01-15T08:01:00Z","error_class":"bootstrap-timeout"}"#,
            r#"{"status":"pending","attempts":0}"#,
        ];
        for (position, json) in steps.iter().enumerate() {
            c.execute(
                "INSERT INTO step_views (deployment, name, position, view) VALUES (?1, ?2, ?3, ?4)",
                params![
                    id.to_string(),
                    format!("s{position}"),
                    position as i64,
                    json
                ],
            )
            .expect("a step");
        }
        let header: Header = serde_json::from_str(&head).expect("a header");
        let expected = header.with_steps(
            steps
                .iter()
                .enumerate()
                .map(|(position, json)| {
                    let step = serde_json::from_str(json).expect("a step view");
                    (format!("s{position}"), step)
                })
                .collect(),
        );

        // Up to the version that split the documents; a later one folds the views again from
        // the log, which this file has none of.
        super::super::schema::upgrade_to(&c, 8).expect("upgraded");

        let read = read_view(&c, id, Steps::All)
            .expect("read")
            .expect("a view");
        assert_eq!(read, expected);
        let named = BTreeSet::from(["s1".to_owned()]);
        let one = read_view(&c, id, Steps::Named(&named))
            .expect("read")
            .expect("a view");
        assert_eq!(one.steps.get("s1"), expected.steps.get("s1"));
        assert_eq!(one.steps.len(), 1);
    }

    // The log's metadata is read for its time without decoding it whole when it is in the form
    // Overture writes; any other form is decoded whole, and both agree.
    #[test]
    fn recorded_at_is_read_as_the_whole_decoding_reads_it() {
        let whole = |metadata: &str| -> Option<Timestamp> {
            serde_json::from_str::<Recorded>(metadata)
                .ok()
                .map(|r| r.recorded_at)
        };
        let fast = [
            r#"{"tenant":"acme","actor":"bench","recorded_at":"2026-11-27T12:31:16.342064375Z"}"#,
            r#"{"recorded_at":"1970-01-01T00:00:05Z"}"#,
            r#"{"a":"b", "recorded_at":"2026-11-27T12:31:16.3Z"} "#,
        ];
        for metadata in fast {
            assert!(recorded_at(metadata).is_some(), "{metadata}");
            assert_eq!(recorded_at(metadata), whole(metadata), "{metadata}");
        }
        let left_to_serde = [
            // Not the last member, nested, inside a string, other forms of time.
            r#"{"recorded_at":"2026-11-27T12:31:16Z","actor":"x"}"#,
            r#"{"x":{"recorded_at":"2026-11-27T12:31:16Z"}}"#,
            r#"{"actor":"a\",\"recorded_at\":\"2026-11-27T12:31:16Z"}"#,
            r#"{"actor":"a\\","recorded_at":"2026-11-27T12:31:16+01:00"}"#,
            r#"{"recorded_at":"2026-11-27t12:31:16Z"}"#,
            r#"{"recorded_at":"2026-11-27T12:31:60Z"}"#,
            r#"{"recorded_at":"2026-11-27T12:31:16.1234567891Z"}"#,
            r#"{"recorded_at":"2026-02-30T12:31:16Z"}"#,
        ];
        for metadata in left_to_serde {
            assert_eq!(recorded_at(metadata), None, "{metadata}");
        }
    }

    #[test]
    fn times_in_overtures_form_parse_as_chrono_parses_them() {
        for text in [
            "2026-11-27T12:31:16Z",
            "2026-11-27T12:31:16.1Z",
            "2026-11-27T12:31:16.000100Z",
            "2026-11-27T12:31:16.356064375Z",
            "2024-02-29T23:59:59.999999999Z",
        ] {
            assert_eq!(parse_utc(text), Some(at(text)), "{text}");
        }
    }
}
