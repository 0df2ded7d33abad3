//! The one thread that writes to the database file, committing writes that arrive together as
//! one transaction (group commit).
//!
//! SQLite lets one writer commit at a time, and a durable commit costs an fsync. Writes queued
//! while a commit is syncing are therefore committed together by the next one: under load every
//! concurrent deployment shares each fsync instead of waiting in line for its own. Each write
//! runs in a savepoint of its own, so one that fails or panics is rolled back alone, and a
//! caller hears back only once its write is committed (or, for [`Durability::Derived`], once it
//! is visible to every reader).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;

use rusqlite::Connection;
use tokio::sync::oneshot;

use super::DbError;

/// How many queued writes one transaction takes at most, so a flood of writes still commits
/// in bounded steps.
const MAX_GROUP: usize = 512;

/// What a write must survive once its caller hears it is done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// An OS crash or a power cut: the commit is synced to disk first (`synchronous=FULL`).
    /// Events are written so.
    Synced,
    /// A crash of the process, not of the OS: what is lost is re-derived from synced writes
    /// (job queue entries from the deployments' states, read models from the log).
    Derived,
}

/// A write waiting for the writer thread: it runs inside the group's transaction (or is given
/// no connection when the group could not begin) and hands back how to answer its caller once
/// the group is committed.
type Work = Box<dyn FnOnce(Option<&mut Connection>) -> Reply + Send>;

/// Answers one caller: with its write's own result, or with why its group was not committed.
type Reply = Box<dyn FnOnce(Option<&rusqlite::Error>) + Send>;

struct Write {
    durability: Durability,
    work: Work,
}

/// The handle to the writer thread; dropping the last one lets the thread finish and close the
/// connection.
#[derive(Debug)]
pub struct Writer {
    queue: Option<mpsc::Sender<Write>>,
    thread: Option<JoinHandle<()>>,
    path: PathBuf,
    groups: Arc<AtomicU64>,
}

impl Writer {
    /// Starts the thread that owns `connection` and runs every write on it.
    pub fn start(connection: Connection, path: &Path) -> Result<Self, DbError> {
        let (queue, writes) = mpsc::channel();
        let groups = Arc::new(AtomicU64::new(0));
        let committed = Arc::clone(&groups);
        let thread = std::thread::Builder::new()
            .name("overture-sqlite-writer".into())
            .spawn(move || write_groups(connection, &writes, &committed))
            .map_err(|source| DbError::WriterNotStarted {
                path: path.to_path_buf(),
                source,
            })?;
        Ok(Self {
            queue: Some(queue),
            thread: Some(thread),
            path: path.to_path_buf(),
            groups,
        })
    }

    /// How many transactions this writer has committed: with [`Writer::write`]s counted by
    /// their callers, how many writes share a commit.
    pub fn groups_committed(&self) -> u64 {
        self.groups.load(Ordering::Relaxed)
    }

    /// Runs `f` in the next group's transaction and returns its result once that group is
    /// committed with `durability`. `f` must not begin or commit a transaction itself; it may
    /// use savepoints.
    pub async fn write<F, T>(&self, durability: Durability, f: F) -> Result<T, DbError>
    where
        F: FnOnce(&mut Connection) -> rusqlite::Result<T> + Send + 'static,
        T: Send + 'static,
    {
        let (answer, answered) = oneshot::channel::<Result<T, DbError>>();
        let path = self.path.clone();
        let work: Work = Box::new(move |connection| {
            let outcome = match connection {
                Some(connection) => run_in_savepoint(connection, f),
                None => Err(Failed::NotRun),
            };
            Box::new(move |group_failed: Option<&rusqlite::Error>| {
                let result = match (group_failed, outcome) {
                    (Some(failed), _) => Err(DbError::Sqlite {
                        path,
                        source: copy_error(failed),
                    }),
                    (None, Ok(value)) => Ok(value),
                    (None, Err(Failed::Sqlite(source))) => Err(DbError::Sqlite { path, source }),
                    (None, Err(Failed::Panicked)) => Err(DbError::WritePanicked { path }),
                    // Only a failed group leaves a write unrun, and that is answered above.
                    (None, Err(Failed::NotRun)) => Err(DbError::WriterStopped { path }),
                };
                // The caller may have stopped waiting; its write stands all the same.
                let _ = answer.send(result);
            })
        });
        let stopped = || DbError::WriterStopped {
            path: self.path.clone(),
        };
        self.queue
            .as_ref()
            .ok_or_else(stopped)?
            .send(Write { durability, work })
            .map_err(|_| stopped())?;
        answered.await.map_err(|_| stopped())?
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        // Closing the queue ends the thread once it has committed what is queued.
        drop(self.queue.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

enum Failed {
    Sqlite(rusqlite::Error),
    Panicked,
    NotRun,
}

/// The same SQLite error again, for each caller whose write was in a group that failed.
fn copy_error(error: &rusqlite::Error) -> rusqlite::Error {
    match error {
        rusqlite::Error::SqliteFailure(code, message) => {
            rusqlite::Error::SqliteFailure(*code, message.clone())
        }
        other => rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ERROR),
            Some(other.to_string()),
        ),
    }
}

/// Runs one write in a savepoint of its own, so that its failure undoes only its own changes.
fn run_in_savepoint<F, T>(connection: &mut Connection, f: F) -> Result<T, Failed>
where
    F: FnOnce(&mut Connection) -> rusqlite::Result<T>,
{
    connection
        .execute_batch("SAVEPOINT write")
        .map_err(Failed::Sqlite)?;
    let outcome = match catch_unwind(AssertUnwindSafe(|| f(connection))) {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err(Failed::Sqlite(error)),
        Err(_) => Err(Failed::Panicked),
    };
    let end = if outcome.is_ok() {
        "RELEASE write"
    } else {
        "ROLLBACK TO write; RELEASE write"
    };
    match connection.execute_batch(end) {
        Ok(()) => outcome,
        Err(error) => Err(Failed::Sqlite(error)),
    }
}

/// The writer thread: takes every write queued so far, commits them as one transaction, answers
/// their callers, and starts over until the queue is closed.
fn write_groups(mut connection: Connection, writes: &mpsc::Receiver<Write>, groups: &AtomicU64) {
    let mut synced_now = true;
    while let Ok(first) = writes.recv() {
        let mut group = vec![first];
        while group.len() < MAX_GROUP {
            match writes.try_recv() {
                Ok(write) => group.push(write),
                Err(_) => break,
            }
        }
        let synced = group.iter().any(|w| w.durability == Durability::Synced);
        let (replies, failed) = match set_synchronous(&connection, synced, &mut synced_now) {
            Ok(()) => commit_group(&mut connection, group),
            Err(error) => (unrun(group), Some(error)),
        };
        if failed.is_none() {
            groups.fetch_add(1, Ordering::Relaxed);
        }
        for reply in replies {
            reply(failed.as_ref());
        }
    }
}

/// Syncs the WAL on this group's commit only when one of its writes must survive an OS crash.
fn set_synchronous(
    connection: &Connection,
    synced: bool,
    synced_now: &mut bool,
) -> rusqlite::Result<()> {
    if synced != *synced_now {
        let level = if synced { "FULL" } else { "NORMAL" };
        connection.pragma_update(None, "synchronous", level)?;
        *synced_now = synced;
    }
    Ok(())
}

/// Runs the group's writes in one transaction; the error, if any, is the whole group's.
fn commit_group(
    connection: &mut Connection,
    group: Vec<Write>,
) -> (Vec<Reply>, Option<rusqlite::Error>) {
    // IMMEDIATE takes the write lock first: other processes writing the same file wait for it
    // (busy_timeout) instead of failing half-way through the group.
    if let Err(error) = connection.execute_batch("BEGIN IMMEDIATE") {
        return (unrun(group), Some(error));
    }
    let replies: Vec<Reply> = group
        .into_iter()
        .map(|write| (write.work)(Some(&mut *connection)))
        .collect();
    match connection.execute_batch("COMMIT") {
        Ok(()) => (replies, None),
        Err(error) => {
            let _ = connection.execute_batch("ROLLBACK");
            (replies, Some(error))
        }
    }
}

/// The replies of writes that never ran.
fn unrun(group: Vec<Write>) -> Vec<Reply> {
    group.into_iter().map(|write| (write.work)(None)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writer() -> (Writer, tempfile::TempDir) {
        let dir = tempfile::tempdir().expect("temporary directory");
        let path = dir.path().join("w.db");
        let connection = Connection::open(&path).expect("opened");
        connection
            .execute_batch("PRAGMA journal_mode = WAL; CREATE TABLE t (n INTEGER PRIMARY KEY)")
            .expect("table");
        (Writer::start(connection, &path).expect("started"), dir)
    }

    /// Holds the writer thread inside a write until the returned sender is dropped or sent to,
    /// so that the writes queued meanwhile all go into the next group.
    async fn hold(writer: &Arc<Writer>) -> std::sync::mpsc::Sender<()> {
        let (release, released) = std::sync::mpsc::channel::<()>();
        let (holding, held) = oneshot::channel();
        let writer = Arc::clone(writer);
        tokio::spawn(async move {
            let holding_write = move |_: &mut Connection| {
                let _ = holding.send(());
                let _ = released.recv();
                Ok(())
            };
            let _ = writer.write(Durability::Derived, holding_write).await;
        });
        held.await.expect("the writer runs the holding write");
        release
    }

    fn insert(n: i64) -> impl FnOnce(&mut Connection) -> rusqlite::Result<i64> + Send {
        move |c| c.execute("INSERT INTO t (n) VALUES (?1)", [n]).map(|_| n)
    }

    type TestWrite<T> = Box<dyn FnOnce(&mut Connection) -> rusqlite::Result<T> + Send>;

    // The writes are started, then the current-thread runtime polls each once (queueing it)
    // before the held write is released.
    async fn queued<T: Send + 'static>(
        writer: &Arc<Writer>,
        writes: Vec<TestWrite<T>>,
    ) -> Vec<Result<T, DbError>> {
        let release = hold(writer).await;
        let handles: Vec<_> = writes
            .into_iter()
            .map(|f| {
                let writer = Arc::clone(writer);
                tokio::spawn(async move { writer.write(Durability::Synced, f).await })
            })
            .collect();
        tokio::task::yield_now().await;
        drop(release);
        let mut results = Vec::new();
        for handle in handles {
            results.push(handle.await.expect("write task"));
        }
        results
    }

    #[tokio::test(flavor = "current_thread")]
    async fn writes_queued_during_a_commit_share_the_next_one() {
        let (writer, _dir) = writer();
        let writer = Arc::new(writer);
        let before = writer.groups_committed();
        let results = queued(
            &writer,
            vec![
                Box::new(insert(1)),
                Box::new(insert(2)),
                Box::new(insert(3)),
            ],
        )
        .await;
        assert!(results.iter().all(Result::is_ok), "{results:?}");
        // One group for the held write, one for the three queued behind it.
        assert_eq!(writer.groups_committed() - before, 2);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_failing_or_panicking_write_is_rolled_back_alone() {
        let (writer, _dir) = writer();
        let writer = Arc::new(writer);
        let results = queued(
            &writer,
            vec![
                Box::new(insert(1)),
                Box::new(|c: &mut Connection| {
                    insert(2)(c)?;
                    c.execute("INSERT INTO nowhere VALUES (1)", []).map(|_| 2)
                }),
                Box::new(|c: &mut Connection| {
                    insert(3)(c)?;
                    panic!("a write that panics half-way")
                }),
                Box::new(insert(4)),
            ],
        )
        .await;
        assert!(
            matches!(results[1], Err(DbError::Sqlite { .. })),
            "{results:?}"
        );
        assert!(
            matches!(results[2], Err(DbError::WritePanicked { .. })),
            "{results:?}"
        );
        let kept: Vec<i64> = writer
            .write(Durability::Derived, |c| {
                let mut select = c.prepare("SELECT n FROM t ORDER BY n")?;
                let rows = select.query_map([], |row| row.get(0))?;
                rows.collect()
            })
            .await
            .expect("read back");
        assert_eq!(kept, vec![1, 4]);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_group_syncs_its_commit_only_when_one_of_its_writes_must_survive_an_os_crash() {
        let (writer, _dir) = writer();
        let level = |c: &mut Connection| c.pragma_query_value(None, "synchronous", |r| r.get(0));
        let derived: i64 = writer
            .write(Durability::Derived, level)
            .await
            .expect("derived");
        let synced: i64 = writer
            .write(Durability::Synced, level)
            .await
            .expect("synced");
        // SQLite's numbers: 1 is NORMAL (no sync on commit in WAL mode), 2 is FULL.
        assert_eq!((derived, synced), (1, 2));
    }
}
