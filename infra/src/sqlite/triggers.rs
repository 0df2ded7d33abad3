//! The trigger ledger in the data directory's SQLite file: which (event, trigger) pairs were
//! claimed, and every decision taken ([`overture_triggers::TriggerLedger`]).
//!
//! A claim is an `INSERT OR IGNORE` of (source, event id, trigger): however many processes
//! receive the same event at once, exactly one of them wins each pair.

use async_trait::async_trait;
use overture_triggers::{Claim, LedgerError, TriggerDecision, TriggerLedger, Verdict};
use rusqlite::params;

use super::{Database, DbError};

/// The trigger tables of the SQLite file.
#[derive(Clone, Debug)]
pub struct SqliteTriggerLedger {
    db: Database,
}

impl SqliteTriggerLedger {
    /// The ledger in this database.
    pub fn new(db: Database) -> Self {
        Self { db }
    }
}

fn unavailable(error: DbError) -> LedgerError {
    LedgerError::Unavailable(Box::new(error))
}

/// A verdict the ledger holds that this version does not know.
#[derive(Debug, thiserror::Error)]
#[error("the trigger ledger holds an unknown decision `{0}`")]
struct UnknownVerdict(String);

#[async_trait]
impl TriggerLedger for SqliteTriggerLedger {
    async fn claim(&self, claim: Claim<'_>, _at: &str) -> Result<bool, LedgerError> {
        let (source, event_id, trigger) = (
            claim.source.to_owned(),
            claim.event_id.to_owned(),
            claim.trigger.to_owned(),
        );
        self.db
            .with_connection(move |connection| {
                let inserted = connection.execute(
                    "INSERT OR IGNORE INTO trigger_claims (source, event_id, trigger)
                     VALUES (?1, ?2, ?3)",
                    params![source, event_id, trigger],
                )?;
                Ok(inserted == 1)
            })
            .await
            .map_err(unavailable)
    }

    async fn release(&self, claim: Claim<'_>) -> Result<(), LedgerError> {
        let (source, event_id, trigger) = (
            claim.source.to_owned(),
            claim.event_id.to_owned(),
            claim.trigger.to_owned(),
        );
        self.db
            .with_connection(move |connection| {
                connection.execute(
                    "DELETE FROM trigger_claims WHERE source = ?1 AND event_id = ?2 AND trigger = ?3",
                    params![source, event_id, trigger],
                )?;
                Ok(())
            })
            .await
            .map_err(unavailable)
    }

    async fn record(&self, decision: &TriggerDecision) -> Result<(), LedgerError> {
        let decision = decision.clone();
        self.db
            .with_connection(move |connection| {
                connection.execute(
                    "INSERT INTO trigger_decisions
                         (at, source, event_id, trigger, decision, deployment, reason)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                    params![
                        decision.at,
                        decision.source,
                        decision.event_id,
                        decision.trigger,
                        decision.decision.as_str(),
                        decision.deployment,
                        decision.reason
                    ],
                )?;
                Ok(())
            })
            .await
            .map_err(unavailable)
    }

    async fn decisions(&self) -> Result<Vec<TriggerDecision>, LedgerError> {
        let rows = self
            .db
            .read(|connection| {
                let mut statement = connection.prepare(
                    "SELECT at, source, event_id, trigger, decision, deployment, reason
                     FROM trigger_decisions ORDER BY seq",
                )?;
                let rows = statement.query_map([], |row| {
                    Ok((
                        row.get::<_, String>(4)?,
                        TriggerDecision {
                            at: row.get(0)?,
                            source: row.get(1)?,
                            event_id: row.get(2)?,
                            trigger: row.get(3)?,
                            decision: Verdict::Refused,
                            deployment: row.get(5)?,
                            reason: row.get(6)?,
                        },
                    ))
                })?;
                rows.collect::<Result<Vec<_>, _>>()
            })
            .await
            .map_err(unavailable)?;
        rows.into_iter()
            .map(|(verdict, mut decision)| {
                decision.decision = Verdict::parse(&verdict)
                    .ok_or_else(|| LedgerError::Failed(Box::new(UnknownVerdict(verdict))))?;
                Ok(decision)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_sqlite_ledger_keeps_the_contract() {
        let dir = tempfile::tempdir().expect("temp dir");
        let ledger = SqliteTriggerLedger::new(
            Database::open(dir.path().join("overture.db"))
                .await
                .expect("open"),
        );
        overture_triggers::contract::ledger_keeps_its_contract(&ledger).await;
    }
}
