//! The projector as a Lambda, triggered by the events table's stream. Only wiring: the clients
//! are built once from the environment (the stack sets the variables), and each batch goes to
//! `overture_projector::on_stream_records`, which wakes the deployments that need a service the
//! batch changed on the orchestrator's timers queue.

use std::sync::Arc;

use aws_lambda_events::event::dynamodb::Event;
use lambda_runtime::{service_fn, LambdaEvent};
use overture_aws::dynamodb::DynamoDeployments;
use overture_aws::function::{diagnostic, init_tracing, setting};
use overture_aws::read_models::DynamoReadModels;
use overture_aws::sqs::SqsQueue;
use overture_kit::SystemClock;
use overture_projector::on_stream_records;
use overture_projector::stream::Wakes;

/// The adapters, built once per execution environment.
struct Adapters {
    log: DynamoDeployments,
    views: DynamoReadModels,
    timers: SqsQueue,
}

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    init_tracing();
    let config = overture_aws::config::from_env().await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&config);
    let sqs = aws_sdk_sqs::Client::new(&config);
    let clock = Arc::new(SystemClock);
    let adapters = Arc::new(Adapters {
        // The projector only reads the log; the clock would stamp appends it never makes.
        log: DynamoDeployments::new(
            dynamodb.clone(),
            setting("OVERTURE_EVENTS_TABLE")?,
            clock.clone(),
        ),
        views: DynamoReadModels::new(
            dynamodb,
            setting("OVERTURE_DEPLOYMENTS_TABLE")?,
            setting("OVERTURE_TENANTS_TABLE")?,
        ),
        timers: SqsQueue::new(sqs, setting("OVERTURE_TIMERS_QUEUE_URL")?, clock),
    });
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Event>| {
        let adapters = Arc::clone(&adapters);
        async move {
            let wakes = Wakes {
                registry: &adapters.views,
                timers: &adapters.timers,
            };
            on_stream_records(&event.payload, &adapters.log, &adapters.views, &wakes)
                .await
                .map_err(diagnostic)
        }
    }))
    .await
}
