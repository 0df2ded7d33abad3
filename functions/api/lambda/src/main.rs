//! The HTTP API as a Lambda behind a function URL: the same application as `overture serve`
//! (`overture_api::router`), reading the serverless form's read models and events table.
//!
//! Only the reads are served for now: starting, cancelling and redriving answer 501
//! `not_on_this_backend` (the command line's `--backend aws` does them), and there is no trigger
//! file. A function URL buffers the answer, so a Server-Sent Events stream comes only once the
//! deployment has ended within the function's timeout.
//!
//! `OVERTURE_AUTH_URL`, the cloud's identity service (Keystone v3) that checks the callers'
//! tokens, is required: nothing else could vouch for a caller.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use overture_api::auth::Caller;
use overture_api::{Api, RunDeployments, RunError};
use overture_aws::dynamodb::DynamoDeployments;
use overture_aws::function::{init_tracing, setting};
use overture_aws::logs::S3AttemptLogs;
use overture_aws::query::DynamoQueries;
use overture_aws::read_models::DynamoReadModels;
use overture_domain::DeploymentError;
use overture_events::DeploymentId;
use overture_kit::SystemClock;
use overture_openstack::Keystone;
use overture_submit::again::Redrive;
use overture_submit::Submission;

/// How long a Server-Sent Events stream waits before reading the log again.
const LOOK_EVERY: Duration = Duration::from_secs(1);

/// The engine behind the API on AWS, for now: reads only.
struct ReadOnly;

#[async_trait]
impl RunDeployments for ReadOnly {
    async fn start(&self, _: Submission) -> Result<DeploymentId, RunError> {
        Err(RunError::NotOnThisBackend("POST /v1/deployments"))
    }

    async fn redrive(&self, _: Redrive) -> Result<(), RunError> {
        Err(RunError::NotOnThisBackend(
            "POST /v1/deployments/{id}/redrive",
        ))
    }

    async fn cancel(
        &self,
        _: DeploymentId,
        _: &str,
        _: &str,
    ) -> Result<Result<(), DeploymentError>, RunError> {
        Err(RunError::NotOnThisBackend(
            "POST /v1/deployments/{id}/cancel",
        ))
    }

    async fn changed(&self) {
        // Another function appends; nothing here is told, so the stream looks again later.
        tokio::time::sleep(LOOK_EVERY).await;
    }

    async fn caller_seen(&self, _: &Caller) {}
}

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    init_tracing();
    let config = overture_aws::config::from_env().await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&config);
    let log = DynamoDeployments::new(
        dynamodb.clone(),
        setting("OVERTURE_EVENTS_TABLE")?,
        // The API only reads the log; the clock would stamp appends it never makes.
        Arc::new(SystemClock),
    );
    let views = DynamoReadModels::new(
        dynamodb,
        setting("OVERTURE_DEPLOYMENTS_TABLE")?,
        setting("OVERTURE_TENANTS_TABLE")?,
    );
    let outputs = S3AttemptLogs::new(
        overture_aws::s3::client(&config),
        setting("OVERTURE_PAYLOADS_BUCKET")?,
    );
    let auth_url = setting("OVERTURE_AUTH_URL")?;
    if auth_url.is_empty() {
        return Err(
            "OVERTURE_AUTH_URL is empty: the API checks every caller's token with it".into(),
        );
    }
    let api = Api {
        queries: Arc::new(DynamoQueries::new(views, log, Some(outputs))),
        identity: Arc::new(Keystone::new(auth_url)),
        deployments: Arc::new(ReadOnly),
        triggers: None,
    };
    lambda_http::run(overture_api::router(api)).await
}
