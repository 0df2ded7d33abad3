//! End-to-end tests of the `overture` program: the real binary, a real SQLite file, real
//! bubblewrap sandboxes. Each test has its own data directory.
//!
//! - [`support`]: running the binary, reading its JSON, checking an event history's causality.
//! - [`deploy`]: deployments that succeed, fail, and fail with a grace period.
//! - [`logs`]: every attempt's output, masked, shown and followed by `overture logs`.
//! - [`resume`]: killing the engine mid-step and carrying on.
//! - [`secrets`]: a secret appears nowhere it should not.
//! - [`input`]: bad input is refused with exit code 2 and nothing recorded.
//! - [`sandbox`]: what a step can and cannot see.
//! - [`servers`]: real servers on loopback for steps to talk to (sshd).

mod deploy;
mod input;
mod logs;
mod resume;
mod sandbox;
mod secrets;
mod servers;
mod support;
