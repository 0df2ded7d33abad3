//! [`DeploymentViews`], the projector's per-stream port: one deployment's view saved in one
//! savepoint, conditional on the revision it was loaded at, with its tenant's delta.

use std::collections::BTreeSet;

use async_trait::async_trait;
use overture_domain::projection::{DeploymentView, TenantDelta, TenantView};
use overture_domain::registry::Registry;
use overture_events::DeploymentId;
use overture_projector::{DeploymentViews, ViewError};
use rusqlite::params;

use super::registry::write_registry;
use super::rows::{
    outputs_json, put_step, put_tenant, read_tenant, read_view, started_at_text, StepColumns,
    Steps, PUT_STEP,
};
use super::SqliteReadModels;
use crate::sqlite::DbError;

pub(super) fn unavailable(error: impl std::error::Error + Send + Sync + 'static) -> ViewError {
    ViewError::Unavailable(Box::new(error))
}

pub(super) fn corrupt(error: impl std::error::Error + Send + Sync + 'static) -> ViewError {
    ViewError::Corrupt(Box::new(error))
}

/// A stored view that does not decode is corrupt; any other failure may pass.
pub(super) fn view_error(error: DbError) -> ViewError {
    match &error {
        DbError::Sqlite {
            source: rusqlite::Error::FromSqlConversionFailure(..),
            ..
        } => corrupt(error),
        _ => unavailable(error),
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
