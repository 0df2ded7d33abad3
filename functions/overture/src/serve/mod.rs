//! `overture serve`: the HTTP API, the tenant boundary of the embedded engine.
//!
//! - `mod.rs`: the application's state ([`Api`], a few ports), the port that starts, redrives
//!   and cancels deployments ([`RunDeployments`]), and [`run`], which opens the data directory, resumes
//!   unfinished deployments, binds and serves.
//! - [`routes`]: the routes, built as one axum `Router` with its OpenAPI document from the same
//!   annotations, so the document cannot miss a route.
//! - [`auth`]: the `X-Auth-Token` check with the cloud's identity service; the tenant is the
//!   token's project.
//! - [`error`]: errors as JSON with stable codes.
//! - [`embedded`]: the ports on the embedded engine.
//! - [`events`]: `POST /v1/events`, events for the trigger file given with `--triggers`.
//!
//! The application is a plain `Router` over [`Api`], so the same routes could be served by
//! `lambda_http` with ports on the serverless form.

pub mod auth;
mod embedded;
pub mod error;
pub mod events;
pub mod routes;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use async_trait::async_trait;
use clap::Args;
use overture_domain::DeploymentError;
use overture_events::DeploymentId;
use overture_kit::query::QueryDeployments;
use overture_submit::again::Redrive;
use overture_submit::{CheckToken, Submission, SubmitError};

use crate::Failure;

/// `overture serve`'s options.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// The address to listen on; use a loopback address unless a proxy in front terminates TLS.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub addr: SocketAddr,
    /// The cloud's identity (Keystone v3) URL that checks the callers' tokens.
    #[arg(long, env = "OS_AUTH_URL", value_name = "URL")]
    pub auth_url: String,
    /// How many steps of one deployment may run at once.
    #[arg(long, default_value_t = 8)]
    pub parallelism: usize,
    /// A trigger file: `POST /v1/events` evaluates it, deploying into the caller's tenant only.
    #[arg(long, value_name = "FILE")]
    pub triggers: Option<std::path::PathBuf>,
}

/// Why the engine could not start or cancel a deployment.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Submitting failed (the blueprint is invalid, or a store failed).
    #[error(transparent)]
    Submit(#[from] SubmitError),
    /// The engine failed.
    #[error("the engine failed: {0}")]
    Engine(String),
}

/// Starts, cancels and watches deployments: the engine behind the API.
#[async_trait]
pub trait RunDeployments: Send + Sync {
    /// Validates, seals and records a deployment, and starts running it.
    async fn start(&self, submission: Submission) -> Result<DeploymentId, RunError>;
    /// Checks, seals and records the redrive of a failed deployment, and drives it on.
    async fn redrive(&self, request: Redrive) -> Result<(), RunError>;
    /// Records a user's cancel; whoever drives the deployment carries it out.
    async fn cancel(
        &self,
        id: DeploymentId,
        requested_by: &str,
        reason: &str,
    ) -> Result<Result<(), DeploymentError>, RunError>;
    /// Returns when the log may have grown (at the latest after a short while).
    async fn changed(&self);
    /// A caller the identity service accepted: deployments of its project that wait for a token
    /// since the server restarted carry on with it.
    async fn caller_seen(&self, caller: &auth::Caller);
}

/// The application's state: the ports the routes use.
#[derive(Clone)]
pub struct Api {
    /// What the routes read.
    pub queries: Arc<dyn QueryDeployments>,
    /// Who checks the callers' tokens.
    pub identity: Arc<dyn CheckToken>,
    /// The engine.
    pub deployments: Arc<dyn RunDeployments>,
    /// The trigger file's dispatcher, with `--triggers`.
    pub triggers: Option<Arc<crate::triggers::Dispatcher>>,
}

/// `overture serve`: resumes what was unfinished, then serves until killed.
pub async fn run(data_dir: &Path, args: ServeArgs) -> Result<(), Failure> {
    // Checked before anything starts: a bad trigger file is bad input, as for `trigger send`.
    let trigger_file = match &args.triggers {
        Some(path) => Some((crate::triggers::read_trigger_file(path)?, path)),
        None => None,
    };
    let engine = embedded::Embedded::start(data_dir, args.parallelism).await?;
    let triggers = match trigger_file {
        Some((file, path)) => Some(Arc::new(
            crate::triggers::Dispatcher::new(
                Arc::clone(&engine.engine),
                data_dir,
                file,
                path,
                args.parallelism,
            )
            .await?,
        )),
        None => None,
    };
    let api = Api {
        triggers,
        queries: Arc::new(embedded::FreshQueries(Arc::clone(&engine.engine))),
        identity: Arc::new(overture_openstack::Keystone::new(args.auth_url)),
        deployments: Arc::new(engine),
    };
    let listener = tokio::net::TcpListener::bind(args.addr)
        .await
        .map_err(|e| Failure::BadInput(format!("--addr {}: cannot listen: {e}", args.addr)))?;
    let bound = listener.local_addr().context("reading the bound address")?;
    // Tests and scripts read the port from this line when they asked for port 0.
    outln!("listening on http://{bound}");
    axum::serve(listener, routes::router(api))
        .await
        .context("serving HTTP")?;
    Ok(())
}
