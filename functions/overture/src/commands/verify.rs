//! `overture verify [ID]`: every stream's hash chain checked, or one deployment's.

use std::path::Path;

use overture_embedded::Engine;
use overture_events::DeploymentId;

use crate::Failure;

/// `overture verify`.
#[derive(clap::Args)]
pub struct VerifyArgs {
    /// Only this deployment's events.
    id: Option<String>,
}

impl VerifyArgs {
    /// Checks the chains; exit 1 naming the first break.
    pub async fn run(self, data_dir: &Path) -> Result<(), Failure> {
        let stream = match &self.id {
            Some(id) => Some(
                id.parse::<DeploymentId>()
                    .map_err(|e| Failure::BadInput(format!("`{id}` is not a deployment id: {e}")))?
                    .stream(),
            ),
            None => None,
        };
        let engine = Engine::open(data_dir).await?;
        let verified = engine
            .log
            .verify(stream.clone())
            .await
            .map_err(|e| Failure::Engine(e.into()))?;
        if let Some(broken) = verified.broken {
            let deployment = broken
                .stream
                .strip_prefix(overture_events::ids::STREAM_PREFIX)
                .unwrap_or(&broken.stream);
            return Err(Failure::Unsuccessful(format!(
                "the log is broken at deployment {deployment}, revision {}, position {}: {}",
                broken.revision, broken.position, broken.reason
            )));
        }
        if let (Some(id), Some(stream)) = (&self.id, &stream) {
            if verified.events == 0 {
                return Err(Failure::BadInput(format!("no deployment {id} in the log")));
            }
            let head = verified.heads.get(stream).map_or("", String::as_str);
            outln!(
                "deployment {id}: {} event(s), chain whole, head {head}",
                verified.events
            );
        } else {
            outln!(
                "{} event(s) in {} stream(s): every chain whole",
                verified.events,
                verified.streams
            );
        }
        for sealing in verified.sealings.iter().filter(|s| s.events > 0) {
            outln!(
                "events up to position {} ({} of them) were recorded before the log was chained \
                 and sealed on first read at {}: their history before then is attested from then on",
                sealing.up_to, sealing.events, sealing.at
            );
        }
        Ok(())
    }
}
