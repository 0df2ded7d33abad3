//! The HTTP API as one axum application over a few ports, so the same routes are served by
//! `overture serve` (the embedded engine) and by the `api` Lambda (the serverless form).
//!
//! - `lib.rs`: the application's state ([`Api`]) and its ports: [`RunDeployments`], which
//!   starts, redrives and cancels deployments, and [`DeliverEvents`], a server's trigger file.
//! - [`routes`]: the routes, built as one axum `Router` with its OpenAPI document from the same
//!   annotations, so the document cannot miss a route.
//! - [`auth`]: the `X-Auth-Token` check with the cloud's identity service; the tenant is the
//!   token's project.
//! - [`error`]: errors as JSON with stable codes.
//! - [`events`]: `POST /v1/events`, events for a server's trigger file, in the CloudEvents
//!   HTTP binding's three modes.
//! - [`grants`]: the grant rows of `GET /v1/grants` (and of `overture grants`).
//! - [`recorded`]: [`recorded::Recorded`], the engine where recording a deployment starts it
//!   (the serverless form, whose events table's stream drives every deployment).

pub mod auth;
pub mod error;
pub mod events;
pub mod grants;
pub mod recorded;
pub mod routes;

use std::sync::Arc;

use async_trait::async_trait;
use overture_domain::DeploymentError;
use overture_events::DeploymentId;
use overture_kit::query::QueryDeployments;
use overture_kit::LogError;
use overture_submit::again::Redrive;
use overture_submit::{CheckToken, Submission, SubmitError};

pub use routes::{document, router};

/// Why the engine could not start or cancel a deployment.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Submitting failed (the blueprint is invalid, or a store failed).
    #[error(transparent)]
    Submit(#[from] SubmitError),
    /// The log could not record a cancel.
    #[error(transparent)]
    Log(#[from] LogError),
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

/// Why an event was not delivered to the trigger file.
#[derive(Debug, thiserror::Error)]
pub enum DeliverError {
    /// The body is not an event; nothing was evaluated. The message says what is wrong with it.
    #[error("{0}")]
    NotAnEvent(String),
    /// A store failed in a way that delivering the event again later may mend (the decisions
    /// taken before are recorded, and the ledger's claims make the next delivery safe).
    #[error("the event was not wholly delivered, for now: {0}")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// Evaluating the triggers or starting their deployments failed.
    #[error("the event was not delivered: {0}")]
    Failed(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl DeliverError {
    /// Whether delivering the same event again later may succeed.
    pub const fn is_retryable(&self) -> bool {
        matches!(self, DeliverError::Unavailable(_))
    }
}

/// A server's trigger file: evaluates events for a tenant and starts what they decide.
#[async_trait]
pub trait DeliverEvents: Send + Sync {
    /// Evaluates the event (its JSON text: a CloudEvent in the JSON format, or an EventBridge
    /// event) for `tenant`; answers every trigger's decision and the deployments started.
    async fn deliver(&self, event: &str, tenant: &str) -> Result<events::Delivered, DeliverError>;
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
    /// The server's trigger file, if it has one.
    pub triggers: Option<Arc<dyn DeliverEvents>>,
}
