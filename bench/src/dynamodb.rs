//! The DynamoDB event log in the local AWS emulator: appends per second, the replay rate, and
//! the requests each costs.
//!
//! The rates are the emulator's (moto, in Python, one DynamoDB request at a time), not AWS's:
//! they say how long the local AWS form takes, and bound nothing in production. The request
//! counts are the adapter's own and hold on AWS too: they are what a deployment pays for.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use overture_aws::dynamodb::{create_events_table, DynamoDeployments};
use overture_aws::emulator::Emulator;
use overture_events::{DeploymentEvent, DeploymentId};
use overture_kit::SystemClock;
use overture_kit::{Cause, DeploymentLog, ReadStream};
use uuid::Uuid;

use crate::fixtures::{replay_blueprint, Recorder, TENANTS};
use crate::log_rate::CommitRate;

/// The table the benchmark writes.
const TABLE: &str = "bench-events";

/// What the DynamoDB log costs.
#[derive(Clone, Copy, Debug)]
pub struct DynamoFigures {
    /// Appends of one event each.
    pub appends_1: CommitRate,
    /// Appends of ten events each.
    pub appends_10: CommitRate,
    /// DynamoDB requests per append (a transaction, and nothing else).
    pub requests_per_append: f64,
    /// Events read back per second, stream by stream.
    pub replayed_per_sec: f64,
    /// DynamoDB requests per stream read back (queries of up to 1 MB each).
    pub requests_per_stream: f64,
}

/// Appends `single` appends of one event and `batches` of ten, writes `deployments` whole
/// deployments, then reads every stream back.
pub async fn dynamodb(
    single: usize,
    batches: usize,
    deployments: usize,
) -> anyhow::Result<DynamoFigures> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/aws-emulator.py");
    let emulator = Emulator::start(&script)?;
    let config = overture_aws::config::for_endpoint(emulator.endpoint(), "eu-west-1").await;
    let client = aws_sdk_dynamodb::Client::new(&config);
    create_events_table(&client, TABLE).await?;
    let log = DynamoDeployments::new(client, TABLE, Arc::new(SystemClock));

    let mut streams = Vec::new();
    emulator.reset_requests().await?;
    let (appends_1, stream) = appends(&log, 1, single).await?;
    streams.push(stream);
    let (appends_10, stream) = appends(&log, 10, batches).await?;
    streams.push(stream);
    let written = emulator.requests().await?;
    let requests_per_append =
        written.count("dynamodb", |_| true) as f64 / (single + batches + 2) as f64;

    // More streams of a whole deployment each, as replaying a log reads them.
    let parsed = replay_blueprint()?;
    for i in 0..deployments {
        let deployment = DeploymentId::from_uuid(Uuid::now_v7());
        let mut recorder = Recorder::new(deployment, TENANTS[i % TENANTS.len()]);
        let events = decoded(recorder.whole_deployment(&parsed)?)?;
        let cause = Cause::new("bench", deployment, deployment.uuid());
        log.append(deployment, TENANTS[i % TENANTS.len()], None, events, &cause)
            .await?;
        streams.push(deployment);
    }

    emulator.reset_requests().await?;
    let started = Instant::now();
    let mut events = 0;
    for stream in &streams {
        events += log.read_stream(*stream, 0).await?.len();
    }
    let elapsed = started.elapsed();
    let read = emulator.requests().await?;
    Ok(DynamoFigures {
        appends_1,
        appends_10,
        requests_per_append,
        replayed_per_sec: events as f64 / elapsed.as_secs_f64(),
        requests_per_stream: read.count("dynamodb", |_| true) as f64 / streams.len() as f64,
    })
}

/// Times `appends` appends of `per_append` `StepSucceeded` events on a fresh stream, each
/// expecting the revision the previous left, as the functions append.
async fn appends(
    log: &DynamoDeployments,
    per_append: usize,
    appends: usize,
) -> anyhow::Result<(CommitRate, DeploymentId)> {
    let deployment = DeploymentId::from_uuid(Uuid::now_v7());
    let mut recorder = Recorder::new(deployment, TENANTS[0]);
    let opening = decoded(recorder.requested(&replay_blueprint()?)?)?;
    let cause = Cause::new("bench", deployment, deployment.uuid());
    let mut revision = opening.len() as u64 - 1;
    log.append(deployment, TENANTS[0], None, opening, &cause)
        .await?;
    let mut step = 0;
    let mut elapsed = Duration::ZERO;
    for _ in 0..appends {
        let batch = (0..per_append)
            .map(|_| {
                step += 1;
                recorder.step_succeeded(&format!("step-{step:05}"))
            })
            .collect();
        let batch = decoded(batch)?;
        let started = Instant::now();
        log.append(deployment, TENANTS[0], Some(revision), batch, &cause)
            .await
            .with_context(|| format!("append after revision {revision}"))?;
        elapsed += started.elapsed();
        revision += per_append as u64;
    }
    let rate = CommitRate {
        per_commit: per_append,
        commits: appends,
        elapsed,
    };
    Ok((rate, deployment))
}

/// The fixtures' recorded events as the events a function appends.
fn decoded(
    recorded: Vec<overture_infra::sqlite::NewEvent>,
) -> anyhow::Result<Vec<DeploymentEvent>> {
    recorded
        .into_iter()
        .map(|event| {
            DeploymentEvent::from_parts(&event.event_type, event.data)
                .with_context(|| format!("a fixture's {} event", event.event_type))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cost estimate stands on these counts: an append is one transaction, and a stream
    /// under 1 MB reads back in one query.
    #[tokio::test]
    async fn an_append_is_one_request_and_a_small_stream_one_query() {
        let figures = dynamodb(3, 2, 2).await.expect("the benchmark runs");
        assert_eq!(figures.requests_per_append, 1.0);
        assert_eq!(figures.requests_per_stream, 1.0);
        assert!(figures.replayed_per_sec > 0.0);
    }
}
