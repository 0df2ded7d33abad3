//! The log's hash chains ([`overture_events::chain`]) on SQLite: each stream's head, the
//! one-time sealing of events recorded before the log was chained, and the check of every chain.
//!
//! The chain fields live in each row's `metadata` JSON, as they travel in an envelope. A file
//! that an older Overture wrote holds events without them: the first time this version opens
//! it, every such event is chained in position order, in one transaction, and the sealing is
//! recorded in `chain_seals` (when, how many events, up to which position). Those events are
//! attested from then on only: the sealing vouches for the history as it stood when it ran.

use std::collections::HashMap;

use overture_events::chain::{Break, ChainCheck, GENESIS};
use overture_events::Envelope;
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

use super::log::{LogError, StoredRow};
use super::Database;

/// A recorded sealing of events that had no chain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sealing {
    /// When it ran (RFC 3339).
    pub at: String,
    /// How many events it chained.
    pub events: u64,
    /// The last position it chained (0 when the log was empty).
    pub up_to: u64,
}

/// Where and how a chain is broken.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Broken {
    /// The stream.
    pub stream: String,
    /// The event's revision in it.
    pub revision: u64,
    /// The event's global position.
    pub position: u64,
    /// What broke.
    pub reason: Break,
}

/// What a check of the log's chains found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verified {
    /// How many streams were checked.
    pub streams: u64,
    /// How many events were checked.
    pub events: u64,
    /// Each stream's head (its last link), by stream name.
    pub heads: HashMap<String, String>,
    /// The first break, in position order; `None` when every chain holds.
    pub broken: Option<Broken>,
    /// The sealings of events recorded before the log was chained.
    pub sealings: Vec<Sealing>,
}

/// The link `stream`'s next event follows: its last event's `hash`, [`GENESIS`] for a new one.
///
/// A last event without a hash (written by an older Overture after this one sealed the file)
/// has the unsealed events sealed first, in the caller's transaction.
pub(super) fn head(tx: &Connection, stream: &str) -> rusqlite::Result<String> {
    let last = || -> rusqlite::Result<Option<Option<String>>> {
        tx.prepare_cached(
            "SELECT json_extract(metadata, '$.hash') FROM events WHERE stream = ?1
             ORDER BY revision DESC LIMIT 1",
        )?
        .query_row([stream], |row| row.get(0))
        .optional()
    };
    match last()? {
        None => Ok(GENESIS.to_owned()),
        Some(Some(hash)) => Ok(hash),
        Some(None) => {
            seal_unsealed(tx)?;
            Ok(last()?.flatten().unwrap_or_else(|| GENESIS.to_owned()))
        }
    }
}

/// Seals the file's unchained events once, when it is first opened by a version that chains:
/// after that, `chain_seals` holds a row and this does nothing.
pub(super) fn seal_once(connection: &mut Connection) -> rusqlite::Result<()> {
    // IMMEDIATE: two processes opening an old file at once must not both seal it.
    let tx = connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let sealed: bool = tx.query_row("SELECT EXISTS (SELECT 1 FROM chain_seals)", [], |row| {
        row.get(0)
    })?;
    if !sealed {
        seal_unsealed(&tx)?;
    }
    tx.commit()
}

/// Chains every event that has no `hash`, in position order, and records the sealing.
fn seal_unsealed(tx: &Connection) -> rusqlite::Result<()> {
    let mut heads: HashMap<String, String> = HashMap::new();
    let mut select = tx.prepare(
        "SELECT position, stream, revision, id, type, data, metadata FROM events
         ORDER BY position",
    )?;
    let mut update = tx.prepare("UPDATE events SET metadata = ?2 WHERE position = ?1")?;
    let mut rows = select.query([])?;
    let (mut events, mut up_to) = (0u64, 0u64);
    while let Some(row) = rows.next()? {
        let stored = StoredRow::read(row)?;
        let position = stored.position;
        let Ok(entry) = stored.decode() else {
            // A row that cannot be read stays as it is; `verify` names it.
            continue;
        };
        let mut envelope = entry.envelope;
        let head = heads
            .entry(envelope.stream.clone())
            .or_insert_with(|| GENESIS.to_owned());
        if let Some(hash) = &envelope.metadata.hash {
            *head = hash.clone();
            continue;
        }
        *head = overture_events::chain::seal(&mut envelope, head);
        let metadata = serde_json::to_string(&envelope.metadata)
            .map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?;
        update.execute(params![position, metadata])?;
        events += 1;
        up_to = position;
    }
    tx.execute(
        "INSERT INTO chain_seals (sealed_at, events, up_to) VALUES (?1, ?2, ?3)",
        params![
            chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            events,
            up_to
        ],
    )?;
    Ok(())
}

impl super::EventLog {
    /// Checks every stream's chain (or `stream`'s alone) in position order, up to the first
    /// break.
    pub async fn verify(&self, stream: Option<String>) -> Result<Verified, LogError> {
        let db: &Database = self.database();
        db.read_long(move |connection| verify_blocking(connection, stream.as_deref()))
            .await?
    }
}

fn verify_blocking(
    connection: &Connection,
    only: Option<&str>,
) -> rusqlite::Result<Result<Verified, LogError>> {
    let mut verified = Verified {
        sealings: sealings(connection)?,
        ..Verified::default()
    };
    let mut select = connection.prepare(
        "SELECT position, stream, revision, id, type, data, metadata FROM events
         WHERE ?1 IS NULL OR stream = ?1 ORDER BY position",
    )?;
    let mut rows = select.query([only])?;
    let mut checks: HashMap<String, ChainCheck> = HashMap::new();
    while let Some(row) = rows.next()? {
        let stored = StoredRow::read(row)?;
        let position = stored.position;
        let envelope: Envelope = match stored.decode() {
            Ok(entry) => entry.envelope,
            Err(error) => return Ok(Err(error)),
        };
        let check = checks.entry(envelope.stream.clone()).or_default();
        verified.events += 1;
        // Every event of a sealed file carries its chain, so one without is a break.
        let outcome = match check.check(&envelope) {
            Ok(()) if check.unsealed > 0 => Err(Break::Unsealed),
            other => other,
        };
        if let Err(reason) = outcome {
            verified.broken = Some(Broken {
                stream: envelope.stream,
                revision: envelope.revision,
                position,
                reason,
            });
            break;
        }
    }
    verified.streams = u64::try_from(checks.len()).unwrap_or(u64::MAX);
    verified.heads = checks
        .into_iter()
        .map(|(stream, check)| (stream, check.head))
        .collect();
    Ok(Ok(verified))
}

fn sealings(connection: &Connection) -> rusqlite::Result<Vec<Sealing>> {
    let mut select =
        connection.prepare("SELECT sealed_at, events, up_to FROM chain_seals ORDER BY rowid")?;
    let rows = select.query_map([], |row| {
        Ok(Sealing {
            at: row.get(0)?,
            events: row.get(1)?,
            up_to: row.get(2)?,
        })
    })?;
    rows.collect()
}
