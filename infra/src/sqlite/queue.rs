//! The durable job queue: step jobs and timers, with the semantics of SQS.
//!
//! A job waits until it is due, is received by one worker at a time for a visibility period
//! (extended by heartbeats), and comes back if its worker neither acks nor extends in time.
//! Every call is handed the time instead of reading a clock, so tests drive time directly.
//!
//! Beside its own calls (handed the time, for the engine and its tests), it implements the
//! queue port `overture_kit::queue` on the system clock, and keeps that port's contract with
//! more to spare: it de-duplicates by key, and it holds a job back as long as asked.
//!
//! Its writes are committed without waiting for the disk ([`super::Durability::Derived`]): every
//! job is derived from the log, where the events that call for it are synced. An OS crash may
//! lose the last jobs queued (`overture resume` queues again what every unfinished deployment's
//! state calls for), or an ack (the attempt is received again, and its recorded outcome makes it
//! a no-op).
//!
//! Instants are stored as unix milliseconds. Instants before which a job must not be received
//! are rounded up and `now` is rounded down, so rounding can delay a job by under a millisecond
//! but never hand it out early.

use overture_events::{DeploymentId, Timestamp};
use overture_kit::queue::{
    Delivery, Job, QueueError as PortError, Receipt as PortReceipt, ReceiveJobs, SendJobs,
};
use rusqlite::{params, OptionalExtension};

use super::{Database, DbError};

/// A job to enqueue.
#[derive(Clone, Debug, PartialEq)]
pub struct NewJob {
    /// Unique among queued jobs; enqueueing a key already queued does nothing.
    pub key: String,
    /// The deployment the job belongs to.
    pub deployment: DeploymentId,
    /// What the worker needs, as JSON.
    pub body: serde_json::Value,
    /// The job is not received before this instant.
    pub due_at: Timestamp,
}

impl From<Job> for NewJob {
    fn from(job: Job) -> Self {
        Self {
            key: job.key,
            deployment: job.deployment,
            body: job.body,
            due_at: job.due_at,
        }
    }
}

/// A job handed to a worker, invisible to others until its lease ends.
#[derive(Clone, Debug, PartialEq)]
pub struct ReceivedJob {
    /// The job's key.
    pub key: String,
    /// The deployment the job belongs to.
    pub deployment: DeploymentId,
    /// The job's body.
    pub body: serde_json::Value,
    /// When the job was due.
    pub due_at: Timestamp,
    /// How many times the job has been received, this time included.
    pub receive_count: u32,
    /// Proof of this receipt, for [`JobQueue::ack`] and [`JobQueue::extend`].
    pub receipt: Receipt,
}

/// Identifies one receipt of one job: it goes stale once the job is received again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Receipt {
    job: i64,
    receive_count: u32,
}

/// Why the queue refused or failed a call.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    /// The job was acked, or received again after this receipt's lease ended.
    #[error("the receipt is stale: its job was acked or received again")]
    StaleReceipt,
    /// A stored job cannot be read back.
    #[error("job `{key}` cannot be read: {reason}")]
    Corrupt {
        /// The job's key.
        key: String,
        /// What was wrong with it.
        reason: String,
    },
    /// The database failed.
    #[error(transparent)]
    Database(#[from] DbError),
}

impl QueueError {
    /// Whether trying again later may succeed: the database may come back, a stale receipt or
    /// a corrupt job will not.
    pub fn is_retryable(&self) -> bool {
        matches!(self, QueueError::Database(_))
    }
}

/// The durable job queue, on a [`Database`].
#[derive(Clone, Debug)]
pub struct JobQueue {
    db: Database,
}

impl JobQueue {
    /// A queue on this database.
    pub fn new(db: Database) -> Self {
        Self { db }
    }

    /// Queues a job unless one with its key is queued already; returns whether it was queued.
    pub async fn enqueue(&self, job: NewJob) -> Result<bool, QueueError> {
        Ok(self.enqueue_all(vec![job]).await? == 1)
    }

    /// Queues each job whose key is not queued yet, in one transaction; returns how many were.
    /// A batch whose jobs are all queued already writes nothing.
    pub async fn enqueue_all(&self, jobs: Vec<NewJob>) -> Result<usize, QueueError> {
        let (inserted, _) = self
            .db
            .with_derived(move |connection| queue_new(connection, jobs, None))
            .await?;
        Ok(inserted)
    }

    /// Queues each job whose key is not queued yet, as [`JobQueue::enqueue_all`] does, and
    /// receives at once up to `room` of those due at `now`, hidden for `visibility`: one write
    /// for a worker that queues jobs it will run itself, instead of queueing and then receiving.
    ///
    /// The jobs received are returned in the order given; the rest wait to be received.
    pub async fn enqueue_received(
        &self,
        jobs: Vec<NewJob>,
        room: usize,
        now: Timestamp,
        visibility: std::time::Duration,
    ) -> Result<Vec<ReceivedJob>, QueueError> {
        let taking = Taking {
            room,
            now,
            hidden_until: not_before_ms(now).saturating_add(duration_ms(visibility)),
        };
        let (_, received) = self
            .db
            .with_derived(move |connection| queue_new(connection, jobs, Some(taking)))
            .await?;
        Ok(received)
    }

    /// Takes the due, visible job (of the deployments `only` names, if given) with the earliest
    /// due time and hides it for `visibility`.
    pub async fn receive(
        &self,
        now: Timestamp,
        visibility: std::time::Duration,
        only: Option<&[DeploymentId]>,
    ) -> Result<Option<ReceivedJob>, QueueError> {
        Ok(self.receive_up_to(1, now, visibility, only).await?.pop())
    }

    /// Takes up to `limit` due, visible jobs (of the deployments `only` names, if given), those
    /// due earliest first, and hides them for `visibility`: one write, however many it takes.
    pub async fn receive_up_to(
        &self,
        limit: usize,
        now: Timestamp,
        visibility: std::time::Duration,
        only: Option<&[DeploymentId]>,
    ) -> Result<Vec<ReceivedJob>, QueueError> {
        let only = only.map(deployments_json);
        let now_ms = now_ms(now);
        let visible_at = not_before_ms(now).saturating_add(duration_ms(visibility));
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut received = self
            .db
            .with_derived(move |connection| {
                // One statement, so picking and hiding the jobs is atomic across processes.
                let mut update = connection.prepare_cached(
                    "UPDATE jobs SET visible_at = ?2, receive_count = receive_count + 1
                     WHERE id IN (
                         SELECT id FROM jobs
                         WHERE due_at <= ?1 AND visible_at <= ?1
                           AND (?3 IS NULL OR deployment IN (SELECT value FROM json_each(?3)))
                         ORDER BY due_at, id
                         LIMIT ?4
                     )
                     RETURNING id, key, deployment, body, receive_count, due_at",
                )?;
                let rows = update.query_map(params![now_ms, visible_at, only, limit], |row| {
                    Ok((
                        row.get::<_, i64>(0)?,
                        row.get::<_, String>(1)?,
                        row.get::<_, String>(2)?,
                        row.get::<_, String>(3)?,
                        row.get::<_, u32>(4)?,
                        row.get::<_, i64>(5)?,
                    ))
                })?;
                rows.collect::<rusqlite::Result<Vec<_>>>()
            })
            .await?;
        // RETURNING gives the rows in no particular order.
        received.sort_by_key(|&(job, .., due_at)| (due_at, job));
        received
            .into_iter()
            .map(|(job, key, deployment, body, receive_count, due_at)| {
                let corrupt = |reason: String| QueueError::Corrupt {
                    key: key.clone(),
                    reason,
                };
                let deployment = deployment
                    .parse()
                    .map_err(|error| corrupt(format!("bad deployment: {error}")))?;
                let body = serde_json::from_str(&body)
                    .map_err(|error| corrupt(format!("body is not JSON: {error}")))?;
                let due_at = Timestamp::from_timestamp_millis(due_at).ok_or_else(|| {
                    corrupt(format!("due at {due_at} ms, not a representable instant"))
                })?;
                Ok(ReceivedJob {
                    key,
                    deployment,
                    body,
                    due_at,
                    receive_count,
                    receipt: Receipt { job, receive_count },
                })
            })
            .collect()
    }

    /// Keeps the job hidden until `until` (a heartbeat from the worker holding `receipt`).
    pub async fn extend(&self, receipt: &Receipt, until: Timestamp) -> Result<(), QueueError> {
        let Receipt { job, receive_count } = *receipt;
        let updated = self
            .db
            .with_derived(move |connection| {
                connection
                    .prepare_cached(
                        "UPDATE jobs SET visible_at = ?3 WHERE id = ?1 AND receive_count = ?2",
                    )?
                    .execute(params![job, receive_count, not_before_ms(until)])
            })
            .await?;
        fresh_if_one(updated)
    }

    /// Deletes the job: its work is done.
    pub async fn ack(&self, receipt: &Receipt) -> Result<(), QueueError> {
        let Receipt { job, receive_count } = *receipt;
        let deleted = self
            .db
            .with_derived(move |connection| {
                connection
                    .prepare_cached("DELETE FROM jobs WHERE id = ?1 AND receive_count = ?2")?
                    .execute(params![job, receive_count])
            })
            .await?;
        fresh_if_one(deleted)
    }

    /// Deletes the jobs of these receipts, in one write; returns how many were still fresh.
    pub async fn ack_all(&self, receipts: Vec<Receipt>) -> Result<usize, QueueError> {
        let deleted = self
            .db
            .with_derived(move |connection| {
                let mut delete = connection
                    .prepare_cached("DELETE FROM jobs WHERE id = ?1 AND receive_count = ?2")?;
                let mut deleted = 0;
                for Receipt { job, receive_count } in receipts {
                    deleted += delete.execute(params![job, receive_count])?;
                }
                Ok(deleted)
            })
            .await?;
        Ok(deleted)
    }

    /// Makes every job in flight receivable at `now`; only safe when no other worker is alive.
    pub async fn release_in_flight(&self, now: Timestamp) -> Result<u64, QueueError> {
        let now_ms = now_ms(now);
        let released = self
            .db
            .with_derived(move |connection| {
                connection
                    .prepare_cached("UPDATE jobs SET visible_at = ?1 WHERE visible_at > ?1")?
                    .execute([now_ms])
            })
            .await?;
        Ok(u64::try_from(released).unwrap_or(u64::MAX))
    }

    /// The earliest instant at which some job (of the deployments `only` names, if given) can
    /// be received.
    pub async fn next_wake(
        &self,
        only: Option<&[DeploymentId]>,
    ) -> Result<Option<Timestamp>, QueueError> {
        let only = only.map(deployments_json);
        let next = self
            .db
            .read(move |connection| {
                connection
                    // A job wakes at the later of its due time and its lease's end: the first
                    // due of those not in flight, or the first lease to end, each read off an
                    // index rather than computed for every job. Jobs never received (lease 0)
                    // are most of the queue, so the leases are read from after them.
                    .prepare_cached(
                        "SELECT key, wake FROM (
                             SELECT * FROM (
                                 SELECT key, due_at AS wake FROM jobs
                                 WHERE visible_at <= due_at
                                   AND (?1 IS NULL OR deployment IN (SELECT value FROM json_each(?1)))
                                 ORDER BY due_at LIMIT 1)
                             UNION ALL
                             SELECT * FROM (
                                 SELECT key, visible_at AS wake FROM jobs
                                 WHERE visible_at > 0 AND visible_at > due_at
                                   AND (?1 IS NULL OR deployment IN (SELECT value FROM json_each(?1)))
                                 ORDER BY visible_at LIMIT 1)
                         )
                         ORDER BY wake LIMIT 1",
                    )?
                    .query_row([only], |row| {
                        Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?))
                    })
                    .optional()
            })
            .await?;
        next.map(|(key, wake)| {
            Timestamp::from_timestamp_millis(wake).ok_or_else(|| QueueError::Corrupt {
                key,
                reason: format!("{wake} ms is not a representable instant"),
            })
        })
        .transpose()
    }

    /// How many jobs (of `only`, if given) are queued, in flight or not.
    pub async fn pending(&self, only: Option<DeploymentId>) -> Result<u64, QueueError> {
        let count = self
            .db
            .read(move |connection| {
                connection
                    .prepare_cached(
                        "SELECT COUNT(*) FROM jobs WHERE ?1 IS NULL OR deployment = ?1",
                    )?
                    .query_row([only.map(|id| id.to_string())], |row| row.get(0))
            })
            .await?;
        Ok(count)
    }
}

/// Which of the jobs queued by [`queue_new`] are received at once, by whom.
struct Taking {
    /// How many may be received.
    room: usize,
    /// The jobs due by this instant may be.
    now: Timestamp,
    /// Their lease's end, in unix ms.
    hidden_until: i64,
}

/// Inserts each job whose key is not queued yet, received at once as `taking` allows; returns
/// how many were inserted and those received, in the order given.
///
/// Keys are looked up before inserting: with `AUTOINCREMENT`, even an insert that does nothing
/// rewrites `sqlite_sequence`, and that would make every re-queued job a commit with a disk sync.
/// A batch whose jobs are all queued already writes nothing.
fn queue_new(
    connection: &mut rusqlite::Connection,
    jobs: Vec<NewJob>,
    taking: Option<Taking>,
) -> rusqlite::Result<(usize, Vec<ReceivedJob>)> {
    let tx = connection.savepoint()?;
    let mut inserted = 0;
    let mut received = Vec::new();
    {
        let mut queued = tx.prepare_cached("SELECT EXISTS (SELECT 1 FROM jobs WHERE key = ?1)")?;
        let mut insert = tx.prepare_cached(
            "INSERT INTO jobs (key, deployment, body, due_at, visible_at, receive_count)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6) RETURNING id",
        )?;
        for job in jobs {
            if queued.query_row([&job.key], |row| row.get::<_, bool>(0))? {
                continue;
            }
            // Due to the instant, not to the stored millisecond, which is rounded up: a job
            // scheduled a few microseconds ago is due, and one due at this millisecond but
            // after `now` is not.
            let hidden_until = taking
                .as_ref()
                .filter(|taking| received.len() < taking.room && job.due_at <= taking.now)
                .map(|taking| taking.hidden_until);
            let (visible_at, receive_count) = hidden_until.map_or((0, 0), |until| (until, 1));
            let id: i64 = insert.query_row(
                params![
                    job.key,
                    job.deployment.to_string(),
                    job.body.to_string(),
                    not_before_ms(job.due_at),
                    visible_at,
                    receive_count,
                ],
                |row| row.get(0),
            )?;
            inserted += 1;
            if hidden_until.is_some() {
                received.push(ReceivedJob {
                    key: job.key,
                    deployment: job.deployment,
                    body: job.body,
                    due_at: job.due_at,
                    receive_count: 1,
                    receipt: Receipt {
                        job: id,
                        receive_count: 1,
                    },
                });
            }
        }
    }
    tx.commit()?;
    Ok((inserted, received))
}

/// Deployment ids as a JSON array, for `IN (SELECT value FROM json_each(?))`.
fn deployments_json(ids: &[DeploymentId]) -> String {
    serde_json::Value::from(ids.iter().map(ToString::to_string).collect::<Vec<_>>()).to_string()
}

/// How often a receive that waits looks again: a job sent by another process is seen only by
/// looking.
const LONG_POLL_STEP: std::time::Duration = std::time::Duration::from_millis(50);

#[async_trait::async_trait]
impl SendJobs for JobQueue {
    fn max_delay(&self) -> Option<std::time::Duration> {
        None
    }

    async fn send(&self, jobs: Vec<Job>) -> Result<(), PortError> {
        let jobs = jobs.into_iter().map(NewJob::from).collect();
        self.enqueue_all(jobs).await.map_err(port_error)?;
        Ok(())
    }
}

#[async_trait::async_trait]
impl ReceiveJobs for JobQueue {
    async fn receive(
        &self,
        visibility: std::time::Duration,
        wait: std::time::Duration,
    ) -> Result<Option<Delivery>, PortError> {
        let deadline = std::time::Instant::now() + wait;
        loop {
            if let Some(job) = JobQueue::receive(self, now(), visibility, None)
                .await
                .map_err(port_error)?
            {
                return Ok(Some(Delivery {
                    job: Job {
                        key: job.key,
                        deployment: job.deployment,
                        body: job.body,
                        due_at: job.due_at,
                    },
                    receive_count: job.receive_count,
                    receipt: PortReceipt::new(format!(
                        "{}:{}",
                        job.receipt.job, job.receipt.receive_count
                    )),
                }));
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            let next = self.next_wake(None).await.map_err(port_error)?;
            let until_next = next
                .and_then(|at| (at - now()).to_std().ok())
                .unwrap_or(LONG_POLL_STEP);
            tokio::time::sleep(left.min(until_next).min(LONG_POLL_STEP)).await;
        }
    }

    async fn extend(
        &self,
        receipt: &PortReceipt,
        visibility: std::time::Duration,
    ) -> Result<(), PortError> {
        let until = chrono::TimeDelta::from_std(visibility)
            .ok()
            .and_then(|visibility| now().checked_add_signed(visibility))
            .unwrap_or(Timestamp::MAX_UTC);
        JobQueue::extend(self, &own_receipt(receipt)?, until)
            .await
            .map_err(port_error)
    }

    async fn ack(&self, receipt: &PortReceipt) -> Result<(), PortError> {
        JobQueue::ack(self, &own_receipt(receipt)?)
            .await
            .map_err(port_error)
    }

    /// This queue holds a job back as long as asked, so nothing comes early but a job released
    /// by `overture resume`: it is hidden until due, which spends no new row.
    async fn requeue(&self, delivery: &Delivery) -> Result<(), PortError> {
        JobQueue::extend(self, &own_receipt(&delivery.receipt)?, delivery.job.due_at)
            .await
            .map_err(port_error)
    }
}

fn now() -> Timestamp {
    chrono::Utc::now()
}

/// A receipt of the port back as this queue's own.
fn own_receipt(receipt: &PortReceipt) -> Result<Receipt, PortError> {
    let parsed = receipt.handle().split_once(':').and_then(|(job, count)| {
        Some(Receipt {
            job: job.parse().ok()?,
            receive_count: count.parse().ok()?,
        })
    });
    parsed.ok_or_else(|| PortError::Refused(Box::new(NotOurReceipt)))
}

/// A receipt handed back was not made by this queue.
#[derive(Debug, thiserror::Error)]
#[error("the receipt was not made by the SQLite queue")]
struct NotOurReceipt;

fn port_error(error: QueueError) -> PortError {
    match error {
        QueueError::StaleReceipt => PortError::StaleReceipt,
        QueueError::Corrupt { .. } => PortError::Refused(Box::new(error)),
        QueueError::Database(_) => PortError::Unavailable(Box::new(error)),
    }
}

fn fresh_if_one(rows: usize) -> Result<(), QueueError> {
    if rows == 1 {
        Ok(())
    } else {
        Err(QueueError::StaleReceipt)
    }
}

/// `at` in unix ms, rounded down: the present.
fn now_ms(at: Timestamp) -> i64 {
    at.timestamp_millis()
}

/// `at` in unix ms, rounded up: an instant before which something must not happen.
fn not_before_ms(at: Timestamp) -> i64 {
    let floor = at.timestamp_millis();
    let below_a_millisecond = at.timestamp_subsec_nanos() % 1_000_000;
    if below_a_millisecond == 0 {
        floor
    } else {
        floor.saturating_add(1)
    }
}

/// `duration` in ms, rounded up.
fn duration_ms(duration: std::time::Duration) -> i64 {
    i64::try_from(duration.as_nanos().div_ceil(1_000_000)).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_never_lets_a_job_out_early() {
        let at = Timestamp::from_timestamp(1_700_000_000, 1_500_000).expect("in range");
        assert_eq!(now_ms(at), 1_700_000_000_001);
        assert_eq!(not_before_ms(at), 1_700_000_000_002);
        let whole = Timestamp::from_timestamp_millis(1_700_000_000_001).expect("in range");
        assert_eq!(not_before_ms(whole), now_ms(whole));
        assert_eq!(duration_ms(std::time::Duration::from_micros(1_001)), 2);
    }
}
