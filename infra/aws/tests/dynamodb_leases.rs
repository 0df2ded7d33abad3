//! The bastion lease contract ([`overture_kit::leases_contract`]) on the DynamoDB table, against
//! the local AWS emulator: the same suite the SQLite table passes.

mod support;

use overture_aws::leases::{create_leases_table, DynamoLeases};

#[tokio::test]
async fn the_dynamodb_table_keeps_the_contract() {
    let config = overture_aws::config::for_endpoint(support::emulator(), "eu-west-1").await;
    let client = aws_sdk_dynamodb::Client::new(&config);
    // A table of its own per run: the contract starts from an empty table.
    let table = format!("leases-{}", uuid::Uuid::new_v4());
    create_leases_table(&client, &table)
        .await
        .expect("the table");
    overture_kit::leases_contract::leases_keep_their_contract(&DynamoLeases::new(client, table))
        .await;
}
