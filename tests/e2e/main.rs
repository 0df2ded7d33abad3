//! End-to-end tests of the `overture` program: the real binary, a real SQLite file, real
//! bubblewrap sandboxes. Each test has its own data directory.
//!
//! They must pass on a loaded two-core machine: a test waits on a condition with a deadline of
//! a minute or two, never for a fixed time; a step that must still run when something happens is
//! held by an [`http::Gate`] the test opens once it has seen that happen.
//!
//! - [`support`]: running the binary, reading its JSON, checking an event history's causality,
//!   and checking every deployment stream a test leaves behind for a deterministic fold.
//! - [`deploy`]: deployments that succeed, fail, and fail with a grace period.
//! - [`concurrent`]: a hundred `deploy` processes on one data directory, sixteen at a time,
//!   each printing and exiting by its own deployment's recorded outcome; no rebuild of the read
//!   models under a running deploy.
//! - [`events`]: `overture events`, the timeline of a retried failure, and its filters.
//! - [`fingerprints`]: each attempt's fingerprint of its inputs, the same for the same inputs.
//! - [`history`]: `status --at` and `graph --at`, a deployment as it stood at each revision and
//!   instant.
//! - [`logs`]: every attempt's output, masked, shown and followed by `overture logs`.
//! - [`resume`]: killing the engine mid-step and carrying on.
//! - [`cancel`]: `overture cancel` from another process, Ctrl-C, and a cancel with no engine.
//! - [`secrets`]: a secret appears nowhere it should not.
//! - [`masking`]: a secret cut anywhere in one long line is still masked; one too short to mask
//!   is refused.
//! - [`data_dir`]: the data directory is 0700 and every file in it 0600.
//! - [`serve`]: `overture serve`, the HTTP API per tenant, against a local cloud's Keystone.
//! - [`tenant_ids`]: tenants are project ids: two `acme` projects in two Keystone domains, a
//!   project deleted and made again, and a record made when the tenant was the name.
//! - [`client`]: `overture --server URL`, the commands through that API, printing what they print
//!   on the server's data directory, per tenant; and a redrive over HTTP.
//! - [`api`]: a server process and callers of its API, for both.
//! - [`schemathesis`]: Schemathesis' generated requests against the server with two tenants'
//!   tokens, every answer checked against `/openapi.json`.
//! - [`doors`]: the API under hostile callers: thousands of idle and slow connections, stalled
//!   heads and bodies, connection caps, and chain ends forged under the engine's source.
//! - [`pipe`]: a reader that goes away ends a reading command quietly.
//! - [`redrive`]: `redrive` and `redeploy`, a recorded deployment run again.
//! - [`portable`]: `export` and `import`, the log moved between data directories as JSON lines.
//! - [`input`]: bad input is refused with exit code 2 and nothing recorded.
//! - [`triggers`]: `trigger send` and `triggers log`: matching, exactly once, chains and the
//!   depth limit.
//! - [`cloudevents`]: the official CloudEvents SDK for Python sends events to `overture serve`
//!   in binary, structured and batched mode; each event id deploys once across modes.
//! - [`sandbox`]: what a step can and cannot see, and the sandbox's limits.
//! - [`limits`]: a fork bomb, a memory hog, a disk filler and an output flood, each held to its
//!   step's limits while another deployment runs on.
//! - [`quoting`]: hostile values in every quoting context of a script reach it exactly, and
//!   never run.
//! - [`ansible`]: the `ansible` kind against a real sshd on loopback, and a closed port.
//! - [`http`]: `http` steps against a real HTTP server on loopback: retries, statuses, outputs,
//!   secrets; the [`http::Gate`] other tests hold a step with.
//! - [`egress`]: an API tenant's `http` steps aimed at the engine host's loopback and at the
//!   metadata address, refused at once unless the operator allows declared loopback ports.
//! - [`terraform`]: `terraform` steps with the real terraform (retries on the kept state, outputs,
//!   secrets) and `overture destroy`.
//! - [`wait_ssh`]: `wait-ssh` steps against a real sshd, and a port that never answers.
//! - [`servers`]: real servers on loopback for steps to talk to (sshd).
//! - [`services`]: `overture services`, the tenants' service registry, from an imported log.
//! - [`aws`]: the AWS form on this machine (`scripts/local-aws.sh`): hello-world and a retried
//!   failure through the functions, with the histories they have embedded, and no secret stored.
//! - [`leases`]: deployments of one tenant sharing one bastion, each holding a lease on the
//!   engine's rule there; a rule deleted under an open lease.
//! - [`cluster`]: services across hosts on a local cloud: the haproxy cluster with run-time
//!   waits, registrations after checks, a scale-out that re-runs only the watched step, a
//!   service that never appears (`service-timeout`) and one whose check fails.
//! - [`cloud`]: the whole workflow through a bastion, against a local cloud of each test's own
//!   ([`local_cloud`]): success, every failure path, a crash, isolation between tenants, tokens.

mod ansible;
mod api;
mod aws;
mod cancel;
mod client;
mod cloud;
mod cloudevents;
mod cluster;
mod concurrent;
mod data_dir;
mod deploy;
mod doors;
mod egress;
mod engine;
mod events;
mod fingerprints;
mod history;
mod http;
mod input;
mod leases;
mod limits;
mod local_cloud;
mod logs;
mod masking;
mod names;
mod pipe;
mod portable;
mod privilege;
mod quoting;
mod redrive;
mod resume;
mod sandbox;
mod schemathesis;
mod secrets;
mod serve;
mod servers;
mod services;
mod support;
mod tenant_ids;
mod terraform;
mod tracing;
mod triggers;
mod wait_ssh;
