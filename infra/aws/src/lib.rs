//! Overture's adapters on AWS, behind the same ports as the embedded engine's.
//!
//! - [`config`]: the SDK's configuration, from the environment or for an endpoint (the local
//!   AWS emulator in development and tests).
//! - [`dynamodb`]: the event log on a DynamoDB table ([`dynamodb::DynamoDeployments`]), keeping
//!   the same contract as the SQLite log (`overture_kit::contract`).
//! - [`read_models`]: the read models on a deployments table and a tenants table
//!   ([`read_models::DynamoReadModels`]), written by the projector conditional on each view's
//!   revision, keeping the same contract as the SQLite read models
//!   (`overture_projector::contract`).

pub mod config;
pub mod dynamodb;
pub mod read_models;
