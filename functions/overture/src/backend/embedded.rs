//! The embedded backend: the engine ([`overture_embedded`]) in this process, on the data
//! directory; a `deploy` hands its deployment to an `overture engine` serving the directory
//! when one does ([`crate::handover`]).

use std::path::{Path, PathBuf};

use anyhow::Context;
use async_trait::async_trait;
use overture_domain::deployment::{Outcome, Phase};
use overture_domain::text::escaped;
use overture_embedded::Engine;
use overture_events::DeploymentId;
use overture_kit::query::QueryDeployments;
use overture_submit::Submission;

use super::Backend;
use crate::commands::cancel::{self, CancelArgs};
use crate::commands::deploy::{several, Deploy};
use crate::commands::logs::{self, LogsArgs};
use crate::commands::redrive::{self, Again};
use crate::commands::verify;
use crate::input::not_submitted;
use crate::lock::EngineLock;
use crate::output::print_view;
use crate::progress::Progress;
use crate::{handover, lock, triggers, Failure};

/// The engine on a data directory.
pub struct Embedded {
    data_dir: PathBuf,
}

impl Embedded {
    /// The backend on `data_dir`.
    pub fn new(data_dir: &Path) -> Self {
        Self {
            data_dir: data_dir.to_path_buf(),
        }
    }
}

/// No deployment `id` in the data directory.
pub fn missing(id: DeploymentId) -> Failure {
    Failure::BadInput(format!(
        "no deployment {id} in this data directory (see `overture list`)"
    ))
}

#[async_trait(?Send)]
impl Backend for Embedded {
    fn missing(&self, id: DeploymentId) -> Failure {
        missing(id)
    }

    fn only_embedded(&self, _: &str) -> Result<(), Failure> {
        Ok(())
    }

    /// The tenant `deploy` records under without `--tenant` or a token: `OVERTURE_TENANT`, or
    /// `default`.
    fn own_tenant(&self) -> Option<String> {
        let tenant = std::env::var("OVERTURE_TENANT").ok();
        Some(
            tenant
                .filter(|t| !t.is_empty())
                .unwrap_or_else(|| "default".into()),
        )
    }

    async fn queries(&self) -> Result<Box<dyn QueryDeployments>, Failure> {
        let engine = Engine::open(&self.data_dir).await?;
        engine.project().await?;
        Ok(Box::new(engine.queries()))
    }

    async fn deploy(&self, deploy: Deploy<'_>) -> Result<(), Failure> {
        self.deploy_here(deploy).await
    }

    async fn cancel(&self, args: &CancelArgs) -> Result<(), Failure> {
        cancel::cancel(
            &self.data_dir,
            &args.id,
            args.reason.clone(),
            &args.token,
            args.json,
        )
        .await
    }

    async fn redrive(&self, again: Again<'_>) -> Result<(), Failure> {
        redrive::redrive(&self.data_dir, again).await
    }

    async fn redeploy(&self, again: Again<'_>) -> Result<(), Failure> {
        redrive::redeploy(&self.data_dir, again).await
    }

    async fn check_read_models(&self) -> Result<Vec<String>, Failure> {
        let engine = Engine::open(&self.data_dir).await?;
        let differences =
            overture_projector::check(&engine.log, &engine.read_models, overture_projector::BATCH)
                .await
                .map_err(anyhow::Error::from)?;
        Ok(differences)
    }

    async fn verify(&self, stream: Option<String>) -> Result<verify::Report, Failure> {
        let engine = Engine::open(&self.data_dir).await?;
        let verified = engine
            .log
            .verify(stream)
            .await
            .map_err(anyhow::Error::from)?;
        let unchained = verified
            .sealings
            .iter()
            .filter(|s| s.events > 0)
            .map(|sealing| {
                format!(
                    "events up to position {} ({} of them) were recorded before the log was \
                     chained and sealed on first read at {}: their history before then is \
                     attested from then on",
                    sealing.up_to, sealing.events, sealing.at
                )
            })
            .collect();
        Ok(verify::Report {
            streams: verified.streams,
            events: verified.events,
            heads: verified.heads,
            broken: verified.broken.map(|broken| verify::Broken {
                stream: broken.stream,
                revision: broken.revision,
                position: Some(broken.position),
                reason: broken.reason,
            }),
            unchained,
        })
    }

    async fn send_event(&self, args: crate::commands::trigger::SendArgs) -> Result<(), Failure> {
        triggers::send(&self.data_dir, args).await
    }

    async fn trigger_log(&self, json: bool) -> Result<(), Failure> {
        triggers::log(&self.data_dir, json).await
    }

    async fn publish_triggers(&self, _: &Path) -> Result<(), Failure> {
        Err(Failure::BadInput(
            "`overture triggers publish` stores a trigger file for the serverless form; give                  --backend aws (the embedded engine reads the file given with                  `trigger send --triggers FILE` or `serve --triggers FILE`)"
                .into(),
        ))
    }

    async fn logs(&self, args: &LogsArgs) -> Result<(), Failure> {
        logs::show(
            &self.data_dir,
            &args.id,
            &args.step,
            args.which(),
            args.follow,
        )
        .await
    }
}

impl Embedded {
    /// Records the deployments with the user's token (its project is the tenant), and drives
    /// them here, or hands a single one to the engine serving the data directory.
    async fn deploy_here(&self, deploy: Deploy<'_>) -> Result<(), Failure> {
        let Deploy {
            mut blueprints,
            tenant,
            token,
            params,
            secrets: secret_values,
            pace,
            json,
            name,
        } = deploy;
        let data_dir = self.data_dir.as_path();
        let several = blueprints.len() > 1;
        let (file, (text, parsed)) = blueprints.remove(0);
        let files = parsed.snapshot.files.clone();
        let mut tokens = token.check().await?;
        if tokens.len() > 1 {
            return Err(Failure::BadInput(
                "--token-file: a deployment acts with one token; give it once".into(),
            ));
        }
        let checked = tokens.pop();
        // With a token the tenant is its project's id: names repeat across domains and come back
        // when a project is made again. The id is what --tenant must then say, if anything.
        let tenant = match (&checked, tenant) {
            // The project's name is taken too: it says the same project as the token.
            (Some(checked), Some(tenant))
                if tenant != checked.info.project_id && tenant != checked.info.project =>
            {
                return Err(Failure::BadInput(format!(
                    "--tenant {}: the token is for project `{}` (id {}), and a deployment's tenant \
                     is its token's project; leave out --tenant",
                    escaped(&tenant),
                    escaped(&checked.info.project),
                    escaped(&checked.info.project_id)
                )))
            }
            (Some(checked), _) => checked.info.project_id.clone(),
            (None, tenant) => tenant.unwrap_or_else(|| "default".into()),
        };
        // Acting with a token, the requester is whom the cloud says the token belongs to.
        let requested_by = checked
            .as_ref()
            .map_or_else(cancel::local_user, |checked| checked.info.user.clone());
        let cloud = checked.map(|checked| overture_submit::CloudSession {
            account: checked.info.account(),
            token: checked.token,
        });
        let submission_of = |file: &Path, text: String, files| Submission {
            triggered_by: None,
            cloud: cloud.as_ref().map(|cloud| overture_submit::CloudSession {
                account: cloud.account.clone(),
                token: cloud.token.clone(),
            }),
            source: file.display().to_string(),
            text,
            tenant: tenant.clone(),
            requested_by: requested_by.clone(),
            trigger: "cli".into(),
            params: params.clone(),
            secrets: secret_values.clone(),
            files,
            name: name.clone(),
        };
        let submission = (!several).then(|| submission_of(file, text.clone(), files));
        if let Some(submission) = &submission {
            if let Some(followed) =
                handover::guest::hand_over(data_dir, file, submission, json).await
            {
                return followed;
            }
        }
        let engine = Engine::open(data_dir).await?;
        // Before anything is recorded: on a machine without a sandbox's tools no step could run.
        engine.preflight()?;
        let _lock =
            EngineLock::take(data_dir, false).map_err(|e| Failure::BadInput(e.to_string()))?;
        let start = engine
            .log
            .head_position()
            .await
            .context("reading the log")?;
        let Some(submission) = submission else {
            blueprints.insert(0, (file, (text, parsed)));
            let submissions = blueprints
                .into_iter()
                .map(|(file, (text, parsed))| {
                    let submission = submission_of(file, text, parsed.snapshot.files.clone());
                    (file.to_path_buf(), submission)
                })
                .collect();
            return several::deploy_all(&engine, data_dir, submissions, pace, json).await;
        };
        let id = engine
            .submit(submission)
            .await
            .map_err(|error| not_submitted(file, error))?;
        eprintln!("deployment {id}");
        // Only a `cancel` racing this very line could find it free, and it would then drive the
        // deployment beside this process: harmless, as every action is idempotent.
        let _driving = lock::DriveLock::take(data_dir, id).context("taking the drive lock")?;
        let mut progress = Progress::new();
        let drive = engine.drive(Some(id), pace.parallelism, &mut progress, start);
        cancel::drive_cancelling_on_signal(&engine, id, &requested_by, drive).await?;
        print_end(&engine, id, json).await
    }
}

/// Prints a deployment this process drove to its end, as `status` prints it, and ends by the
/// outcome its log recorded: 0 when it succeeded, 1 otherwise. The view printed holds every
/// record up to that outcome, however far the other processes on the data directory have fed
/// the read models.
pub async fn print_end(engine: &Engine, id: DeploymentId, json: bool) -> Result<(), Failure> {
    let (state, view) = engine.settled(id).await?;
    print_view(&view, json);
    match state.phase {
        Phase::Finished(Outcome::Succeeded) => Ok(()),
        _ => Err(Failure::Unsuccessful(String::new())),
    }
}
