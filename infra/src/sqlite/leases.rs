//! The bastion lease table in the data directory's SQLite file
//! ([`overture_kit::leases::LeaseBastionRules`]).
//!
//! One row per (rule, deployment): `open` while the deployment holds the rule, `closing` for
//! the last holder while it deletes the rule. Every change reads and writes in one IMMEDIATE
//! transaction, so however many engines share the file, a grant and the last release of the
//! same rule are serialised: either the grant comes first and the release keeps the rule, or
//! the release comes first and the grant is refused until the rule is deleted.

use async_trait::async_trait;
use overture_events::DeploymentId;
use overture_kit::leases::{LeaseBastionRules, LeaseError, Release, RuleKey};
use rusqlite::{params, OptionalExtension};

use super::{Database, DbError};

/// The bastion lease table of the SQLite file.
#[derive(Clone, Debug)]
pub struct SqliteLeases {
    db: Database,
}

impl SqliteLeases {
    /// The lease table in this database.
    pub fn new(db: Database) -> Self {
        Self { db }
    }
}

/// What one transaction found, before it is turned into the port's answer.
enum Found<T> {
    Done(T),
    Closing(String),
}

/// A row names a deployment this version cannot read.
#[derive(Debug, thiserror::Error)]
#[error("the bastion lease table holds a damaged deployment id `{0}`")]
struct DamagedRow(String);

/// A row names a rule this version cannot read.
#[derive(Debug, thiserror::Error)]
#[error("the bastion lease table holds a damaged rule key `{0}`")]
struct DamagedRule(String);

fn unavailable(error: DbError) -> LeaseError {
    LeaseError::Unavailable(Box::new(error))
}

fn parse(id: &str) -> Result<DeploymentId, LeaseError> {
    id.parse()
        .map_err(|_| LeaseError::Refused(Box::new(DamagedRow(id.to_owned()))))
}

fn closing(rule: &RuleKey, by: &str) -> LeaseError {
    match parse(by) {
        Ok(by) => LeaseError::Closing {
            rule: rule.clone(),
            by,
        },
        Err(error) => error,
    }
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn open_holders(tx: &rusqlite::Connection, rule: &str) -> rusqlite::Result<Vec<String>> {
    let mut statement = tx.prepare(
        "SELECT deployment FROM bastion_leases
         WHERE rule = ?1 AND state = 'open' ORDER BY deployment",
    )?;
    let rows = statement.query_map(params![rule], |row| row.get(0))?;
    rows.collect()
}

fn closing_by(tx: &rusqlite::Connection, rule: &str) -> rusqlite::Result<Option<String>> {
    tx.query_row(
        "SELECT deployment FROM bastion_leases WHERE rule = ?1 AND state = 'closing'",
        params![rule],
        |row| row.get(0),
    )
    .optional()
}

#[async_trait]
impl LeaseBastionRules for SqliteLeases {
    async fn acquire(&self, rule: &RuleKey, deployment: DeploymentId) -> Result<(), LeaseError> {
        let (key, holder) = (rule.as_key(), deployment.to_string());
        let found = self
            .db
            .with_connection(move |connection| {
                let tx = connection.savepoint()?;
                if let Some(by) = closing_by(&tx, &key)? {
                    return Ok(Found::Closing(by));
                }
                tx.execute(
                    "INSERT OR IGNORE INTO bastion_leases (rule, deployment, state, since)
                     VALUES (?1, ?2, 'open', ?3)",
                    params![key, holder, now()],
                )?;
                tx.commit()?;
                Ok(Found::Done(()))
            })
            .await
            .map_err(unavailable)?;
        match found {
            Found::Done(()) => Ok(()),
            Found::Closing(by) => Err(closing(rule, &by)),
        }
    }

    async fn release(
        &self,
        rule: &RuleKey,
        deployment: DeploymentId,
    ) -> Result<Release, LeaseError> {
        let (key, holder) = (rule.as_key(), deployment.to_string());
        let found = self
            .db
            .with_connection(move |connection| {
                let tx = connection.savepoint()?;
                tx.execute(
                    "DELETE FROM bastion_leases
                     WHERE rule = ?1 AND deployment = ?2 AND state = 'open'",
                    params![key, holder],
                )?;
                let others = open_holders(&tx, &key)?;
                if !others.is_empty() {
                    tx.commit()?;
                    return Ok(Found::Done(Some(others)));
                }
                match closing_by(&tx, &key)? {
                    Some(by) if by != holder => return Ok(Found::Closing(by)),
                    Some(_) => {}
                    None => {
                        tx.execute(
                            "INSERT INTO bastion_leases (rule, deployment, state, since)
                             VALUES (?1, ?2, 'closing', ?3)",
                            params![key, holder, now()],
                        )?;
                    }
                }
                tx.commit()?;
                Ok(Found::Done(None))
            })
            .await
            .map_err(unavailable)?;
        match found {
            Found::Done(Some(others)) => Ok(Release::Kept(
                others
                    .iter()
                    .map(|id| parse(id))
                    .collect::<Result<_, _>>()?,
            )),
            Found::Done(None) => Ok(Release::Last),
            Found::Closing(by) => Err(closing(rule, &by)),
        }
    }

    async fn closed(&self, rule: &RuleKey, deployment: DeploymentId) -> Result<(), LeaseError> {
        let (key, holder) = (rule.as_key(), deployment.to_string());
        self.db
            .with_connection(move |connection| {
                connection.execute(
                    "DELETE FROM bastion_leases
                     WHERE rule = ?1 AND deployment = ?2 AND state = 'closing'",
                    params![key, holder],
                )
            })
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    async fn holders(&self, rule: &RuleKey) -> Result<Vec<DeploymentId>, LeaseError> {
        let key = rule.as_key();
        let held = self
            .db
            .read(move |connection| open_holders(connection, &key))
            .await
            .map_err(unavailable)?;
        held.iter().map(|id| parse(id)).collect()
    }

    async fn held_by(&self, deployment: DeploymentId) -> Result<Vec<RuleKey>, LeaseError> {
        let holder = deployment.to_string();
        let keys: Vec<String> = self
            .db
            .read(move |connection| {
                let mut statement = connection.prepare(
                    "SELECT rule FROM bastion_leases WHERE deployment = ?1 ORDER BY rule",
                )?;
                let rows = statement.query_map(params![holder], |row| row.get(0))?;
                rows.collect()
            })
            .await
            .map_err(unavailable)?;
        let mut held = keys
            .iter()
            .map(|key| {
                RuleKey::from_key(key)
                    .ok_or_else(|| LeaseError::Refused(Box::new(DamagedRule(key.clone()))))
            })
            .collect::<Result<Vec<_>, _>>()?;
        held.sort();
        Ok(held)
    }
}
