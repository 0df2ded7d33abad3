//! The embedded engine's adapters behind Overture's ports, one module per technology.
//!
//! - [`sqlite`]: the embedded event log (append-only, optimistic concurrency, global order),
//!   the durable job queue, checkpoints and the read models, all in one SQLite file; and the
//!   function ports implemented on them.
//! - [`data_dir`]: the data directory's modes: 0700, every file in it 0600.
//! - [`keystore`]: secret values (and what steps keep between attempts) sealed at rest in the
//!   data directory.
//! - [`logs`]: every attempt's output, as files in the data directory.
//! - [`payloads`]: large non-secret bytes (a blueprint's files) by content hash, as files in
//!   the data directory.
//! - [`query`]: the query port ([`overture_kit::query::QueryDeployments`]) on the read models,
//!   the log and the attempt logs of a data directory.
//! - [`session`]: the users' cloud tokens, in memory while their deployments run.
//!
//! The adapters a function deployed on its own also needs have crates of their own, so that a
//! Lambda links neither SQLite nor this crate: `overture-sandbox` (bubblewrap),
//! `overture-openstack` (the cloud client and the bastion ports), `overture-aws`; the system
//! clock is `overture_kit::SystemClock`.

pub mod data_dir;
pub mod keystore;
pub mod logs;
pub mod payloads;
pub mod query;
pub mod session;
pub mod sqlite;
