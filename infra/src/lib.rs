//! Adapters behind Overture's ports, one module per technology.
//!
//! - [`sqlite`]: the embedded event log (append-only, optimistic concurrency, global order),
//!   the durable job queue, checkpoints and the read models, all in one SQLite file; and the
//!   function ports implemented on them.
//! - [`sandbox`]: runs one step attempt in a fresh bubblewrap sandbox.
//! - [`keystore`]: secret values (and what steps keep between attempts) sealed at rest in the
//!   data directory.
//! - [`logs`]: every attempt's output, as files in the data directory.
//! - [`payloads`]: large non-secret bytes (a blueprint's files) by content hash, as files in
//!   the data directory.
//! - [`query`]: the query port ([`overture_kit::query::QueryDeployments`]) on the read models,
//!   the log and the attempt logs of a data directory.
//! - [`openstack`]: the OpenStack client (Keystone tokens, Nova servers, Neutron security groups),
//!   and the engine's ports that open and close a bastion with it.
//! - [`session`]: the users' cloud tokens, in memory while their deployments run.
//! - [`clock`]: the system clock.

pub mod clock;
pub mod keystore;
pub mod logs;
pub mod openstack;
pub mod payloads;
pub mod query;
pub mod sandbox;
pub mod session;
pub mod sqlite;
