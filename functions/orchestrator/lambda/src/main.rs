//! The orchestrator as a Lambda, triggered by the events table's stream. Only wiring: the
//! adapters are built once from the environment (the stack sets the variables), and each batch
//! goes to `overture_orchestrator::on_stream_records`.

use std::sync::Arc;

use aws_lambda_events::event::dynamodb::Event;
use lambda_runtime::{service_fn, LambdaEvent};
use overture_orchestrator::on_stream_records;
use overture_orchestrator_lambda::{diagnostic, init_tracing, Adapters};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    init_tracing();
    let adapters = Arc::new(Adapters::from_env().await?);
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
