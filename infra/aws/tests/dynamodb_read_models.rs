//! The DynamoDB read models against the local AWS emulator: the read-model store contract that
//! the SQLite read models keep too, and reads that follow every page.

mod support;

use aws_sdk_dynamodb::Client;
use overture_aws::read_models::{create_read_model_tables, DynamoReadModels};

const DEPLOYMENTS: &str = "overture-deployments";
const TENANTS: &str = "overture-tenants";

/// A client of its own, as a separate Lambda would have.
async fn client() -> DynamoReadModels {
    let config = overture_aws::config::for_endpoint(support::emulator(), "eu-west-1").await;
    let client = Client::new(&config);
    create_read_model_tables(&client, DEPLOYMENTS, TENANTS)
        .await
        .expect("the read-model tables");
    DynamoReadModels::new(client, DEPLOYMENTS, TENANTS)
}

async fn clients() -> (DynamoReadModels, DynamoReadModels) {
    (client().await, client().await)
}

overture_projector::read_model_contract_tests!(clients());
