//! Overture's adapters on AWS, behind the same ports as the embedded engine's.
//!
//! - [`config`]: the SDK's configuration, from the environment or for an endpoint (the local
//!   AWS emulator in development and tests).
//! - [`dynamodb`]: the event log on a DynamoDB table ([`dynamodb::DynamoDeployments`]), keeping
//!   the same contract as the SQLite log (`overture_kit::contract`).
//! - [`custody`]: the users' cloud tokens while their deployments run, encrypted under KMS and
//!   bound to tenant and deployment ([`custody::KmsTokenCustody`]).
//! - [`seals`]: a deployment's sealed secrets, KMS data keys combined with the user's token
//!   ([`seals::KmsSeals`]).
//! - [`fargate`]: each step attempt as an ECS Fargate task of its own ([`fargate::FargateSteps`],
//!   the runner's sandbox port on AWS), its job sealed in S3, never in the task's overrides.
//! - [`step_task`]: the step task's entrypoint, `overture step-run`: opens the attempt's input,
//!   runs its command as an unprivileged user with no AWS credentials, seals what it left.
//! - [`kept`]: what steps keep between attempts (a Terraform state), sealed as the secrets are,
//!   as S3 objects ([`kept::KeptStates`]; [`seals::KmsSeals`] keeps and opens them).
//! - [`logs`]: every attempt's output as S3 objects ([`logs::S3AttemptLogs`]), written by the
//!   runner and read by `overture logs`.
//! - [`s3`]: the payload store on an S3 bucket ([`s3::S3Payloads`]): a blueprint's files by
//!   content hash, keeping the same contract as the data directory's
//!   (`overture_kit::payload_contract`).
//! - [`sqs`]: step jobs and timers on an SQS standard queue ([`sqs::SqsQueue`]), keeping the
//!   same queue contract as the SQLite queue (`overture_kit::queue`).
//! - [`read_models`]: the read models on a deployments table and a tenants table
//!   ([`read_models::DynamoReadModels`]), written by the projector conditional on each view's
//!   revision, keeping the same contract as the SQLite read models
//!   (`overture_projector::contract`).
//! - [`query`]: the query port ([`overture_kit::query::QueryDeployments`]) on the read-model
//!   and events tables ([`query::DynamoQueries`]); attempts' output not yet.
//! - [`leases`]: the bastion lease table on DynamoDB ([`leases::DynamoLeases`]), keeping the
//!   same contract as the SQLite table (`overture_kit::leases_contract`).
//! - [`triggers`]: the triggers function's adapters: its ledger on DynamoDB
//!   ([`triggers::DynamoTriggerLedger`], keeping the same contract as the SQLite ledger), the
//!   published trigger file on S3, events published on the trigger events queue.
//! - [`stack`]: the CloudFormation stack (`infra/aws/template.yaml`) made in the local emulator
//!   ([`stack::deploy_local`]), as the tests and the local set-up use it.
//! - [`function`]: what every function binary does as it starts (its log, its settings).
//! - [`signing`]: SigV4 for the submit function's URL (`AWS_IAM` auth): callers sign, the local
//!   stand-in of Lambda's door checks.
//! - [`recording`]: the adapters deployments are recorded with ([`recording::Recording`]),
//!   shared by the submit and api functions and `overture --backend aws`.
//! - `emulator` (feature `emulator`): the local AWS emulator as a child process, and the
//!   requests it counted.
//!
//! An adapter that implements a function's port is built only with that function's feature
//! (`submit`, `api`, `runner`, `orchestrator`, `projector`, `triggers`; the read models, whose
//! port is the projector's, with `read-models`), and each `functions/*/lambda` enables its own:
//! a Lambda links only the function it runs (docs/decisions/0006).

pub mod config;
pub mod custody;
pub mod dynamodb;
#[cfg(feature = "emulator")]
pub mod emulator;
#[cfg(feature = "runner")]
pub mod fargate;
pub mod function;
pub mod kept;
pub mod leases;
pub mod logs;
#[cfg(feature = "read-models")]
pub mod query;
#[cfg(feature = "read-models")]
pub mod read_models;
#[cfg(feature = "submit")]
pub mod recording;
pub mod s3;
pub mod seals;
pub mod signing;
pub mod sqs;
pub mod stack;
#[cfg(feature = "runner")]
pub mod step_task;
#[cfg(feature = "triggers")]
pub mod triggers;
