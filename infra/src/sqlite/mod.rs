//! Everything Overture keeps on disk, in one SQLite file.
//!
//! - This file: [`Database`], the shared handle to the file (connection settings, the
//!   blocking-task bridge, [`Database::with_connection`] for modules that bring their own SQL),
//!   and [`DbError`].
//! - [`schema`]: the migrations, keyed on `PRAGMA user_version`; new tables go there.
//! - [`log`]: the append-only event log and the projection checkpoints.
//! - [`queue`]: the durable job queue for step jobs and timers.
//! - [`deployments`]: the functions' deployment-log port on the log, with a fold cache.
//! - [`EsrsDeploymentStore`]: the log as an `esrs::store::EventStore` of the Deployment
//!   aggregate (the kit's store, on [`SqliteDeployments`]).
//! - [`read_models`]: the read models' tables.
//! - [`work`]: the orchestrator's work port on the queue, and the [`Job`]s it queues.
//! - [`leases`]: the bastion lease table ([`overture_kit::leases::LeaseBastionRules`]).
//! - [`triggers`]: the trigger ledger: claims of (event, trigger) pairs and every decision.
//!
//! Several processes may open the same file: every write transaction starts with
//! `BEGIN IMMEDIATE`, so a writer holds the lock before it reads what it is about to check, and
//! `busy_timeout` makes the others wait for it instead of failing.

pub mod deployments;
pub mod leases;
pub mod log;
pub mod queue;
pub mod read_models;
pub mod schema;
pub mod triggers;
pub mod work;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::Connection;
use tokio::sync::Notify;

pub use deployments::SqliteDeployments;
pub use leases::SqliteLeases;
pub use log::{EventLog, ExpectedRevision, Imported, LogError, NewEvent};
pub use overture_kit::esrs_store::EsrsStoreError;
pub use queue::{JobQueue, NewJob, QueueError, Receipt, ReceivedJob};
pub use read_models::{ListFilter, SqliteReadModels};
pub use triggers::SqliteTriggerLedger;
pub use work::Job;

/// The SQLite log as an esrs event store.
pub type EsrsDeploymentStore = overture_kit::esrs_store::EsrsDeploymentStore<SqliteDeployments>;

/// How long a statement waits for another connection's write lock before it fails.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// A cheap-to-clone handle to the SQLite file; clones share one connection.
#[derive(Clone, Debug)]
pub struct Database {
    connection: Arc<Mutex<Connection>>,
    /// Fired by [`EventLog::append`] after each commit; shared by every log built on this handle.
    appended: Arc<Notify>,
    path: Arc<Path>,
}

/// The database itself failed, as opposed to refusing what was asked of it.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// SQLite reported an error.
    #[error("SQLite database {}: {source}", path.display())]
    Sqlite {
        /// The database file.
        path: PathBuf,
        /// What SQLite said.
        #[source]
        source: rusqlite::Error,
    },
    /// The blocking task that ran the SQL panicked or was cancelled.
    #[error("the task working on SQLite database {} did not finish: {source}", path.display())]
    TaskFailed {
        /// The database file.
        path: PathBuf,
        /// Why the task ended.
        #[source]
        source: tokio::task::JoinError,
    },
    /// The file was migrated by a newer Overture than this one.
    #[error(
        "SQLite database {} has schema version {found}, but this Overture knows only up to {known}; upgrade Overture",
        path.display()
    )]
    SchemaTooNew {
        /// The database file.
        path: PathBuf,
        /// The file's `user_version`.
        found: i64,
        /// The newest version this build can migrate to.
        known: i64,
    },
}

impl Database {
    /// Opens the file, creating it if needed, and migrates it to the current schema.
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, DbError> {
        let path: Arc<Path> = Arc::from(path.as_ref());
        let opening = Arc::clone(&path);
        let connection = tokio::task::spawn_blocking(move || open_blocking(&opening))
            .await
            .map_err(|source| DbError::TaskFailed {
                path: path.to_path_buf(),
                source,
            })??;
        Ok(Self {
            connection: Arc::new(Mutex::new(connection)),
            appended: Arc::new(Notify::new()),
            path,
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `f` on the connection in a blocking task, for modules with their own tables.
    ///
    /// Writers should open their transaction with
    /// `connection.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)`, since
    /// another process may be writing to the same file.
    pub async fn with_connection<F, T>(&self, f: F) -> Result<T, DbError>
    where
        F: FnOnce(&mut Connection) -> rusqlite::Result<T> + Send + 'static,
        T: Send + 'static,
    {
        let connection = Arc::clone(&self.connection);
        let joined = tokio::task::spawn_blocking(move || {
            let mut connection = connection.lock().unwrap_or_else(|poisoned| {
                // A closure panicked while holding the lock. A `Transaction` rolls back as it
                // unwinds, but one begun by hand would stay open for the next caller.
                let connection = poisoned.into_inner();
                if !connection.is_autocommit() {
                    let _ = connection.execute_batch("ROLLBACK");
                }
                connection
            });
            f(&mut connection)
        })
        .await;
        match joined {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(source)) => Err(DbError::Sqlite {
                path: self.path.to_path_buf(),
                source,
            }),
            Err(source) => Err(DbError::TaskFailed {
                path: self.path.to_path_buf(),
                source,
            }),
        }
    }
}

fn open_blocking(path: &Path) -> Result<Connection, DbError> {
    let sqlite = |source| DbError::Sqlite {
        path: path.to_path_buf(),
        source,
    };
    let mut connection = Connection::open(path).map_err(sqlite)?;
    configure_patiently(&connection).map_err(sqlite)?;
    let found = schema::migrate(&mut connection).map_err(sqlite)?;
    if found > schema::VERSION {
        return Err(DbError::SchemaTooNew {
            path: path.to_path_buf(),
            found,
            known: schema::VERSION,
        });
    }
    Ok(connection)
}

/// [`configure`], tried again while another connection holds the lock it needs.
///
/// Switching a new file to WAL needs an exclusive lock, and when another connection is doing the
/// same SQLite answers `SQLITE_BUSY` at once instead of calling the busy handler; so several
/// processes opening a new file together must wait for each other here.
fn configure_patiently(connection: &Connection) -> rusqlite::Result<()> {
    let deadline = std::time::Instant::now() + BUSY_TIMEOUT;
    loop {
        match configure(connection) {
            Err(rusqlite::Error::SqliteFailure(error, _))
                if error.code == rusqlite::ErrorCode::DatabaseBusy
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            outcome => return outcome,
        }
    }
}

fn configure(connection: &Connection) -> rusqlite::Result<()> {
    // First, so that switching to WAL waits for a process that is opening the file too.
    connection.busy_timeout(BUSY_TIMEOUT)?;
    // WAL lets readers (projections, `overture events`) run while a writer appends.
    let mode: String =
        connection.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        tracing::warn!(%mode, "SQLite refused WAL journaling; readers will wait for writers");
    }
    // FULL syncs the WAL on every commit: an appended event must survive a power cut.
    connection.pragma_update(None, "synchronous", "FULL")?;
    connection.pragma_update(None, "foreign_keys", "ON")?;
    Ok(())
}
