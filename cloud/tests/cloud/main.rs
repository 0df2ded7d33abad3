//! The cloud, for real: each test starts its own cloud (its own instance id and /16) in this
//! process on a temporary directory, drives it through its HTTP API, reaches its servers over
//! TCP and SSH from the host, and leaves nothing behind, also when it fails.
//!
//! - `support`: the test cloud and its guard, API calls, SSH keys, reachability probes.
//! - `keystone`: tokens, domains, deleting projects.
//! - `isolation`: one project cannot see or touch another's resources.
//! - `servers`: boot, cloud-init, SSH, a session's background jobs, delete.
//! - `security_groups`: rules opening and closing ports, group rules between servers.
//! - `faults`: backend-unreachable, never-boot, unreachable.
//! - `console`: the console output with each server's host keys, and the rekey fault.
//! - `clean_up`: shutdown, and clean-up after a cloud killed with SIGKILL.

mod clean_up;
mod console;
mod faults;
mod isolation;
mod keystone;
mod security_groups;
mod servers;
mod support;
