//! Dead-lettered jobs as a Lambda, triggered by the jobs' dead-letter queue. Only wiring: the
//! adapters are built once from the environment, and each batch goes to
//! `overture_orchestrator::on_dead_letters`.

use std::sync::Arc;

use aws_lambda_events::event::sqs::SqsEvent;
use lambda_runtime::{service_fn, LambdaEvent};
use overture_orchestrator::on_dead_letters;
use overture_orchestrator_lambda::{diagnostic, init_tracing, Adapters};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    init_tracing();
    let adapters = Arc::new(Adapters::from_env().await?);
    lambda_runtime::run(service_fn(move |event: LambdaEvent<SqsEvent>| {
        let adapters = Arc::clone(&adapters);
        async move {
            on_dead_letters(&event.payload, &adapters.ports())
                .await
                .map_err(diagnostic)
        }
    }))
    .await
}
