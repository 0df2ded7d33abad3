//! The HTTP API as a Lambda behind a function URL: the same application as `overture serve`
//! (`overture_api::router`), reading the serverless form's read models and events table.
//!
//! Its writes only record: starting, redriving and cancelling a deployment is recording it on
//! the events table (through the same adapters as the submit function), whose stream drives it
//! ([`overture_api::recorded::Recorded`]). `POST /v1/events` puts the event on the trigger events
//! queue for the caller's tenant (`OVERTURE_TRIGGER_EVENTS_QUEUE_URL`), where the triggers
//! function dispatches it against the published trigger file. The answers are streamed (the
//! function URL's `InvokeMode` is `RESPONSE_STREAM`), so a Server-Sent Events stream is live,
//! within the function's timeout.
//!
//! `OVERTURE_AUTH_URL`, the cloud's identity service (Keystone v3) that checks the callers'
//! tokens, is required: nothing else could vouch for a caller.

use std::sync::Arc;
use std::time::Duration;

use overture_api::recorded::Recorded;
use overture_api::Api;
use overture_aws::function::{init_tracing, setting};
use overture_aws::logs::S3AttemptLogs;
use overture_aws::query::DynamoQueries;
use overture_aws::read_models::DynamoReadModels;
use overture_aws::recording::Recording;
use overture_aws::triggers::SqsEvents;
use overture_openstack::Keystone;

/// How long a Server-Sent Events stream waits before reading the log again: other functions
/// append, and nothing here is told.
const LOOK_EVERY: Duration = Duration::from_secs(1);

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    init_tracing();
    let config = overture_aws::config::from_env().await;
    let auth_url = setting("OVERTURE_AUTH_URL")?;
    if auth_url.is_empty() {
        return Err(
            "OVERTURE_AUTH_URL is empty: the API checks every caller's token with it".into(),
        );
    }
    let Recording {
        log,
        seals,
        payloads,
    } = Recording::from_settings(&config, setting)?;
    let views = DynamoReadModels::new(
        aws_sdk_dynamodb::Client::new(&config),
        setting("OVERTURE_DEPLOYMENTS_TABLE")?,
        setting("OVERTURE_TENANTS_TABLE")?,
    );
    let outputs = S3AttemptLogs::new(
        overture_aws::s3::client(&config),
        setting("OVERTURE_PAYLOADS_BUCKET")?,
    );
    let api = Api {
        queries: Arc::new(DynamoQueries::new(views, log.clone(), Some(outputs))),
        identity: Arc::new(Keystone::new(auth_url)),
        deployments: Arc::new(Recorded::new(log, seals, payloads, LOOK_EVERY)),
        triggers: Some(Arc::new(SqsEvents::new(
            aws_sdk_sqs::Client::new(&config),
            setting("OVERTURE_TRIGGER_EVENTS_QUEUE_URL")?,
        ))),
    };
    // Streamed, so a Server-Sent Events stream reaches the caller as events are recorded (the
    // function URL's InvokeMode is RESPONSE_STREAM); other answers are sent whole as before.
    lambda_http::run_with_streaming_response(overture_api::router(api)).await
}
