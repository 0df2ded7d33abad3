//! Overture's adapters on AWS, behind the same ports as the embedded engine's.
//!
//! - [`config`]: the SDK's configuration, from the environment or for an endpoint (the local
//!   AWS emulator in development and tests).
//! - [`dynamodb`]: the event log on a DynamoDB table ([`dynamodb::DynamoDeployments`]), keeping
//!   the same contract as the SQLite log (`overture_kit::contract`).
//! - [`sqs`]: step jobs and timers on an SQS standard queue ([`sqs::SqsQueue`]), keeping the
//!   same queue contract as the SQLite queue (`overture_kit::queue`).

pub mod config;
pub mod dynamodb;
pub mod sqs;
