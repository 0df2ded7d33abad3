//! A view's rows: the header as JSON, each step in columns of its own (times as unix
//! nanoseconds where they fit), each tenant's summary as JSON; read and written here.

use std::collections::{BTreeMap, BTreeSet};

use indexmap::IndexMap;
use overture_domain::projection::{DeploymentView, Header, StepView, TenantView};
use overture_events::{DeploymentId, ErrorClass, Timestamp};
use rusqlite::{params, Connection, OptionalExtension};
use serde::Deserialize;

use super::log_changes::parse_utc;
use super::{decode, encode};

/// The columns of a step's row but its outputs, which are a JSON object.
pub(super) struct StepColumns {
    status: &'static str,
    attempts: u32,
    started_at: TimeColumn,
    finished_at: TimeColumn,
    error_class: Option<&'static str>,
}

impl From<&StepView> for StepColumns {
    fn from(step: &StepView) -> Self {
        // Every field named: a field added to the view must be given a column too.
        let StepView {
            status,
            attempts,
            started_at,
            finished_at,
            error_class,
            outputs: _,
        } = step;
        Self {
            status: status.as_str(),
            attempts: *attempts,
            started_at: TimeColumn(*started_at),
            finished_at: TimeColumn(*finished_at),
            error_class: error_class.as_ref().map(ErrorClass::as_str),
        }
    }
}

/// The step's outputs as their column holds them: `None` (NULL) for none.
pub(super) fn outputs_json(outputs: &BTreeMap<String, String>) -> rusqlite::Result<Option<String>> {
    (!outputs.is_empty()).then(|| encode(outputs)).transpose()
}

/// The statement that stores a step's row, its parameters in [`step_params`]' order.
pub(super) const PUT_STEP: &str =
    "INSERT INTO step_views (deployment, name, position, status, attempts,
         started_at, finished_at, error_class, outputs) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
     ON CONFLICT (deployment, name) DO UPDATE SET status = excluded.status,
         attempts = excluded.attempts, started_at = excluded.started_at,
         finished_at = excluded.finished_at, error_class = excluded.error_class,
         outputs = excluded.outputs";

pub(super) fn put_step(
    put: &mut rusqlite::Statement<'_>,
    deployment: &str,
    name: &str,
    position: i64,
    columns: &StepColumns,
    outputs: Option<&str>,
) -> rusqlite::Result<()> {
    put.execute(params![
        deployment,
        name,
        position,
        columns.status,
        columns.attempts,
        columns.started_at,
        columns.finished_at,
        columns.error_class,
        outputs
    ])
    .map(|_| ())
}

/// A time as a step's row holds it: unix nanoseconds, or the view's own JSON text for a time
/// they cannot hold (beyond 1677-2262, or a leap second), or NULL.
pub(super) struct TimeColumn(pub(super) Option<Timestamp>);

impl rusqlite::ToSql for TimeColumn {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use chrono::Timelike;
        use rusqlite::types::{ToSqlOutput, Value};
        let Some(time) = self.0 else {
            return Ok(ToSqlOutput::Owned(Value::Null));
        };
        if time.nanosecond() < 1_000_000_000 {
            if let Some(nanos) = time.timestamp_nanos_opt() {
                return Ok(ToSqlOutput::Owned(Value::Integer(nanos)));
            }
        }
        let text = match serde_json::to_value(time) {
            Ok(serde_json::Value::String(text)) => text,
            Ok(other) => other.to_string(),
            Err(error) => return Err(rusqlite::Error::ToSqlConversionFailure(Box::new(error))),
        };
        Ok(ToSqlOutput::Owned(Value::Text(text)))
    }
}

/// Why a step's column does not hold what its view needs.
#[derive(Debug, thiserror::Error)]
#[error("a step view's column holds {0}")]
pub(super) struct BadColumn(String);

pub(super) fn bad_column(index: usize, what: String) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(
        index,
        rusqlite::types::Type::Text,
        Box::new(BadColumn(what)),
    )
}

/// Reads a time column written by [`TimeColumn`] (or migrated from a JSON document).
pub(super) fn time_column(
    row: &rusqlite::Row<'_>,
    index: usize,
) -> rusqlite::Result<Option<Timestamp>> {
    use rusqlite::types::ValueRef;
    match row.get_ref(index)? {
        ValueRef::Null => Ok(None),
        ValueRef::Integer(nanos) => Ok(Some(chrono::DateTime::from_timestamp_nanos(nanos))),
        ValueRef::Text(text) => {
            let text = std::str::from_utf8(text)
                .map_err(|e| bad_column(index, format!("a time that is not UTF-8: {e}")))?;
            match parse_utc(text) {
                Some(time) => Ok(Some(time)),
                None => named::<Timestamp>(index, text).map(Some),
            }
        }
        other => Err(bad_column(
            index,
            format!("a {} where a time belongs", other.data_type()),
        )),
    }
}

/// Reads a value from its serde name (a status, an error class, a time).
pub(super) fn named<'de, T: Deserialize<'de>>(index: usize, text: &'de str) -> rusqlite::Result<T> {
    use serde::de::IntoDeserializer;
    let text: serde::de::value::StrDeserializer<'_, serde::de::value::Error> =
        text.into_deserializer();
    T::deserialize(text).map_err(|e| bad_column(index, format!("`{text:?}`: {e}")))
}

/// Reads a step's view from its row's columns from `first` on: status, attempts, started_at,
/// finished_at, error_class, outputs.
pub(super) fn step_from_row(row: &rusqlite::Row<'_>, first: usize) -> rusqlite::Result<StepView> {
    let status = row.get_ref(first)?.as_str()?;
    let error_class = match row.get_ref(first + 4)?.as_str_or_null()? {
        Some(text) => Some(named(first + 4, text)?),
        None => None,
    };
    let outputs = match row.get_ref(first + 5)?.as_str_or_null()? {
        Some(json) => decode(json)?,
        None => BTreeMap::new(),
    };
    Ok(StepView {
        status: named(first, status)?,
        attempts: row.get(first + 1)?,
        started_at: time_column(row, first + 2)?,
        finished_at: time_column(row, first + 3)?,
        error_class,
        outputs,
    })
}

/// Which steps to read with a header.
pub(super) enum Steps<'a> {
    All,
    Named(&'a BTreeSet<String>),
}

pub(super) fn started_at_text(view: &DeploymentView) -> String {
    view.started_at
        .to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

/// A deployment's header and the steps asked for; every step in blueprint order.
pub(super) fn read_view(
    c: &Connection,
    id: DeploymentId,
    steps: Steps<'_>,
) -> rusqlite::Result<Option<DeploymentView>> {
    let json: Option<String> = c
        .prepare_cached("SELECT view FROM deployment_views WHERE id = ?1")?
        .query_row([id.to_string()], |row| row.get(0))
        .optional()?;
    let Some(json) = json else {
        return Ok(None);
    };
    let head: Header = decode(&json)?;
    let views = read_steps(c, id, steps)?;
    Ok(Some(head.with_steps(views)))
}

pub(super) fn read_steps(
    c: &Connection,
    id: DeploymentId,
    steps: Steps<'_>,
) -> rusqlite::Result<IndexMap<String, StepView>> {
    let deployment = id.to_string();
    let mut views = IndexMap::new();
    match steps {
        Steps::All => {
            let mut select = c.prepare_cached(
                "SELECT name, status, attempts, started_at, finished_at, error_class, outputs
                 FROM step_views WHERE deployment = ?1 ORDER BY position",
            )?;
            let mut rows = select.query([&deployment])?;
            while let Some(row) = rows.next()? {
                let name: String = row.get(0)?;
                views.insert(name, step_from_row(row, 1)?);
            }
        }
        Steps::Named(names) => {
            let mut select = c.prepare_cached(
                "SELECT status, attempts, started_at, finished_at, error_class, outputs
                 FROM step_views WHERE deployment = ?1 AND name = ?2",
            )?;
            for name in names {
                let step = select
                    .query_row(params![deployment, name], |row| step_from_row(row, 0))
                    .optional()?;
                if let Some(step) = step {
                    views.insert(name.clone(), step);
                }
            }
        }
    }
    Ok(views)
}

pub(super) fn read_tenant(c: &Connection, tenant: &str) -> rusqlite::Result<Option<TenantView>> {
    let json: Option<String> = c
        .prepare_cached("SELECT view FROM tenant_views WHERE tenant = ?1")?
        .query_row([tenant], |row| row.get(0))
        .optional()?;
    json.map(|j| decode(&j)).transpose()
}

pub(super) fn put_tenant(c: &Connection, view: &TenantView) -> rusqlite::Result<()> {
    c.prepare_cached(
        "INSERT INTO tenant_views (tenant, view) VALUES (?1, ?2)
         ON CONFLICT (tenant) DO UPDATE SET view = excluded.view",
    )?
    .execute(params![view.tenant, encode(view)?])
    .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use overture_domain::deployment::StepStatus;

    fn at(text: &str) -> Timestamp {
        serde_json::from_value(serde_json::Value::String(text.into())).expect("a time")
    }

    // Steps are stored in columns: every status, error class and shape of step, and times of
    // every precision, the far past and future and a leap second, read back as they were.
    #[test]
    fn steps_read_back_from_their_columns_as_they_were_stored() {
        let times = [
            "2026-11-27T12:31:16Z",
            "2026-11-27T12:31:16.100Z",
            "2026-11-27T12:31:16.000100Z",
            "2026-11-27T12:31:16.356064375Z",
            "1677-09-21T00:12:43.145224192Z",
            "0001-01-01T00:00:00.000000001Z",
            "9999-12-31T23:59:59.999999999Z",
            "+10000-01-01T00:00:00Z",
        ];
        let statuses = [
            StepStatus::Pending,
            StepStatus::Scheduled,
            StepStatus::Running,
            StepStatus::Retrying,
            StepStatus::Succeeded,
            StepStatus::Failed,
            StepStatus::Abandoned,
        ];
        let leap_second = chrono::NaiveDate::from_ymd_opt(2016, 12, 31)
            .and_then(|d| d.and_hms_nano_opt(23, 59, 59, 1_500_000_000))
            .map(|t| t.and_utc());
        let mut steps = vec![StepView {
            status: StepStatus::Pending,
            attempts: 0,
            started_at: None,
            finished_at: leap_second,
            error_class: None,
            outputs: BTreeMap::new(),
        }];
        for (i, time) in times.iter().enumerate() {
            steps.push(StepView {
                status: statuses[i % statuses.len()],
                attempts: 3,
                started_at: Some(at(time)),
                finished_at: Some(at(time) + chrono::TimeDelta::milliseconds(1)),
                error_class: Some(ErrorClass::ALL[i % ErrorClass::ALL.len()]),
                outputs: [("url".to_owned(), "https://x/\"quoted\"\n".to_owned())].into(),
            });
        }
        for (status, class) in statuses.iter().zip(ErrorClass::ALL) {
            steps.push(StepView {
                status: *status,
                attempts: 1,
                started_at: None,
                finished_at: None,
                error_class: Some(class),
                outputs: BTreeMap::new(),
            });
        }
        let mut c = Connection::open_in_memory().expect("in-memory database");
        crate::sqlite::schema::migrate(&mut c).expect("migrated");
        let id = DeploymentId::from_uuid(uuid::Uuid::now_v7());
        {
            let mut put = c.prepare(PUT_STEP).expect("prepared");
            for (position, step) in steps.iter().enumerate() {
                let outputs = outputs_json(&step.outputs).expect("encoded");
                let name = format!("s{position}");
                let columns = StepColumns::from(step);
                put_step(
                    &mut put,
                    &id.to_string(),
                    &name,
                    position as i64,
                    &columns,
                    outputs.as_deref(),
                )
                .expect("stored");
            }
        }
        let read = read_steps(&c, id, Steps::All).expect("read");
        let read: Vec<StepView> = read.into_values().collect();
        assert_eq!(read, steps);
    }

    // Views saved by a build that kept each step as a JSON document read back the same once
    // the file is upgraded: what `overture status` shows does not change.
    #[test]
    fn step_documents_read_back_the_same_after_the_upgrade() {
        let c = Connection::open_in_memory().expect("in-memory database");
        crate::sqlite::schema::migrate_to(&c, 6).expect("the older schema");
        let id = DeploymentId::from_uuid(uuid::Uuid::now_v7());
        let head = r#"{"id":"ID","tenant":"acme","blueprint":"app","status":"failed",
            "started_at":"2027-01-15T08:00:00Z","finished_at":"2027-01-15T08:01:00.25Z",
            "reason":"no","revision":9}"#
            .replace("ID", &id.to_string());
        c.execute(
            "INSERT INTO deployment_views (id, tenant, status, started_at, revision, view)
             VALUES (?1, 'acme', 'failed', 'x', 9, ?2)",
            params![id.to_string(), head],
        )
        .expect("a header");
        let steps = [
            r#"{"status":"succeeded","attempts":1,"started_at":"2027-01-15T08:00:01Z","finished_at":"2027-01-15T08:00:02.123456789Z","outputs":{"k":"v","url":"https://x/\"q\""}}"#,
            r#"{"status":"failed","attempts":3,"started_at":"2027-01-15T08:00:03.5Z","finished_at":"2027-01-15T08:01:00Z","error_class":"bootstrap-timeout"}"#,
            r#"{"status":"pending","attempts":0}"#,
        ];
        for (position, json) in steps.iter().enumerate() {
            c.execute(
                "INSERT INTO step_views (deployment, name, position, view) VALUES (?1, ?2, ?3, ?4)",
                params![
                    id.to_string(),
                    format!("s{position}"),
                    position as i64,
                    json
                ],
            )
            .expect("a step");
        }
        let header: Header = serde_json::from_str(&head).expect("a header");
        let expected = header.with_steps(
            steps
                .iter()
                .enumerate()
                .map(|(position, json)| {
                    let step = serde_json::from_str(json).expect("a step view");
                    (format!("s{position}"), step)
                })
                .collect(),
        );

        // Up to the version that split the documents; a later one folds the views again from
        // the log, which this file has none of.
        crate::sqlite::schema::upgrade_to(&c, 8).expect("upgraded");

        let read = read_view(&c, id, Steps::All)
            .expect("read")
            .expect("a view");
        assert_eq!(read, expected);
        let named = BTreeSet::from(["s1".to_owned()]);
        let one = read_view(&c, id, Steps::Named(&named))
            .expect("read")
            .expect("a view");
        assert_eq!(one.steps.get("s1"), expected.steps.get("s1"));
        assert_eq!(one.steps.len(), 1);
    }
}
