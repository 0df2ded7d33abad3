//! The `ansible` step kind.

use crate::step::{Prepared, StepInput, Verdict};
use crate::SandboxResult;

/// The kind's name in blueprints.
pub const KIND: &str = "ansible";

/// Builds the sandbox command of an attempt.
pub fn prepare(_input: &StepInput) -> Result<Prepared, String> {
    Err("the `ansible` kind is not built yet".into())
}

/// Judges the command's exit.
pub fn conclude(_input: &StepInput, code: i32, _result: &SandboxResult) -> Verdict {
    Verdict::failed(format!("exited with code {code}"))
}
