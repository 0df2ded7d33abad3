//! [`ReadModelStore`], the rebuild's port: many headers and steps and the checkpoint in one
//! write; the whole read models loaded, or cleared.

use std::collections::{BTreeMap, BTreeSet};

use async_trait::async_trait;
use overture_domain::projection::{
    ChangedSteps, Header, ReadModels, StepView, TenantView, Touched,
};
use overture_events::DeploymentId;
use overture_projector::{ReadModelStore, StoreError};
use rusqlite::{params, OptionalExtension};

use super::registry::{read_registry, write_registry};
use super::rows::{
    put_step, read_steps, read_tenant, read_view, started_at_text, StepColumns, Steps, PUT_STEP,
};
use super::{decode, store_error, SqliteReadModels, CHECKPOINT};

/// A step row to write: its deployment's index among the headers written, its columns, and
/// where its name and outputs are in the buffer written with them.
struct StepRow {
    deployment: usize,
    name: std::ops::Range<usize>,
    columns: StepColumns,
    outputs: Option<std::ops::Range<usize>>,
    position: i64,
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
