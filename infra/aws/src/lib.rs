//! Overture's adapters on AWS, behind the same ports as the embedded engine's.
//!
//! - [`config`]: the SDK's configuration, from the environment or for an endpoint (the local
//!   AWS emulator in development and tests).
//! - [`dynamodb`]: the event log on a DynamoDB table ([`dynamodb::DynamoDeployments`]), keeping
//!   the same contract as the SQLite log (`overture_kit::contract`).

pub mod config;
pub mod dynamodb;
