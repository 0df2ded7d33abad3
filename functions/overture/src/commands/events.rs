//! `overture events ID`: a deployment's audit trail as a timeline, or as JSON lines.

use crate::backend::Backend;
use crate::input::parse_id;
use crate::{render, timeline, Failure};

/// `overture events`.
#[derive(clap::Args)]
pub struct EventsArgs {
    /// The deployment: its id, its name, or TENANT/NAME.
    pub(crate) id: String,
    /// Only the events of this step.
    #[arg(long)]
    step: Option<String>,
    /// Only events of this type, such as StepAttemptFailed (repeatable, or comma-separated;
    /// case does not matter).
    #[arg(long = "type", value_name = "TYPE")]
    types: Vec<String>,
    /// Only events at or after this revision, or this time (RFC 3339, or as the timeline
    /// shows it, in UTC).
    #[arg(long, value_name = "REVISION|TIME")]
    since: Option<String>,
    /// One JSON envelope per line (the events the filters keep).
    #[arg(long)]
    json: bool,
}

impl EventsArgs {
    /// Prints the events the filters keep.
    pub async fn run(self, backend: &dyn Backend) -> Result<(), Failure> {
        let id = parse_id(&self.id)?;
        let bad = |error: timeline::FilterError| Failure::BadInput(error.to_string());
        let filter =
            timeline::Filter::parse(self.step, &self.types, self.since.as_deref()).map_err(bad)?;
        let envelopes = backend.queries().await?.events(id).await?;
        if envelopes.is_empty() {
            return Err(backend.missing(id));
        }
        filter.check_step(&envelopes).map_err(bad)?;
        if self.json {
            for envelope in envelopes.iter().filter(|e| filter.keeps(e)) {
                outln!("{}", render::json_line(envelope));
            }
        } else {
            for line in timeline::lines(&envelopes, &filter) {
                outln!("{line}");
            }
        }
        Ok(())
    }
}
