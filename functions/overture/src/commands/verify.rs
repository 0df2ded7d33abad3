//! `overture verify [ID]`: every stream's hash chain checked, or one deployment's, on the
//! backend chosen (the data directory's SQLite log, or the stack's DynamoDB table).

use std::collections::HashMap;

use overture_events::chain::{Break, ChainCheck};
use overture_events::{DeploymentId, Envelope};

use crate::backend::Backend;
use crate::Failure;

/// `overture verify`.
#[derive(clap::Args)]
pub struct VerifyArgs {
    /// Only this deployment's events: its id, its name, or TENANT/NAME.
    pub(crate) id: Option<String>,
}

/// What a check of the log's chains found, on any backend.
#[derive(Debug, Default)]
pub struct Report {
    /// How many streams were checked.
    pub streams: u64,
    /// How many events were checked.
    pub events: u64,
    /// Each stream's head (its last link), by stream name.
    pub heads: HashMap<String, String>,
    /// The first break; `None` when every chain holds.
    pub broken: Option<Broken>,
    /// What the log says of events recorded before it was chained, one line each.
    pub unchained: Vec<String>,
}

/// Where and how a chain is broken.
#[derive(Debug)]
pub struct Broken {
    /// The stream.
    pub stream: String,
    /// The event's revision in it.
    pub revision: u64,
    /// The event's global position, where the log has one (not on DynamoDB).
    pub position: Option<u64>,
    /// What broke.
    pub reason: Break,
}

impl Report {
    /// Checks one stream's events (all of them, in revision order) into the report; `false`
    /// once it is broken. Events recorded before the log was chained may open a stream: they
    /// are counted in the second number returned (how many), and attested by the first event
    /// after them.
    pub fn check_stream(&mut self, stream: &str, events: &[Envelope]) -> (bool, u64) {
        let mut check = ChainCheck::default();
        self.streams += 1;
        for envelope in events {
            self.events += 1;
            if let Err(reason) = check.check(envelope) {
                self.broken = Some(Broken {
                    stream: stream.to_owned(),
                    revision: envelope.revision,
                    position: None,
                    reason,
                });
                return (false, check.unsealed);
            }
        }
        self.heads.insert(stream.to_owned(), check.head);
        (true, check.unsealed)
    }
}

impl VerifyArgs {
    /// Checks the chains; exit 1 naming the first break.
    pub async fn run(self, backend: &dyn Backend) -> Result<(), Failure> {
        let stream = match &self.id {
            Some(id) => Some(
                id.parse::<DeploymentId>()
                    .map_err(|e| Failure::BadInput(format!("`{id}` is not a deployment id: {e}")))?
                    .stream(),
            ),
            None => None,
        };
        let report = backend.verify(stream.clone()).await?;
        if let Some(broken) = report.broken {
            let deployment = broken
                .stream
                .strip_prefix(overture_events::ids::STREAM_PREFIX)
                .unwrap_or(&broken.stream);
            let position = broken
                .position
                .map(|p| format!(", position {p}"))
                .unwrap_or_default();
            return Err(Failure::Unsuccessful(format!(
                "the log is broken at deployment {deployment}, revision {}{position}: {}",
                broken.revision, broken.reason
            )));
        }
        if let (Some(id), Some(stream)) = (&self.id, &stream) {
            if report.events == 0 {
                return Err(Failure::BadInput(format!("no deployment {id} in the log")));
            }
            let head = report.heads.get(stream).map_or("", String::as_str);
            outln!(
                "deployment {id}: {} event(s), chain whole, head {head}",
                report.events
            );
        } else {
            outln!(
                "{} event(s) in {} stream(s): every chain whole",
                report.events,
                report.streams
            );
        }
        for line in &report.unchained {
            outln!("{line}");
        }
        Ok(())
    }
}
