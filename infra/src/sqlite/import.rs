//! An import's events written as they are fed, in the writer's transaction: each checked
//! against the log (its revision, its chain, its id) before it is inserted, and every stream it
//! added to shown whole to the caller's fold before the commit.
//!
//! Memory stays bounded by the number of events, not their size: each event is inserted as it
//! arrives; what is kept is each event's id and line (to name a repeated line and the line of a
//! refused fold) and the names of the streams added to.

use std::collections::HashMap;
use std::sync::mpsc::Receiver;

use overture_events::chain::ChainCheck;
use overture_events::{Envelope, Metadata};
use rusqlite::{Connection, OptionalExtension};
use uuid::Uuid;

use super::log::{
    insert_batch, last_revision, Chaining, Encoded, ExpectedRevision, Fed, Imported, LogError,
    NewEvent,
};

/// What an import shows each stream it added to, whole: a refusal names a revision and why.
pub(super) type Fold = Box<dyn FnMut(&[Envelope]) -> Result<(), (u64, String)> + Send>;

/// Reads `lines` until they end, importing each event; see [`super::EventLog::import`].
pub(super) fn import_fed(
    connection: &mut Connection,
    lines: &Receiver<Fed>,
    mut fold: Fold,
) -> rusqlite::Result<Result<Imported, LogError>> {
    let tx = connection.savepoint()?;
    let mut imported = Imported::default();
    let mut seen: HashMap<Uuid, usize> = HashMap::new();
    let mut added_to: Vec<String> = Vec::new();
    // The sender hangs up once the input has ended well; a refusal arrives as an `Err`.
    for fed in lines.iter() {
        let (line, envelope) = match fed {
            Ok(event) => event,
            Err((line, reason)) => return Ok(Err(LogError::ImportRefused { line, reason })),
        };
        let refused = |reason: String| Ok(Err(LogError::ImportRefused { line, reason }));
        if let Some(first) = seen.insert(envelope.id, line) {
            return refused(format!(
                "event {} is repeated: line {first} holds it already",
                envelope.id
            ));
        }
        match held(&tx, &envelope)? {
            Some(true) => {
                imported.already += 1;
                continue;
            }
            Some(false) => {
                return refused(format!(
                    "event {} is in the log already, with other content",
                    envelope.id
                ))
            }
            None => {}
        }
        let stream = envelope.stream.clone();
        let next = last_revision(&tx, &stream)?.map_or(0, |last| last + 1);
        if envelope.revision != next {
            return refused(format!(
                "stream `{stream}` takes revision {next} next, but the event is revision {}: \
                 a line is missing, repeated or out of order",
                envelope.revision
            ));
        }
        let mut check = ChainCheck::after(next, super::chain::head(&tx, &stream)?);
        if let Err(broken) = check.check(&envelope) {
            return refused(format!(
                "`{stream}` revision {}: its hash does not follow: {broken}",
                envelope.revision
            ));
        }
        if check.unsealed > 0 {
            return refused(format!(
                "`{stream}` revision {} carries no hash (`metadata.previous` and \
                 `metadata.hash`): export the log again with this version of Overture",
                envelope.revision
            ));
        }
        let event = NewEvent {
            id: envelope.id,
            event_type: envelope.event_type,
            data: envelope.data,
            metadata: envelope.metadata,
        };
        let encoded = match Encoded::new(event) {
            Ok(encoded) => encoded,
            Err(error) => return refused(error.to_string()),
        };
        let inserted = insert_batch(
            &tx,
            &stream,
            ExpectedRevision::Any,
            next,
            vec![encoded],
            Chaining::AsGiven,
        )?;
        if let Err(error) = inserted {
            return refused(error.to_string());
        }
        if !added_to.contains(&stream) {
            added_to.push(stream);
        }
        imported.added += 1;
    }
    for stream in &added_to {
        let events = read_stream(&tx, stream)?;
        if let Err((revision, reason)) = fold(&events) {
            let line = events
                .iter()
                .find(|e| e.revision == revision)
                .and_then(|e| seen.get(&e.id).copied())
                .unwrap_or_default();
            return Ok(Err(LogError::ImportRefused {
                line,
                reason: format!("`{stream}` revision {revision}: {reason}"),
            }));
        }
    }
    tx.commit()?;
    Ok(Ok(imported))
}

/// Whether the log holds an event with this id: `Some(true)` identical, `Some(false)` with
/// other content, `None` not at all.
fn held(tx: &Connection, envelope: &Envelope) -> rusqlite::Result<Option<bool>> {
    let held: Option<(String, u64, String, String, String)> = tx
        .prepare_cached("SELECT stream, revision, type, data, metadata FROM events WHERE id = ?1")?
        .query_row([envelope.id.to_string()], |row| {
            Ok((
                row.get(0)?,
                row.get(1)?,
                row.get(2)?,
                row.get(3)?,
                row.get(4)?,
            ))
        })
        .optional()?;
    Ok(held.map(|(stream, revision, event_type, data, metadata)| {
        // Compared as values, not text: the same event may be written with its keys in
        // another order. The metadata's chain fields are compared too.
        stream == envelope.stream
            && revision == envelope.revision
            && event_type == envelope.event_type
            && serde_json::from_str::<serde_json::Value>(&data)
                .ok()
                .as_ref()
                == Some(&envelope.data)
            && serde_json::from_str::<Metadata>(&metadata).ok().as_ref() == Some(&envelope.metadata)
    }))
}

/// A whole stream as the transaction sees it; a row that cannot be read is left out, for the
/// fold to find the stream short.
fn read_stream(tx: &Connection, stream: &str) -> rusqlite::Result<Vec<Envelope>> {
    let mut select = tx.prepare_cached(
        "SELECT position, stream, revision, id, type, data, metadata FROM events
         WHERE stream = ?1 ORDER BY revision",
    )?;
    let rows = select.query_map([stream], super::log::StoredRow::read)?;
    let mut events = Vec::new();
    for row in rows {
        if let Ok(entry) = row?.decode() {
            events.push(entry.envelope);
        }
    }
    Ok(events)
}
