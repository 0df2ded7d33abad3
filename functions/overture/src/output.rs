//! What commands print on stdout: a deployment's status, its view, the outcome of a check;
//! and the write itself, which ends the program quietly when its reader has gone away.

use overture_domain::projection::DeploymentView;
use overture_events::DeploymentId;
use overture_kit::query::QueryDeployments;

use crate::input::parse_id;
use crate::{render, Failure};

/// No such deployment, said where it was looked for (see [`crate::backend::Backend::missing`]).
pub type Missing<'a> = &'a (dyn Fn(DeploymentId) -> Failure + Sync);

/// Writes to stdout. A reader that has gone away (`overture events ID | head -1`) ends the
/// program as it ends every Unix tool, by SIGPIPE, quietly; Rust ignores SIGPIPE, so `print!`
/// would panic instead.
pub fn write_out(text: std::fmt::Arguments<'_>) {
    use std::io::Write;
    if let Err(error) = std::io::stdout().lock().write_fmt(text) {
        end_on_write_error(&error);
    }
}

/// Ends the program after stdout could not be written: by SIGPIPE when its reader went away.
pub fn end_on_write_error(error: &std::io::Error) -> ! {
    if error.kind() == std::io::ErrorKind::BrokenPipe {
        // SAFETY: restores one signal's default action and raises it; no memory is involved.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
            libc::raise(libc::SIGPIPE);
        }
    }
    eprintln!("error: cannot write to standard output: {error}");
    std::process::exit(3)
}

/// How `replay --check` ends: 0 when the read models match the log, 1 naming what differs.
pub fn checked(differences: &[String]) -> Result<(), Failure> {
    if differences.is_empty() {
        outln!("read models match the log");
        Ok(())
    } else {
        Err(Failure::Unsuccessful(format!(
            "read models differ from the log for: {}",
            differences.join(", ")
        )))
    }
}

/// Prints a deployment's status (`--json`: the status object) and returns it.
pub async fn print_status(
    queries: &dyn QueryDeployments,
    missing: Missing<'_>,
    id: &str,
    json: bool,
) -> Result<DeploymentView, Failure> {
    let view = find_view(queries, missing, id).await?;
    print_view(&view, json);
    Ok(view)
}

/// Prints a deployment's view (`--json`: the status object).
pub fn print_view(view: &DeploymentView, json: bool) {
    if json {
        outln!("{}", render::status_json(view));
    } else {
        out!("{}", render::status(view));
    }
}

pub async fn find_view(
    queries: &dyn QueryDeployments,
    missing: Missing<'_>,
    id: &str,
) -> Result<DeploymentView, Failure> {
    let id = parse_id(id)?;
    queries.deployment(id).await?.ok_or_else(|| missing(id))
}
