//! `overture graph FILE|ID`: a blueprint's steps drawn, or a deployment's with their states.

use std::path::Path;

use clap::ValueEnum;
use overture_domain::graph::{self, GraphFormat};
use overture_domain::history::Moment;

use crate::backend::Backend;
use crate::input::{read_blueprint, shown};
use crate::{history, Failure};

/// `overture graph`.
#[derive(clap::Args)]
pub struct GraphArgs {
    /// A blueprint file, or a deployment: its id, its name, or TENANT/NAME.
    pub(crate) target: String,
    #[arg(long, value_enum, default_value = "mermaid")]
    format: Format,
    /// For a deployment: its steps' states as they stood then (a revision, 0-based, or an
    /// RFC 3339 time), folded from the log alone.
    #[arg(long, value_name = "REVISION|TIME")]
    at: Option<Moment>,
}

/// The drawings `--format` takes.
#[derive(Clone, Copy, ValueEnum)]
enum Format {
    Mermaid,
    Dot,
}

impl GraphArgs {
    /// Draws the graph.
    pub async fn run(self, backend: &dyn Backend) -> Result<(), Failure> {
        let Self { target, format, at } = self;
        let format = match format {
            Format::Mermaid => GraphFormat::Mermaid,
            Format::Dot => GraphFormat::Dot,
        };
        let path = Path::new(&target);
        if !path.exists() {
            return history::graph(backend, &target, at, format).await;
        }
        if at.is_some() {
            return Err(Failure::BadInput(format!(
                "--at: `{}` is a blueprint file, which has no history; give a deployment id \
                 instead (see `overture list`)",
                shown(path)
            )));
        }
        let (_, parsed) = read_blueprint(path)?;
        out!(
            "{}",
            graph::render(&parsed.snapshot.steps, format, |_| None)
        );
        Ok(())
    }
}
