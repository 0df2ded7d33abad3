//! The trigger ledger: which (event, trigger) pairs were claimed, and every decision taken.
//!
//! A claim is an `INSERT OR IGNORE` of (source, event id, trigger) in one IMMEDIATE
//! transaction, which also records the duplicate when the pair was claimed before: however many
//! processes receive the same event at once, exactly one of them wins each pair and deploys.

use rusqlite::{params, TransactionBehavior};
use serde::Serialize;

use super::{Database, DbError};

/// The reason recorded with a duplicate delivery.
pub const DUPLICATE_REASON: &str = "this event was already handled by this trigger";

/// One decision a trigger took about an event, as `overture triggers log` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TriggerDecisionRecord {
    /// When, RFC 3339.
    pub at: String,
    /// The event's source.
    pub source: String,
    /// The event's id.
    pub event_id: String,
    /// The trigger's name.
    pub trigger: String,
    /// `deployed`, `duplicate`, `not-matched` or `refused`.
    pub decision: String,
    /// The deployment it started, when it started one.
    pub deployment: Option<String>,
    /// Why: the condition that failed, the refusal, or what was deployed.
    pub reason: String,
}

/// The trigger tables of the SQLite file.
#[derive(Clone, Debug)]
pub struct TriggerLedger {
    db: Database,
}

impl TriggerLedger {
    /// The ledger in this database.
    pub fn new(db: Database) -> Self {
        Self { db }
    }

    /// Claims the (event, trigger) pair: `true` for the one caller that gets it; every other
    /// gets `false`, and its delivery is recorded as a duplicate in the same transaction.
    pub async fn claim(
        &self,
        source: &str,
        event_id: &str,
        trigger: &str,
        at: &str,
    ) -> Result<bool, DbError> {
        let (source, event_id, trigger, at) = (
            source.to_owned(),
            event_id.to_owned(),
            trigger.to_owned(),
            at.to_owned(),
        );
        self.db
            .with_connection(move |connection| {
                let tx = connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
                let inserted = tx.execute(
                    "INSERT OR IGNORE INTO trigger_claims (source, event_id, trigger)
                     VALUES (?1, ?2, ?3)",
                    params![source, event_id, trigger],
                )?;
                if inserted == 0 {
                    tx.execute(
                        "INSERT INTO trigger_decisions
                             (at, source, event_id, trigger, decision, deployment, reason)
                         VALUES (?1, ?2, ?3, ?4, 'duplicate', NULL, ?5)",
                        params![at, source, event_id, trigger, DUPLICATE_REASON],
                    )?;
                }
                tx.commit()?;
                Ok(inserted == 1)
            })
            .await
    }

    /// Records a decision.
    pub async fn record(&self, record: TriggerDecisionRecord) -> Result<(), DbError> {
        self.db
            .with_connection(move |connection| {
                connection.execute(
                    "INSERT INTO trigger_decisions
                         (at, source, event_id, trigger, decision, deployment, reason)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                    params![
                        record.at,
                        record.source,
                        record.event_id,
                        record.trigger,
                        record.decision,
                        record.deployment,
                        record.reason
                    ],
                )?;
                Ok(())
            })
            .await
    }

    /// Every decision, oldest first.
    pub async fn list(&self) -> Result<Vec<TriggerDecisionRecord>, DbError> {
        self.db
            .with_connection(|connection| {
                let mut statement = connection.prepare(
                    "SELECT at, source, event_id, trigger, decision, deployment, reason
                     FROM trigger_decisions ORDER BY seq",
                )?;
                let rows = statement.query_map([], |row| {
                    Ok(TriggerDecisionRecord {
                        at: row.get(0)?,
                        source: row.get(1)?,
                        event_id: row.get(2)?,
                        trigger: row.get(3)?,
                        decision: row.get(4)?,
                        deployment: row.get(5)?,
                        reason: row.get(6)?,
                    })
                })?;
                rows.collect()
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_pair_is_claimed_once_and_the_duplicate_recorded() {
        let dir = tempfile::tempdir().expect("temp dir");
        let ledger = TriggerLedger::new(
            Database::open(dir.path().join("overture.db"))
                .await
                .expect("open"),
        );
        let at = "2026-01-01T00:00:00Z";
        assert!(ledger.claim("s", "e", "t", at).await.expect("claim"));
        assert!(!ledger.claim("s", "e", "t", at).await.expect("claim"));
        assert!(ledger.claim("s", "e", "other", at).await.expect("claim"));
        let decisions = ledger.list().await.expect("list");
        assert_eq!(decisions.len(), 1);
        assert_eq!(decisions[0].decision, "duplicate");
        assert_eq!(decisions[0].trigger, "t");
    }
}
