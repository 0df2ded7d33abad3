//! The event log: append-only streams with optimistic concurrency, and one global order.
//!
//! - [`EventLog::append`] writes a batch to one stream in one transaction, or nothing.
//! - [`EventLog::read_stream`] reads one stream; [`EventLog::read_all`] reads every stream in
//!   append order (`$all`) by global position, for projections and export.
//! - [`EventLog::import`] adds an export's events as they are, all or none, idempotently.
//! - [`EventLog::checkpoint`] and [`EventLog::save_checkpoint`] remember how far a projection got.
//!
//! Event rows are only ever inserted. SQLite lets one writer commit at a time, so positions
//! become visible in increasing order: a reader past position p never finds p - 1 later.

use std::fmt;
use std::sync::Arc;

use overture_events::{Envelope, LogEntry, Metadata};
use rusqlite::{params, Connection, ErrorCode, OptionalExtension};
use tokio::sync::Notify;
use uuid::Uuid;

use super::{Database, DbError};

/// An event to append; the log gives it its revision and position.
#[derive(Clone, Debug, PartialEq)]
pub struct NewEvent {
    /// Unique across the whole log.
    pub id: Uuid,
    /// Stable type string, such as `StepSucceeded`.
    pub event_type: String,
    /// The event's own fields.
    pub data: serde_json::Value,
    /// Stored as given, `recorded_at` included: the log reads no clock.
    pub metadata: Metadata,
}

/// What the writer believes about the stream; the append is refused if it is wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpectedRevision {
    /// The stream has no events yet.
    NoStream,
    /// The stream's last revision is this one.
    Exact(u64),
    /// No check.
    Any,
}

impl ExpectedRevision {
    fn admits(self, last: Option<u64>) -> bool {
        match self {
            Self::NoStream => last.is_none(),
            Self::Exact(revision) => last == Some(revision),
            Self::Any => true,
        }
    }
}

impl fmt::Display for ExpectedRevision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoStream => f.write_str("no stream"),
            Self::Exact(revision) => write!(f, "last revision {revision}"),
            Self::Any => f.write_str("any revision"),
        }
    }
}

/// Why the log refused or failed a call.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// Another writer appended to the stream first; re-read it and decide again.
    #[error("stream `{stream}`: expected {expected}, but found {}", describe_last(.actual))]
    WrongExpectedRevision {
        /// The stream appended to.
        stream: String,
        /// What the writer expected.
        expected: ExpectedRevision,
        /// The stream's last revision, `None` if it has no events.
        actual: Option<u64>,
    },
    /// An event with this id is already stored (or appears twice in the batch).
    #[error("an event with id {id} is already in the log")]
    DuplicateEventId {
        /// The repeated id.
        id: Uuid,
    },
    /// An event's metadata could not be turned into JSON.
    #[error("event {id} cannot be stored as JSON: {source}")]
    Encode {
        /// The event's id.
        id: Uuid,
        /// What serde said.
        #[source]
        source: serde_json::Error,
    },
    /// A stored row does not hold a valid event.
    #[error("the event at position {position} cannot be read: {reason}")]
    Corrupt {
        /// The row's global position.
        position: u64,
        /// What was wrong with it.
        reason: String,
    },
    /// An imported event does not fit the log: nothing of the import was stored.
    #[error("line {line} of the import: {reason}")]
    ImportRefused {
        /// Its line in the import.
        line: usize,
        /// Why it does not fit.
        reason: String,
    },
    /// Another deployment of the tenant holds the name the request asks for: nothing of the
    /// append was stored.
    #[error("tenant `{tenant}` already has a deployment named `{name}`: {holder}")]
    NameTaken {
        /// The tenant.
        tenant: String,
        /// The name asked for.
        name: String,
        /// The stream of the deployment that holds it.
        holder: String,
    },
    /// The database failed.
    #[error(transparent)]
    Database(#[from] DbError),
}

/// One event of an import, with its line; or why the import must stop, at which line.
pub type Fed = Result<(usize, Envelope), (usize, String)>;

/// What an import stored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Imported {
    /// Events added to the log.
    pub added: u64,
    /// Events the log already held, identical: left as they were.
    pub already: u64,
}

fn describe_last(actual: &Option<u64>) -> String {
    match actual {
        Some(revision) => format!("last revision {revision}"),
        None => "no stream".to_owned(),
    }
}

/// The append-only log of streams, on a [`Database`].
#[derive(Clone, Debug)]
pub struct EventLog {
    db: Database,
}

impl EventLog {
    /// A log on this database; every log on clones of one handle shares [`Self::appended`].
    pub fn new(db: Database) -> Self {
        Self { db }
    }

    pub(super) fn database(&self) -> &Database {
        &self.db
    }

    /// Fired after every append that stored at least one event, through this handle only.
    ///
    /// Create the `notified()` future before reading what is new: `notify_waiters` wakes only
    /// futures that already exist. Appends by other processes do not fire it, so a waiter
    /// should also poll on a timer.
    pub fn appended(&self) -> Arc<Notify> {
        Arc::clone(&self.db.appended)
    }

    /// Appends `events` to `stream` if `expected` holds, all of them or none.
    pub async fn append(
        &self,
        stream: &str,
        expected: ExpectedRevision,
        events: Vec<NewEvent>,
    ) -> Result<Vec<LogEntry>, LogError> {
        let batch = events
            .into_iter()
            .map(Encoded::new)
            .collect::<Result<Vec<_>, _>>()?;
        let stream = stream.to_owned();
        // Outer `?`: the database failed; inner: the log refused the append.
        let entries = self
            .db
            .with_connection(move |connection| append_batch(connection, &stream, expected, batch))
            .await??;
        if !entries.is_empty() {
            self.db.appended.notify_waiters();
        }
        Ok(entries)
    }

    /// The stream of the deployment of `tenant` that holds `name` (it is not destroyed), if
    /// one does.
    pub async fn named(&self, tenant: &str, name: &str) -> Result<Option<String>, LogError> {
        let (tenant, name) = (tenant.to_owned(), name.to_owned());
        Ok(self
            .db
            .read(move |connection| super::names::holder(connection, &tenant, &name))
            .await?)
    }

    /// The events of `stream` from `from_revision` on, in revision order.
    pub async fn read_stream(
        &self,
        stream: &str,
        from_revision: u64,
    ) -> Result<Vec<Envelope>, LogError> {
        let stream = stream.to_owned();
        let rows = self
            .db
            .read(move |connection| {
                let mut select = connection.prepare_cached(
                    "SELECT position, stream, revision, id, type, data, metadata FROM events
                     WHERE stream = ?1 AND revision >= ?2 ORDER BY revision",
                )?;
                // Revisions are stored as i64; a start beyond that range finds nothing.
                let from = i64::try_from(from_revision).unwrap_or(i64::MAX);
                let rows = select.query_map(params![stream, from], StoredRow::read)?;
                rows.collect::<rusqlite::Result<Vec<_>>>()
            })
            .await?;
        rows.into_iter()
            .map(|row| row.decode().map(|entry| entry.envelope))
            .collect()
    }

    /// Up to `limit` events of every stream with a position above `after_position`, in order.
    pub async fn read_all(
        &self,
        after_position: u64,
        limit: usize,
    ) -> Result<Vec<LogEntry>, LogError> {
        let rows = self
            .db
            .read(move |connection| {
                let mut select = connection.prepare_cached(
                    "SELECT position, stream, revision, id, type, data, metadata FROM events
                     WHERE position > ?1 ORDER BY position LIMIT ?2",
                )?;
                let after = i64::try_from(after_position).unwrap_or(i64::MAX);
                let limit = i64::try_from(limit).unwrap_or(i64::MAX);
                let rows = select.query_map(params![after, limit], StoredRow::read)?;
                rows.collect::<rusqlite::Result<Vec<_>>>()
            })
            .await?;
        rows.into_iter().map(StoredRow::decode).collect()
    }

    /// Adds the events fed through `lines` (an export, in its order, each with its line) to the
    /// log as they are, ids, revisions, times and chains preserved, in one transaction that is
    /// committed once the feed ends without a refusal, and rolled back otherwise: all or none.
    ///
    /// An event the log already holds, identical, is left as it is, so importing the same export
    /// twice changes nothing. Each new event must be the next revision of its stream and its
    /// chain must follow the stream's head ([`overture_events::chain`]); an id the log holds
    /// with other content, or one fed twice, is refused. Before committing, `fold` is shown
    /// every stream the import added to, whole, and may refuse one naming its revision.
    /// Positions are given in the import's order.
    pub async fn import(
        &self,
        lines: std::sync::mpsc::Receiver<Fed>,
        fold: super::import::Fold,
    ) -> Result<Imported, LogError> {
        let imported = self
            .db
            .with_connection(move |connection| super::import::import_fed(connection, &lines, fold))
            .await??;
        if imported.added > 0 {
            self.db.appended.notify_waiters();
        }
        Ok(imported)
    }

    /// The position of the last event, 0 when the log is empty.
    pub async fn head_position(&self) -> Result<u64, LogError> {
        let head = self
            .db
            .read(|connection| {
                connection
                    .prepare_cached("SELECT COALESCE(MAX(position), 0) FROM events")?
                    .query_row([], |row| row.get(0))
            })
            .await?;
        Ok(head)
    }

    /// Every stream's name, in the order of its first event.
    pub async fn stream_names(&self) -> Result<Vec<String>, LogError> {
        let names = self
            .db
            .read(|connection| {
                // Revisions are gapless from 0, so revision 0 is each stream's first event.
                let mut select = connection.prepare_cached(
                    "SELECT stream FROM events WHERE revision = 0 ORDER BY position",
                )?;
                let names = select.query_map([], |row| row.get(0))?;
                names.collect::<rusqlite::Result<Vec<String>>>()
            })
            .await?;
        Ok(names)
    }

    /// The position the projection `name` has processed up to, 0 if it has not saved one.
    pub async fn checkpoint(&self, name: &str) -> Result<u64, LogError> {
        let name = name.to_owned();
        let position = self
            .db
            .read(move |connection| {
                connection
                    .prepare_cached("SELECT position FROM checkpoints WHERE name = ?1")?
                    .query_row([name], |row| row.get::<_, u64>(0))
                    .optional()
            })
            .await?;
        Ok(position.unwrap_or(0))
    }

    /// Records that the projection `name` has processed every event up to `position`.
    pub async fn save_checkpoint(&self, name: &str, position: u64) -> Result<(), LogError> {
        let name = name.to_owned();
        self.db
            .with_derived(move |connection| {
                connection
                    .prepare_cached(
                        "INSERT INTO checkpoints (name, position) VALUES (?1, ?2)
                         ON CONFLICT (name) DO UPDATE SET position = excluded.position",
                    )?
                    .execute(params![name, position])
            })
            .await?;
        Ok(())
    }
}

/// An event with its data and metadata already turned into the JSON text stored.
pub(super) struct Encoded {
    event: NewEvent,
    data: String,
    metadata: String,
}

impl Encoded {
    pub(super) fn new(event: NewEvent) -> Result<Self, LogError> {
        let metadata =
            serde_json::to_string(&event.metadata).map_err(|source| LogError::Encode {
                id: event.id,
                source,
            })?;
        Ok(Self {
            data: event.data.to_string(),
            metadata,
            event,
        })
    }
}

fn append_batch(
    connection: &mut Connection,
    stream: &str,
    expected: ExpectedRevision,
    batch: Vec<Encoded>,
) -> rusqlite::Result<Result<Vec<LogEntry>, LogError>> {
    // The writer's transaction holds the write lock (`BEGIN IMMEDIATE`) before the last revision
    // is read, so no other process can append between this check and the inserts. The
    // savepoint undoes this batch alone if it is refused half-way.
    let tx = connection.savepoint()?;
    let last = last_revision(&tx, stream)?;
    if !expected.admits(last) {
        return Ok(Err(LogError::WrongExpectedRevision {
            stream: stream.to_owned(),
            expected,
            actual: last,
        }));
    }
    let first = last.map_or(0, |revision| revision + 1);
    let entries = match insert_batch(&tx, stream, expected, first, batch, Chaining::Seal)? {
        Ok(entries) => entries,
        // Dropping `tx` rolls back the events already inserted.
        Err(refused) => return Ok(Err(refused)),
    };
    tx.commit()?;
    Ok(Ok(entries))
}

/// Whether [`insert_batch`] chains the events it inserts or stores the chain they carry.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Chaining {
    /// Appended events: each is linked to the stream's head as it is inserted.
    Seal,
    /// Imported events, whose chain the import has checked: stored as they are.
    AsGiven,
}

/// Inserts `batch` at revisions `first`, `first + 1`, ... inside the caller's transaction.
pub(super) fn insert_batch(
    tx: &Connection,
    stream: &str,
    expected: ExpectedRevision,
    first: u64,
    batch: Vec<Encoded>,
    chaining: Chaining,
) -> rusqlite::Result<Result<Vec<LogEntry>, LogError>> {
    let mut insert = tx.prepare_cached(
        "INSERT INTO events (stream, revision, id, type, data, metadata)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6) RETURNING position",
    )?;
    // Inside the transaction that holds the write lock: no other writer moves the head.
    let mut head = match chaining {
        Chaining::Seal => super::chain::head(tx, stream)?,
        Chaining::AsGiven => String::new(),
    };
    let mut entries = Vec::with_capacity(batch.len());
    for (
        revision,
        Encoded {
            event,
            data,
            metadata,
        },
    ) in (first..).zip(batch)
    {
        let mut envelope = Envelope {
            stream: stream.to_owned(),
            revision,
            id: event.id,
            event_type: event.event_type,
            data: event.data,
            metadata: event.metadata,
        };
        let metadata = match chaining {
            Chaining::Seal => {
                head = overture_events::chain::seal(&mut envelope, &head);
                match serde_json::to_string(&envelope.metadata) {
                    Ok(text) => text,
                    Err(source) => {
                        return Ok(Err(LogError::Encode {
                            id: event.id,
                            source,
                        }))
                    }
                }
            }
            Chaining::AsGiven => metadata,
        };
        let inserted = insert.query_row(
            params![
                stream,
                revision,
                event.id.to_string(),
                envelope.event_type,
                data,
                metadata
            ],
            |row| row.get::<_, u64>(0),
        );
        let position = match inserted {
            Ok(position) => position,
            Err(error) if is_constraint_violation(&error) => {
                return explain_violation(tx, stream, expected, revision, event.id, error).map(Err);
            }
            Err(error) => return Err(error),
        };
        if let Err(taken) = super::names::follow(tx, stream, &envelope.event_type, &envelope.data)?
        {
            return Ok(Err(taken));
        }
        entries.push(LogEntry { position, envelope });
    }
    Ok(Ok(entries))
}

fn is_constraint_violation(error: &rusqlite::Error) -> bool {
    error.sqlite_error_code() == Some(ErrorCode::ConstraintViolation)
}

/// Says which UNIQUE constraint an insert hit.
///
/// With `BEGIN IMMEDIATE` no writer of this module can lose the race for a revision, but a
/// writer that does not take the lock first could still win it: that is a concurrency
/// conflict for the caller to handle, not a storage failure.
fn explain_violation(
    tx: &Connection,
    stream: &str,
    expected: ExpectedRevision,
    revision: u64,
    id: Uuid,
    error: rusqlite::Error,
) -> rusqlite::Result<LogError> {
    let revision_taken: bool = tx
        .prepare_cached("SELECT EXISTS (SELECT 1 FROM events WHERE stream = ?1 AND revision = ?2)")?
        .query_row(params![stream, revision], |row| row.get(0))?;
    if revision_taken {
        return Ok(LogError::WrongExpectedRevision {
            stream: stream.to_owned(),
            expected,
            actual: last_revision(tx, stream)?,
        });
    }
    let id_taken: bool = tx
        .prepare_cached("SELECT EXISTS (SELECT 1 FROM events WHERE id = ?1)")?
        .query_row([id.to_string()], |row| row.get(0))?;
    if id_taken {
        return Ok(LogError::DuplicateEventId { id });
    }
    Err(error)
}

pub(super) fn last_revision(tx: &Connection, stream: &str) -> rusqlite::Result<Option<u64>> {
    tx.prepare_cached("SELECT MAX(revision) FROM events WHERE stream = ?1")?
        .query_row([stream], |row| row.get(0))
}

/// An `events` row as stored, before its text is checked.
pub(super) struct StoredRow {
    pub(super) position: u64,
    stream: String,
    revision: u64,
    id: String,
    event_type: String,
    data: String,
    metadata: String,
}

impl StoredRow {
    pub(super) fn read(row: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
        Ok(Self {
            position: row.get(0)?,
            stream: row.get(1)?,
            revision: row.get(2)?,
            id: row.get(3)?,
            event_type: row.get(4)?,
            data: row.get(5)?,
            metadata: row.get(6)?,
        })
    }

    pub(super) fn decode(self) -> Result<LogEntry, LogError> {
        let position = self.position;
        let corrupt = |reason: String| LogError::Corrupt { position, reason };
        let id = Uuid::parse_str(&self.id)
            .map_err(|error| corrupt(format!("id `{}` is not a UUID: {error}", self.id)))?;
        let data = serde_json::from_str(&self.data)
            .map_err(|error| corrupt(format!("data is not JSON: {error}")))?;
        let metadata = serde_json::from_str(&self.metadata)
            .map_err(|error| corrupt(format!("metadata does not match the schema: {error}")))?;
        Ok(LogEntry {
            position,
            envelope: Envelope {
                stream: self.stream,
                revision: self.revision,
                id,
                event_type: self.event_type,
                data,
                metadata,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(id: u128) -> Encoded {
        Encoded::new(NewEvent {
            id: Uuid::from_u128(id),
            event_type: "Tested".into(),
            data: serde_json::json!({}),
            metadata: Metadata {
                tenant: "t".into(),
                actor: "a".into(),
                correlation_id: Uuid::from_u128(1),
                causation_id: Uuid::from_u128(1),
                recorded_at: chrono::DateTime::UNIX_EPOCH,
                previous: None,
                hash: None,
            },
        })
        .expect("encodable")
    }

    // A writer that read a stale last revision (one that did not take the lock first) hits
    // UNIQUE(stream, revision); that must come back as a conflict, not as a SQLite error.
    #[test]
    fn a_lost_race_on_the_revision_constraint_is_a_conflict() {
        let mut connection = Connection::open_in_memory().expect("in-memory database");
        super::super::schema::migrate(&mut connection).expect("migrated");
        append_batch(
            &mut connection,
            "s",
            ExpectedRevision::NoStream,
            vec![event(10)],
        )
        .expect("sqlite")
        .expect("first append");

        let tx = connection.transaction().expect("transaction");
        let refused = insert_batch(
            &tx,
            "s",
            ExpectedRevision::NoStream,
            0,
            vec![event(11)],
            Chaining::Seal,
        )
        .expect("sqlite")
        .expect_err("revision 0 is taken");
        assert!(
            matches!(
                refused,
                LogError::WrongExpectedRevision { ref stream, expected: ExpectedRevision::NoStream, actual: Some(0) }
                    if stream == "s"
            ),
            "{refused:?}"
        );
    }
}
