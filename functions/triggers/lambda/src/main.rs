//! The triggers function as a Lambda, triggered by the trigger events queue. Only wiring: the
//! adapters are built once from the environment, and each batch goes to
//! `overture_triggers::queue::on_event_messages`.

use std::sync::Arc;

use aws_lambda_events::event::sqs::SqsEvent;
use lambda_runtime::{service_fn, LambdaEvent};
use overture_triggers::queue::on_event_messages;
use overture_triggers_lambda::{diagnostic, init_tracing, Adapters};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    init_tracing();
    let adapters = Arc::new(Adapters::from_env().await?);
    lambda_runtime::run(service_fn(move |event: LambdaEvent<SqsEvent>| {
        let adapters = Arc::clone(&adapters);
        async move {
            on_event_messages(&event.payload, &adapters.ports())
                .await
                .map_err(diagnostic)
        }
    }))
    .await
}
