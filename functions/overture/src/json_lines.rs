//! The log as portable JSON lines: `overture export` and `overture import`.
//!
//! Each line is one event as `overture events --json` prints it (the EventStoreDB-style
//! envelope: `stream`, `revision`, `id`, `type`, `data`, `metadata` with `$correlationId`,
//! `$causationId` and `recorded_at`) with its global `position`, in the log's order. An export
//! holds events only: no secret (the log never holds one) and no blueprint file (kept by hash
//! in the data directory, needed to run a deployment, not to audit it).
//!
//! An import reads the whole file before it stores anything, then adds its events in one
//! transaction ([`EventLog::import`]): ids, revisions and times as exported. A line that is not
//! an event, a position that does not follow the line before, or an event that does not fit its
//! stream is refused with its line number, and nothing is imported. Events the log already
//! holds, identical, are left alone: importing a file twice changes nothing. The read models
//! then fold what was added.

use std::path::Path;

use overture_events::{DeploymentEvent, DeploymentId, Envelope};
use overture_infra::sqlite::{EventLog, Imported, LogError};

use crate::Failure;
use overture_embedded::Engine;

/// How many events one read of the log brings.
const EXPORT_BATCH: usize = 5_000;

/// One line of an export.
#[derive(serde::Serialize)]
struct Line<'a> {
    position: u64,
    #[serde(flatten)]
    envelope: &'a Envelope,
}

/// Prints every event after `since` (a position), of `tenant`'s deployments or all, one line
/// each; returns how many.
pub async fn export(log: &EventLog, tenant: Option<&str>, since: u64) -> Result<u64, Failure> {
    let mut after = since;
    let mut written = 0;
    loop {
        let entries = log
            .read_all(after, EXPORT_BATCH)
            .await
            .map_err(|e| Failure::Engine(e.into()))?;
        let Some(last) = entries.last() else {
            return Ok(written);
        };
        after = last.position;
        for entry in entries
            .iter()
            .filter(|e| tenant.is_none_or(|t| e.envelope.metadata.tenant == t))
        {
            let line = Line {
                position: entry.position,
                envelope: &entry.envelope,
            };
            outln!("{}", crate::render::json_line(&line));
            written += 1;
        }
    }
}

/// Reads an export, refusing it whole at its first bad line; returns each event with its line
/// number.
pub fn read_export(file: &Path, text: &str) -> Result<Vec<(usize, Envelope)>, Failure> {
    let refused = |line: usize, reason: String| {
        Failure::BadInput(format!(
            "{}:{line}: {reason}; nothing was imported",
            file.display()
        ))
    };
    let mut events = Vec::new();
    let mut last_position = 0;
    for (index, text) in text.lines().enumerate() {
        let line = index + 1;
        if text.trim().is_empty() {
            continue;
        }
        let mut value: serde_json::Value = serde_json::from_str(text)
            .map_err(|e| refused(line, format!("not a JSON object: {e}")))?;
        let position = value
            .as_object_mut()
            .and_then(|object| object.remove("position"))
            .and_then(|position| position.as_u64())
            .ok_or_else(|| {
                refused(
                    line,
                    "no `position` (a whole number): each line is an event as \
                     `overture export` writes it"
                        .into(),
                )
            })?;
        let envelope: Envelope = serde_json::from_value(value)
            .map_err(|e| refused(line, format!("not an event envelope: {e}")))?;
        if position <= last_position {
            return Err(refused(
                line,
                format!(
                    "position {position} after position {last_position}: the lines are out \
                     of the log's order"
                ),
            ));
        }
        last_position = position;
        DeploymentId::from_stream(&envelope.stream).map_err(|_| {
            refused(
                line,
                format!("`{}` is not a deployment's stream", envelope.stream),
            )
        })?;
        DeploymentEvent::from_parts(&envelope.event_type, envelope.data.clone()).map_err(|e| {
            refused(
                line,
                format!("its `data` is not a `{}` event: {e}", envelope.event_type),
            )
        })?;
        events.push((line, envelope));
    }
    Ok(events)
}

/// Imports `file` into the data directory's log and folds it into the read models.
pub async fn import(engine: &Engine, file: &Path) -> Result<Imported, Failure> {
    let text = std::fs::read_to_string(file).map_err(|e| {
        Failure::BadInput(format!(
            "{}: cannot be read: {e}; nothing was imported",
            file.display()
        ))
    })?;
    let events = read_export(file, &text)?;
    let lines: Vec<usize> = events.iter().map(|(line, _)| *line).collect();
    let envelopes = events.into_iter().map(|(_, envelope)| envelope).collect();
    let imported = engine
        .log
        .import(envelopes)
        .await
        .map_err(|error| match error {
            LogError::ImportRefused { index, reason } => Failure::BadInput(format!(
                "{}:{}: {reason}; nothing was imported",
                file.display(),
                lines.get(index).copied().unwrap_or_default()
            )),
            other => Failure::Engine(other.into()),
        })?;
    overture_projector::catch_up(&engine.log, &engine.read_models, overture_projector::BATCH)
        .await
        .map_err(|e| Failure::Engine(e.into()))?;
    Ok(imported)
}
