//! `overture status ID [--at MOMENT]`: a deployment's status, now or as it stood then.

use overture_domain::history::Moment;

use crate::backend::Backend;
use crate::output::print_status;
use crate::{history, Failure};

/// `overture status`.
#[derive(clap::Args)]
pub struct StatusArgs {
    /// The deployment: its id, its name, or TENANT/NAME.
    pub(crate) id: String,
    #[arg(long)]
    json: bool,
    /// Show it as it stood then, folded from the log alone: after the event at this revision
    /// (0-based), or after every event recorded at or before this RFC 3339 time.
    #[arg(long, value_name = "REVISION|TIME")]
    at: Option<Moment>,
}

impl StatusArgs {
    /// Prints the status.
    pub async fn run(self, backend: &dyn Backend) -> Result<(), Failure> {
        if let Some(moment) = self.at {
            return history::status(backend, &self.id, moment, self.json).await;
        }
        let queries = backend.queries().await?;
        print_status(
            queries.as_ref(),
            &|id| backend.missing(id),
            &self.id,
            self.json,
        )
        .await?;
        Ok(())
    }
}
