//! `overture resume`: every unfinished deployment carried on after a crash.

use std::path::Path;

use anyhow::Context;
use overture_domain::projection::DeploymentStatus;
use overture_embedded::{Engine, Unwatched};
use overture_events::DeploymentId;
use overture_orchestrator::Since;

use crate::backend::Backend;
use crate::lock::EngineLock;
use crate::output::find_view;
use crate::{token, Failure};

/// `overture resume`.
#[derive(clap::Args)]
pub struct ResumeArgs {
    /// How many steps may run at once.
    #[arg(long, default_value_t = 8)]
    parallelism: usize,
    #[command(flatten)]
    pub token: token::TokenArgs,
}

impl ResumeArgs {
    /// Takes the engine lock, releases what stopped engines held, and drives every unfinished
    /// deployment to its end; exit 1 when any did not succeed.
    pub async fn run(self, backend: &dyn Backend, data_dir: &Path) -> Result<(), Failure> {
        let Self { parallelism, token } = self;
        let tokens = token.check().await?;
        let engine = Engine::open(data_dir).await?;
        engine.preflight()?;
        let _lock =
            EngineLock::take(data_dir, true).map_err(|e| Failure::BadInput(e.to_string()))?;
        let unfinished = engine.unfinished().await?;
        hand_over_tokens(&engine, &unfinished, tokens).await?;
        let released = engine.recover().await?;
        for id in &unfinished {
            engine.interrupt_running(*id).await?;
        }
        eprintln!(
            "resuming {} unfinished deployment(s); {released} job(s) were held by a stopped engine",
            unfinished.len()
        );
        for id in &unfinished {
            engine
                .orchestrate(*id, uuid::Uuid::now_v7(), Since::Unknown)
                .await?;
        }
        engine
            .drive(
                None,
                parallelism,
                &mut Unwatched,
                engine
                    .log
                    .head_position()
                    .await
                    .context("reading the log")?,
            )
            .await?;
        let mut unsuccessful = 0;
        engine.project().await?;
        let queries = engine.queries();
        for id in unfinished {
            let view = find_view(&queries, &|id| backend.missing(id), &id.to_string()).await?;
            outln!("{id} {}", view.status.as_str());
            unsuccessful += usize::from(view.status != DeploymentStatus::Succeeded);
        }
        if unsuccessful == 0 {
            Ok(())
        } else {
            Err(Failure::Unsuccessful(format!(
                "{unsuccessful} of the deployments resumed did not succeed"
            )))
        }
    }
}

/// Gives each unfinished deployment made with a cloud token a token of its project, or refuses
/// to resume at all: without it, its seal cannot be opened nor its bastion closed.
async fn hand_over_tokens(
    engine: &Engine,
    unfinished: &[DeploymentId],
    tokens: Vec<token::CheckedToken>,
) -> Result<(), Failure> {
    let mut missing = Vec::new();
    for id in unfinished {
        let Some(cloud) = engine.state(*id).await?.cloud else {
            continue;
        };
        match tokens
            .iter()
            .find(|t| t.info.project_id == cloud.project_id)
        {
            Some(checked) => engine.custody.remember(*id, checked.token.clone()),
            None => missing.push(format!("{id} (project {})", cloud.project)),
        }
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(Failure::BadInput(format!(
            "--token-file: these deployments act with a cloud token, and only a token of their \
             project can open their seal and close their bastion: {}; give one with --token-file \
             FILE (repeatable) or OS_TOKEN",
            missing.join(", ")
        )))
    }
}
