//! The runner's half of each step kind: what its sandbox runs ([`prepare`]) and what its exit
//! means ([`conclude`]). The pure half (its name, settings and their checks) is the file of the
//! same name in `overture_domain::kind`; between them, a kind is two files.
//!
//! `noop` runs nothing, so it has no file here: [`crate::run_attempt`] records its start and
//! success together.

pub mod ansible;
pub mod http;
pub mod script;
pub mod servers;
pub mod terraform;
pub mod wait_ssh;

use overture_domain::kind::Kind;

use crate::step::{Prepared, StepInput, Verdict};
use crate::SandboxResult;

/// The file under `/work` a kind keeps from one run to the next, if it keeps one.
pub fn kept_file(kind: Kind) -> Option<&'static str> {
    match kind {
        Kind::Terraform => Some(terraform::STATE_FILE),
        _ => None,
    }
}

/// The sandbox command of a step, by its kind.
pub fn prepare(input: &StepInput) -> Result<Prepared, String> {
    match Kind::of(input.spec) {
        Some(Kind::Script) => script::prepare(input),
        Some(Kind::Terraform) => terraform::prepare(input),
        Some(Kind::Ansible) => ansible::prepare(input),
        Some(Kind::Http) => http::prepare(input),
        Some(Kind::WaitSsh) => wait_ssh::prepare(input),
        Some(Kind::Servers) => servers::prepare(input),
        Some(Kind::Noop) | None => Err(format!(
            "this engine cannot run steps of kind `{}`",
            input.spec.kind
        )),
    }
}

/// What the step's kind makes of its command's exit code.
pub fn conclude(input: &StepInput, code: i32, result: &SandboxResult) -> Verdict {
    match Kind::of(input.spec) {
        Some(Kind::Terraform) => terraform::conclude(input, code, result),
        Some(Kind::Ansible) => ansible::conclude(input, code, result),
        Some(Kind::Http) => http::conclude(input, code, result),
        Some(Kind::WaitSsh) => wait_ssh::conclude(input, code, result),
        Some(Kind::Servers) => servers::conclude(input, code, result),
        // `prepare` refused every other kind, so only a script gets this far.
        _ => script::conclude(code, result),
    }
}
