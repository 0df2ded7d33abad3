//! Overture's adapters on AWS, behind the same ports as the embedded engine's.
//!
//! - [`config`]: the SDK's configuration, from the environment or for an endpoint (the local
//!   AWS emulator in development and tests).
//! - [`dynamodb`]: the event log on a DynamoDB table ([`dynamodb::DynamoDeployments`]), keeping
//!   the same contract as the SQLite log (`overture_kit::contract`).
//! - [`s3`]: the payload store on an S3 bucket ([`s3::S3Payloads`]): a blueprint's files by
//!   content hash, keeping the same contract as the data directory's
//!   (`overture_kit::payload_contract`).

pub mod config;
pub mod dynamodb;
pub mod s3;
