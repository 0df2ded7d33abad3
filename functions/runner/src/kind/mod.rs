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

use overture_domain::kind::{Kind, StepKind};

use crate::step::{Prepared, StepInput, Verdict};
use crate::SandboxResult;

/// The file under `/work` a kind keeps from one run to the next, if it keeps one.
pub fn kept_file(kind: Kind) -> Option<&'static str> {
    match kind {
        Kind::Terraform => Some(terraform::STATE_FILE),
        _ => None,
    }
}

/// The sandbox command of a step, by its kind, from its settings read ([`StepInput::kind`]).
pub fn prepare(input: &StepInput) -> Result<Prepared, String> {
    match input.kind()? {
        StepKind::Script(settings) => script::prepare(input, &settings),
        StepKind::Terraform(settings) => terraform::prepare(input, &settings),
        StepKind::Ansible(settings) => ansible::prepare(input, &settings),
        StepKind::Http(settings) => http::prepare(input, &settings),
        StepKind::WaitSsh(settings) => wait_ssh::prepare(input, &settings),
        StepKind::Servers(settings) => servers::prepare(input, &settings),
        StepKind::Noop => Err(format!(
            "this engine cannot run steps of kind `{}`",
            input.spec.kind
        )),
    }
}

/// What the step's kind makes of its command's exit code.
pub fn conclude(input: &StepInput, code: i32, result: &SandboxResult) -> Verdict {
    match input.kind() {
        Ok(StepKind::Terraform(_)) => terraform::conclude(code, result),
        Ok(StepKind::Ansible(_)) => ansible::conclude(input, code, result),
        Ok(StepKind::Http(settings)) => http::conclude(input, &settings, code, result),
        Ok(StepKind::WaitSsh(settings)) => wait_ssh::conclude(input, &settings, code, result),
        Ok(StepKind::Servers(settings)) => servers::conclude(&settings, code, result),
        // `prepare` refused every other kind, and settings it could not read, so only a script
        // gets this far.
        Ok(StepKind::Script(_) | StepKind::Noop) => script::conclude(code, result),
        Err(problem) => Verdict::failed(problem),
    }
}
