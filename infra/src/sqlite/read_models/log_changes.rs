//! [`LogChanges`]: the log read as a rebuild folds it, decoding only what the views need, on
//! a connection of its own.

use async_trait::async_trait;
use overture_domain::projection::{Change, Folding};
use overture_events::{DeploymentId, LogEntry, Timestamp};
use overture_projector::{ChangeEntry, ProjectorError, ReadLog, StoreError};
use rusqlite::params;
use serde::Deserialize;

use super::store_error;
use crate::sqlite::{Database, EventLog};

/// The log as a rebuild reads it ([`ReadLog::read_changes`]): only the columns and fields the
/// read models need (the event's type and data, its stream, revision and when it was
/// recorded), decoded on the connection's thread. Give it a connection of its own (a
/// [`Database`] opened on the same file) and reading the next batch overlaps storing this one.
#[derive(Clone, Debug)]
pub struct LogChanges {
    db: Database,
    log: EventLog,
}

/// How much of the file [`LogChanges`] maps into memory.
pub(super) const MMAP_BYTES: i64 = 1 << 30;

/// The one field of an event's metadata the read models need.
#[derive(Deserialize)]
pub(super) struct Recorded {
    recorded_at: Timestamp,
}

impl LogChanges {
    /// The log in this database, read through this handle.
    pub fn new(db: Database) -> Self {
        Self {
            log: EventLog::new(db.clone()),
            db,
        }
    }
}

/// The `recorded_at` of metadata as Overture writes it: the object's last member, at the top
/// level (the quote before it follows `{` or `,`, so it is not inside a string), its value
/// closing the object. Anything else is left to the full decoding. The rest of the object is
/// not looked at, so metadata that is not valid JSON around a well-formed end is read here
/// where decoding it whole would refuse it; the log only holds what serde_json wrote.
pub(super) fn recorded_at(metadata: &str) -> Option<Timestamp> {
    let rest = metadata.trim_end().strip_suffix("\"}")?;
    // The value's opening quote: a time holds none. Found by a search for one byte, which
    // costs less than a search for the key.
    let open = rest.rfind('"')?;
    let before = rest[..open].strip_suffix("\"recorded_at\":")?;
    if !matches!(before.trim_end().chars().next_back(), Some('{' | ',')) {
        return None;
    }
    parse_utc(&rest[open + 1..])
}

/// Parses `YYYY-MM-DDTHH:MM:SS[.fraction]Z`, the form Overture records times in, as chrono
/// would; `None` for any other form (leap seconds, offsets, ...), which chrono then parses.
pub(super) fn parse_utc(text: &str) -> Option<Timestamp> {
    let b = text.as_bytes();
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b'T'
        || b[13] != b':'
        || b[16] != b':'
        || *b.last()? != b'Z'
    {
        return None;
    }
    let num = |range: std::ops::Range<usize>| -> Option<u32> {
        b[range].iter().try_fold(0u32, |n, &d| {
            d.is_ascii_digit().then(|| n * 10 + u32::from(d - b'0'))
        })
    };
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let nanos = match &b[19..b.len() - 1] {
        [] => 0,
        [b'.', digits @ ..] if (1..=9).contains(&digits.len()) => {
            let n = num(20..20 + digits.len())?;
            n * 10u32.pow(9 - digits.len() as u32)
        }
        _ => return None,
    };
    if second > 59 {
        return None;
    }
    let date = chrono::NaiveDate::from_ymd_opt(i32::try_from(year).ok()?, month, day)?;
    Some(
        date.and_hms_nano_opt(hour, minute, second, nanos)?
            .and_utc(),
    )
}

/// Decodes one row of `SELECT position, stream, revision, type, data, metadata`. `last` is the
/// stream of the row before and its deployment: a stream's records mostly come in runs, and
/// its id need not be parsed again for each.
pub(super) fn change_entry(
    row: &rusqlite::Row<'_>,
    last: &mut Option<(String, DeploymentId)>,
) -> rusqlite::Result<Result<ChangeEntry, ProjectorError>> {
    let position: i64 = row.get(0)?;
    let position = position.max(0) as u64;
    let stream = row.get_ref(1)?.as_str()?;
    let revision: i64 = row.get(2)?;
    let event_type = row.get_ref(3)?.as_str()?;
    let data = row.get_ref(4)?.as_str()?;
    let metadata = row.get_ref(5)?.as_str()?;
    let invalid = |source| ProjectorError::Projection { position, source };
    let decoded = (|| {
        let deployment = match last {
            Some((text, id)) if text == stream => *id,
            _ => {
                let id = DeploymentId::from_stream(stream)?;
                *last = Some((stream.to_owned(), id));
                id
            }
        };
        let recorded = match recorded_at(metadata) {
            Some(at) => Recorded { recorded_at: at },
            None => serde_json::from_str(metadata).map_err(|source| {
                overture_events::deployment::SchemaError {
                    event_type: event_type.to_owned(),
                    source,
                }
            })?,
        };
        let change = Change::decode(event_type, data)?;
        Ok(Folding {
            deployment,
            revision: revision.max(0) as u64,
            at: recorded.recorded_at,
            change,
        })
    })();
    Ok(decoded
        .map(|folding| ChangeEntry { position, folding })
        .map_err(invalid))
}

#[async_trait]
impl ReadLog for LogChanges {
    async fn read_all(&self, after: u64, limit: usize) -> Result<Vec<LogEntry>, StoreError> {
        ReadLog::read_all(&self.log, after, limit).await
    }

    async fn read_changes(
        &self,
        after: u64,
        limit: usize,
    ) -> Result<Vec<ChangeEntry>, ProjectorError> {
        let read = self
            .db
            .read_long(move |c| {
                // Pages mapped rather than copied by a system call each: a rebuild reads the
                // whole log once.
                c.pragma_update(None, "mmap_size", MMAP_BYTES)?;
                let mut select = c.prepare_cached(
                    "SELECT position, stream, revision, type, data, metadata FROM events
                     WHERE position > ?1 ORDER BY position LIMIT ?2",
                )?;
                let after = i64::try_from(after).unwrap_or(i64::MAX);
                let limit_sql = i64::try_from(limit).unwrap_or(i64::MAX);
                let mut rows = select.query(params![after, limit_sql])?;
                let mut entries = Vec::with_capacity(limit.min(1 << 16));
                let mut last = None;
                while let Some(row) = rows.next()? {
                    match change_entry(row, &mut last)? {
                        Ok(entry) => entries.push(entry),
                        Err(error) => return Ok(Err(error)),
                    }
                }
                Ok(Ok(entries))
            })
            .await
            .map_err(store_error)?;
        read
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        serde_json::from_value(serde_json::Value::String(text.into())).expect("a time")
    }
    // The log's metadata is read for its time without decoding it whole when it is in the form
    // Overture writes; any other form is decoded whole, and both agree.
    #[test]
    fn recorded_at_is_read_as_the_whole_decoding_reads_it() {
        let whole = |metadata: &str| -> Option<Timestamp> {
            serde_json::from_str::<Recorded>(metadata)
                .ok()
                .map(|r| r.recorded_at)
        };
        let fast = [
            r#"{"tenant":"acme","actor":"bench","recorded_at":"2026-11-27T12:31:16.342064375Z"}"#,
            r#"{"recorded_at":"1970-01-01T00:00:05Z"}"#,
            r#"{"a":"b", "recorded_at":"2026-11-27T12:31:16.3Z"} "#,
        ];
        for metadata in fast {
            assert!(recorded_at(metadata).is_some(), "{metadata}");
            assert_eq!(recorded_at(metadata), whole(metadata), "{metadata}");
        }
        let left_to_serde = [
            // Not the last member, nested, inside a string, other forms of time.
            r#"{"recorded_at":"2026-11-27T12:31:16Z","actor":"x"}"#,
            r#"{"x":{"recorded_at":"2026-11-27T12:31:16Z"}}"#,
            r#"{"actor":"a\",\"recorded_at\":\"2026-11-27T12:31:16Z"}"#,
            r#"{"actor":"a\\","recorded_at":"2026-11-27T12:31:16+01:00"}"#,
            r#"{"recorded_at":"2026-11-27t12:31:16Z"}"#,
            r#"{"recorded_at":"2026-11-27T12:31:60Z"}"#,
            r#"{"recorded_at":"2026-11-27T12:31:16.1234567891Z"}"#,
            r#"{"recorded_at":"2026-02-30T12:31:16Z"}"#,
        ];
        for metadata in left_to_serde {
            assert_eq!(recorded_at(metadata), None, "{metadata}");
        }
    }

    #[test]
    fn times_in_overtures_form_parse_as_chrono_parses_them() {
        for text in [
            "2026-11-27T12:31:16Z",
            "2026-11-27T12:31:16.1Z",
            "2026-11-27T12:31:16.000100Z",
            "2026-11-27T12:31:16.356064375Z",
            "2024-02-29T23:59:59.999999999Z",
        ] {
            assert_eq!(parse_utc(text), Some(at(text)), "{text}");
        }
    }
}
