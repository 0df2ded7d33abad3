//! Deployment ends as a Lambda, triggered by the events table's stream: each deployment that
//! ended is published on the trigger events queue. Only wiring: the adapters are built once
//! from the environment, and each batch goes to `overture_triggers::ends::on_stream_records`.

use std::sync::Arc;

use aws_lambda_events::event::dynamodb::Event;
use lambda_runtime::{service_fn, LambdaEvent};
use overture_triggers::ends::on_stream_records;
use overture_triggers_lambda::{diagnostic, init_tracing, EndAdapters};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    init_tracing();
    let adapters = Arc::new(EndAdapters::from_env().await?);
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Event>| {
        let adapters = Arc::clone(&adapters);
        async move {
            on_stream_records(&event.payload, &adapters.ports())
                .await
                .map_err(diagnostic)
        }
    }))
    .await
}
