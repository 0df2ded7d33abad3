//! The log as portable JSON lines: `overture export` and `overture import`.
//!
//! Each line is one event as `overture events --json` prints it (the EventStoreDB-style
//! envelope: `stream`, `revision`, `id`, `type`, `data`, `metadata` with `$correlationId`,
//! `$causationId` and `recorded_at`) with its global `position`, in the log's order. An export
//! holds events only: no secret (the log never holds one) and no blueprint file (kept by hash
//! in the data directory, needed to run a deployment, not to audit it).
//!
//! The last line is a signed **trailer**: `{"trailer": {"events", "heads", "key",
//! "signature"}}`, the number of events written, each stream's head (the `hash` of its last
//! line), the engine's public key (OpenSSH form) and its SSH signature (namespace
//! `overture-export`) of the canonical JSON of the other three ([`overture_events::chain`]).
//!
//! An import streams the file: each line (at most [`MAX_LINE`] bytes) is checked and written
//! as it is read, in one transaction ([`EventLog::import`]) that commits only once the trailer
//! has been checked: nothing is imported unless all is. A line that is not an event, a position
//! that does not follow, an event that does not fit its stream or whose hash does not follow
//! the stream's head, a repeated event, a trailer that is missing, unsigned by a trusted key or
//! whose heads are not the lines', or a stream the aggregate could not have recorded
//! ([`overture_domain::recorded`]) is refused with its line number. Events the log already
//! holds, identical, are left alone: importing a file twice changes nothing. The read models
//! then fold what was added.

use std::collections::BTreeMap;
use std::io::{BufRead, Read};
use std::path::{Path, PathBuf};
use std::sync::mpsc::SyncSender;

use overture_events::{DeploymentEvent, DeploymentId, Envelope};
use overture_infra::sqlite::{EventLog, Fed, Imported, LogError};
use ssh_key::{PrivateKey, PublicKey};

use crate::engine_key;

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

/// The longest line an import reads; a longer one is refused before it is held whole.
pub const MAX_LINE: usize = 16 * 1024 * 1024;

/// The signed statement that ends an export: its events' count and each stream's head.
#[derive(serde::Serialize, serde::Deserialize)]
struct Trailer {
    events: u64,
    heads: BTreeMap<String, String>,
    key: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    signature: String,
}

impl Trailer {
    /// What the signature is of: the trailer without it, as canonical JSON.
    fn signed_text(&self) -> Vec<u8> {
        let value =
            serde_json::json!({"events": self.events, "heads": self.heads, "key": self.key});
        overture_events::chain::canonical_json(&value)
    }
}

/// Prints every event after `since` (a position), of `tenant`'s deployments or all, one line
/// each, then the trailer signed with `key`; returns how many events.
pub async fn export(
    log: &EventLog,
    key: &PrivateKey,
    tenant: Option<&str>,
    since: u64,
) -> Result<u64, Failure> {
    let mut after = since;
    let mut heads = BTreeMap::new();
    let mut written = 0;
    loop {
        let entries = log
            .read_all(after, EXPORT_BATCH)
            .await
            .map_err(|e| Failure::Engine(e.into()))?;
        let Some(last) = entries.last() else {
            break;
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
            let head = entry.envelope.metadata.hash.clone().unwrap_or_default();
            heads.insert(entry.envelope.stream.clone(), head);
            written += 1;
        }
    }
    let mut trailer = Trailer {
        events: written,
        heads,
        key: engine_key::describe(key.public_key()).0,
        signature: String::new(),
    };
    trailer.signature = engine_key::sign(key, &trailer.signed_text())?;
    outln!(
        "{}",
        crate::render::json_line(&serde_json::json!({ "trailer": trailer }))
    );
    Ok(written)
}

/// One line of an export read back as an event; `last_position` is the line before's.
fn read_event(text: &str, last_position: &mut u64) -> Result<Envelope, String> {
    let mut value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("not a JSON object: {e}"))?;
    let position = value
        .as_object_mut()
        .and_then(|object| object.remove("position"))
        .and_then(|position| position.as_u64())
        .ok_or_else(|| {
            "no `position` (a whole number): each line is an event as `overture export` writes it"
                .to_owned()
        })?;
    let envelope: Envelope =
        serde_json::from_value(value).map_err(|e| format!("not an event envelope: {e}"))?;
    if position <= *last_position {
        return Err(format!(
            "position {position} after position {last_position}: the lines are out of the \
             log's order"
        ));
    }
    *last_position = position;
    DeploymentId::from_stream(&envelope.stream)
        .map_err(|_| format!("`{}` is not a deployment's stream", envelope.stream))?;
    DeploymentEvent::from_parts(&envelope.event_type, envelope.data.clone())
        .map_err(|e| format!("its `data` is not a `{}` event: {e}", envelope.event_type))?;
    Ok(envelope)
}

/// Reads the export line by line, feeding each event to the import, and ends with the check of
/// its trailer; the import commits only when this returns having sent no refusal.
fn feed(input: impl Read, own: &PublicKey, trusted: &[PublicKey], events: &SyncSender<Fed>) {
    let mut reader = std::io::BufReader::new(input);
    let mut heads: BTreeMap<String, String> = BTreeMap::new();
    let (mut count, mut last_position, mut line) = (0u64, 0u64, 0usize);
    let mut trailer: Option<(usize, Trailer)> = None;
    let mut seen: std::collections::HashMap<uuid::Uuid, usize> = std::collections::HashMap::new();
    let mut buffer = Vec::new();
    let refuse = |line: usize, reason: String| {
        let _ = events.send(Err((line, reason)));
    };
    loop {
        buffer.clear();
        let limit = u64::try_from(MAX_LINE).unwrap_or(u64::MAX) + 1;
        match (&mut reader).take(limit).read_until(b'\n', &mut buffer) {
            Ok(0) => break,
            Ok(_) => line += 1,
            Err(e) => return refuse(line + 1, format!("cannot be read: {e}")),
        }
        if buffer.len() > MAX_LINE {
            return refuse(line, format!("the line is longer than {MAX_LINE} bytes"));
        }
        let Ok(text) = std::str::from_utf8(&buffer) else {
            return refuse(line, "the line is not UTF-8".into());
        };
        if text.trim().is_empty() {
            continue;
        }
        if let Some((at, _)) = &trailer {
            return refuse(line, format!("a line after the trailer (line {at})"));
        }
        if text.trim_start().starts_with("{\"trailer\"") {
            match serde_json::from_str::<BTreeMap<String, Trailer>>(text) {
                Ok(mut object) => match object.remove("trailer") {
                    Some(found) => trailer = Some((line, found)),
                    None => return refuse(line, "not a trailer".into()),
                },
                Err(e) => return refuse(line, format!("not a trailer: {e}")),
            }
            continue;
        }
        let envelope = match read_event(text, &mut last_position) {
            Ok(envelope) => envelope,
            Err(reason) => {
                // A repeated line is named with the line it repeats, not as out of order.
                let repeated = serde_json::from_str::<Envelope>(text)
                    .ok()
                    .and_then(|e| seen.get(&e.id).copied());
                return match repeated {
                    Some(first) => refuse(
                        line,
                        format!("the event is repeated: line {first} holds it already"),
                    ),
                    None => refuse(line, reason),
                };
            }
        };
        seen.insert(envelope.id, line);
        let head = envelope.metadata.hash.clone().unwrap_or_default();
        heads.insert(envelope.stream.clone(), head);
        count += 1;
        if events.send(Ok((line, envelope))).is_err() {
            // The import refused a line already and is rolling back.
            return;
        }
    }
    let Some((at, trailer)) = trailer else {
        return refuse(
            line,
            "the export ends without its signed trailer (it was cut short, or made by an \
             older Overture): export it again with `overture export`"
                .into(),
        );
    };
    if let Err(reason) = check_trailer(&trailer, own, trusted, count, &heads) {
        refuse(at, reason);
    }
}

/// Whether the trailer is signed by a trusted key and states the lines' heads.
fn check_trailer(
    trailer: &Trailer,
    own: &PublicKey,
    trusted: &[PublicKey],
    count: u64,
    heads: &BTreeMap<String, String>,
) -> Result<(), String> {
    let key = PublicKey::from_openssh(trailer.key.trim())
        .map_err(|e| format!("the trailer's `key` is not an OpenSSH public key: {e}"))?;
    let fingerprint = engine_key::describe(&key).1;
    let known = std::iter::once(own)
        .chain(trusted)
        .any(|k| k.key_data() == key.key_data());
    if !known {
        return Err(format!(
            "the export is signed by key {fingerprint}, which is neither this engine's nor \
             trusted: if you trust it, import with `--trust '{}'`",
            trailer.key.trim()
        ));
    }
    if !engine_key::verify(&key, &trailer.signed_text(), &trailer.signature) {
        return Err(format!(
            "the trailer's signature does not verify with key {fingerprint}: the trailer was \
             changed after it was signed"
        ));
    }
    if trailer.events != count {
        return Err(format!(
            "the trailer counts {} event(s), the export holds {count}: lines were removed or \
             added",
            trailer.events
        ));
    }
    if let Some((stream, _)) = heads
        .iter()
        .find(|(stream, head)| trailer.heads.get(*stream) != Some(*head))
    {
        return Err(format!(
            "stream `{stream}` does not end on the head the trailer signs: its lines were \
             changed"
        ));
    }
    if trailer.heads.len() != heads.len() {
        return Err("the trailer signs streams the export does not hold".into());
    }
    Ok(())
}

/// Imports `file` into the data directory's log, trusting its own key and `trusted`, and folds
/// it into the read models.
pub async fn import(
    engine: &Engine,
    own: PublicKey,
    trusted: Vec<PublicKey>,
    file: &Path,
) -> Result<Imported, Failure> {
    let input = std::fs::File::open(file).map_err(|e| {
        Failure::BadInput(format!(
            "{}: cannot be read: {e}; nothing was imported",
            file.display()
        ))
    })?;
    // A few lines in flight: the reader keeps ahead of the writer without holding the file.
    let (events, fed) = std::sync::mpsc::sync_channel(64);
    let reader = std::thread::spawn(move || feed(input, &own, &trusted, &events));
    let fold = Box::new(|stream: &[Envelope]| {
        overture_domain::recorded::check(stream).map_err(|refused| {
            (
                refused.revision,
                format!(
                    "a history Overture could not have recorded: {}",
                    refused.reason
                ),
            )
        })
    });
    let imported = engine.log.import(fed, fold).await;
    let _ = reader.join();
    let file: PathBuf = file.to_path_buf();
    let imported = imported.map_err(|error| match error {
        LogError::ImportRefused { line, reason } => Failure::BadInput(format!(
            "{}:{line}: {reason}; nothing was imported",
            file.display()
        )),
        other => Failure::Engine(other.into()),
    })?;
    overture_projector::catch_up(&engine.log, &engine.read_models, overture_projector::BATCH)
        .await
        .map_err(|e| Failure::Engine(e.into()))?;
    Ok(imported)
}
