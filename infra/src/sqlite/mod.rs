//! Everything Overture keeps on disk, in one SQLite file.
//!
//! - This file: [`Database`], the shared handle to the file (connection settings, the
//!   blocking-task bridge: [`Database::with_connection`] and [`Database::with_derived`] to write,
//!   [`Database::read`] to read, for modules that bring their own SQL), and [`DbError`].
//! - [`writer`]: the one thread that commits a handle's writes, together when they queue up.
//! - [`schema`]: the migrations, keyed on `PRAGMA user_version`; new tables go there.
//! - [`log`]: the append-only event log and the projection checkpoints.
//! - `names`: deployment names, claimed and released with the events that do so.
//! - [`chain`]: the log's hash chains: heads, the one-time sealing of older files, `verify`.
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
//! a busy handler makes the others wait for it instead of failing. Within a process, every write
//! goes through one [`writer::Writer`] thread, which commits the writes that queued up while the
//! last commit synced as one transaction: concurrent deployments share their disk syncs.

pub mod chain;
pub mod deployments;
mod import;
pub mod leases;
pub mod log;
mod names;
pub mod queue;
pub mod read_models;
pub mod schema;
pub mod triggers;
pub mod work;
pub mod writer;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rusqlite::Connection;
use tokio::sync::Notify;

pub use deployments::SqliteDeployments;
pub use leases::SqliteLeases;
pub use log::{EventLog, ExpectedRevision, Fed, Imported, LogError, NewEvent};
pub use overture_kit::esrs_store::EsrsStoreError;
pub use queue::{JobQueue, NewJob, QueueError, Receipt, ReceivedJob};
pub use read_models::{ListFilter, SqliteReadModels};
pub use triggers::SqliteTriggerLedger;
pub use work::{HandedJob, Handoff, Job};
pub use writer::Durability;

use writer::Writer;

/// The SQLite log as an esrs event store.
pub type EsrsDeploymentStore = overture_kit::esrs_store::EsrsDeploymentStore<SqliteDeployments>;

/// How long a statement waits for another connection's write lock before it fails: long, as a
/// hundred processes may share one file on a loaded machine, and waiting beats failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// A cheap-to-clone handle to the SQLite file; clones share one writer and one reader.
#[derive(Clone, Debug)]
pub struct Database {
    /// Every write of this handle goes through its one writer thread (group commit).
    writer: Arc<Writer>,
    /// Idle reading connections: reads run beside the writer, and in WAL mode they see every
    /// committed write and never wait for one being committed.
    readers: Arc<Mutex<Vec<Connection>>>,
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
    /// The file, or its `-wal` or `-shm`, could not be created or set to 0600.
    #[error("cannot make SQLite database {} readable by the engine's user alone (mode 0600): {source}", path.display())]
    NotPrivate {
        /// The database file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The thread that writes to the file could not be started.
    #[error("cannot start the thread writing SQLite database {}: {source}", path.display())]
    WriterNotStarted {
        /// The database file.
        path: PathBuf,
        /// Why the thread did not start.
        #[source]
        source: std::io::Error,
    },
    /// The thread that writes to the file has stopped; the handle cannot write any more.
    #[error("the thread writing SQLite database {} has stopped", path.display())]
    WriterStopped {
        /// The database file.
        path: PathBuf,
    },
    /// The code of a write panicked; that write was rolled back and nothing else.
    #[error("a write to SQLite database {} panicked and was rolled back", path.display())]
    WritePanicked {
        /// The database file.
        path: PathBuf,
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
        let (writing, reader) = tokio::task::spawn_blocking(move || open_blocking(&opening))
            .await
            .map_err(|source| DbError::TaskFailed {
                path: path.to_path_buf(),
                source,
            })??;
        Ok(Self {
            writer: Arc::new(Writer::start(writing, &path)?),
            readers: Arc::new(Mutex::new(vec![reader])),
            appended: Arc::new(Notify::new()),
            path,
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs the write `f` and returns once it is committed and synced to disk: it survives an
    /// OS crash. Writes from several tasks are committed together ([`writer`]).
    ///
    /// `f` runs inside a transaction (each write in a savepoint of its own): it must not begin
    /// or commit one, but may use `connection.savepoint()`. An error or a panic in `f` rolls
    /// back its own changes only.
    pub async fn with_connection<F, T>(&self, f: F) -> Result<T, DbError>
    where
        F: FnOnce(&mut Connection) -> rusqlite::Result<T> + Send + 'static,
        T: Send + 'static,
    {
        self.writer.write(Durability::Synced, f).await
    }

    /// Runs the write `f` and returns once it is committed, without waiting for the disk: an
    /// OS crash may lose it, so only use it for what can be derived again from synced writes.
    pub async fn with_derived<F, T>(&self, f: F) -> Result<T, DbError>
    where
        F: FnOnce(&mut Connection) -> rusqlite::Result<T> + Send + 'static,
        T: Send + 'static,
    {
        self.writer.write(Durability::Derived, f).await
    }

    /// Runs the read `f` on a reading connection; it sees every write committed before it
    /// started.
    ///
    /// Reads run on the calling task, not on a blocking thread: they are indexed lookups that
    /// take microseconds, and the hand-off to a blocking thread and back cost more than the read
    /// itself. Each concurrent read takes a connection of its own from a pool.
    pub async fn read<F, T>(&self, f: F) -> Result<T, DbError>
    where
        F: FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
        T: Send + 'static,
    {
        self.read_now(f)
    }

    fn read_now<F, T>(&self, f: F) -> Result<T, DbError>
    where
        F: FnOnce(&Connection) -> rusqlite::Result<T>,
    {
        let sqlite = |source| DbError::Sqlite {
            path: self.path.to_path_buf(),
            source,
        };
        let idle = self
            .readers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        let connection = match idle {
            Some(connection) => connection,
            None => open_reader(&self.path).map_err(sqlite)?,
        };
        let read = f(&connection).map_err(sqlite);
        self.readers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(connection);
        read
    }

    /// Runs the read `f` on a reading connection in a blocking task, so that the caller's task
    /// goes on meanwhile: for reads of many rows, such as a rebuild's batches.
    pub async fn read_long<F, T>(&self, f: F) -> Result<T, DbError>
    where
        F: FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
        T: Send + 'static,
    {
        let db = self.clone();
        tokio::task::spawn_blocking(move || db.read_now(f))
            .await
            .map_err(|source| DbError::TaskFailed {
                path: self.path.to_path_buf(),
                source,
            })?
    }
}

/// Opens the writing connection (migrating the file) and the reading one.
fn open_blocking(path: &Path) -> Result<(Connection, Connection), DbError> {
    let sqlite = |source| DbError::Sqlite {
        path: path.to_path_buf(),
        source,
    };
    // Every tenant's data is in it. SQLite makes a new file with the umask's mode, and its -wal
    // and -shm with the file's own: made 0600 first, all three are.
    match crate::data_dir::private_file(path) {
        // No folder to make it in: SQLite's own refusal below says so, naming the file.
        Err(source) if source.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => {
            return Err(DbError::NotPrivate {
                path: path.to_path_buf(),
                source,
            })
        }
        Ok(()) => {}
    }
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
    chain::seal_once(&mut connection).map_err(sqlite)?;
    let reader = open_reader(path).map_err(sqlite)?;
    Ok((connection, reader))
}

/// A connection that only reads.
fn open_reader(path: &Path) -> rusqlite::Result<Connection> {
    let reader = Connection::open(path)?;
    reader.busy_handler(Some(wait_for_lock))?;
    reader.pragma_update(None, "query_only", true)?;
    Ok(reader)
}

/// Called by SQLite while another connection holds a lock this one needs, with how many times
/// it was called for this wait; says whether to wait on.
///
/// SQLite's own `busy_timeout` sleeps up to 100 ms between looks, which is longer than most
/// commits of the other processes take: with many processes writing one file, they spent most
/// of their time asleep. This one looks again after 50 µs, doubling to at most 1.6 ms, and
/// gives up after [`BUSY_TIMEOUT`].
fn wait_for_lock(waited: i32) -> bool {
    const FIRST: Duration = Duration::from_micros(50);
    const LONGEST: Duration = Duration::from_micros(1_600);
    let waited = u32::try_from(waited).unwrap_or(0);
    let pause = FIRST.saturating_mul(1 << waited.min(5)).min(LONGEST);
    // The first pauses add up to under 2 × LONGEST; the rest are LONGEST each.
    let looks = BUSY_TIMEOUT.as_micros() / LONGEST.as_micros();
    if u128::from(waited) > looks {
        return false;
    }
    std::thread::sleep(pause);
    true
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
    connection.busy_handler(Some(wait_for_lock))?;
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
