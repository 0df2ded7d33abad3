//! The bastion lease table on DynamoDB ([`DynamoLeases`], the serverless form's
//! [`LeaseBastionRules`]), keeping the same contract as the SQLite table
//! (`overture_kit::leases_contract`).
//!
//! One partition per rule (its [`RuleKey::as_key`]): an item per holder (`holder#<deployment>`)
//! and one head item (`#rule`) holding the number of open leases (`holders`) and, while the last
//! holder deletes the rule, who does (`closing`). Every change writes the head item in the same
//! `TransactWriteItems` as the holder's item, on a condition on the head: a grant only while
//! nothing closes, the last release only while the count is the one it read. So a grant and the
//! last release of one rule are serialised on the head item: the loser's transaction is
//! cancelled, and it reads again and decides again.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::error::{DisplayErrorContext, SdkError};
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{AttributeValue, Delete, Put, TransactWriteItem, Update};
use overture_events::DeploymentId;
use overture_kit::leases::{LeaseBastionRules, LeaseError, Release, RuleKey};

use crate::dynamodb::DynamoError;
use crate::s3::passes;

const PARTITION: &str = "partition";
const SORT: &str = "sort";
/// The sort key of a rule's head item.
const HEAD: &str = "#rule";
/// The prefix of a holder's sort key.
const HOLDER: &str = "holder#";
/// How often a change is decided again after another writer changed the rule first.
const CONFLICT_RETRIES: usize = 50;

/// The bastion lease table in DynamoDB.
#[derive(Clone, Debug)]
pub struct DynamoLeases {
    client: aws_sdk_dynamodb::Client,
    table: String,
}

/// A rule's head item, as read.
#[derive(Debug, Default)]
struct Head {
    holders: u64,
    closing: Option<String>,
}

/// What one try of a change came to.
enum Tried<T> {
    Done(T),
    /// Another writer changed the rule in between: read again.
    Conflict,
}

fn text(value: &str) -> AttributeValue {
    AttributeValue::S(value.to_owned())
}

fn number(value: u64) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

/// Whether a transaction was cancelled by a condition or a concurrent transaction: deciding
/// again on a fresh read answers it.
fn cancelled(error: &SdkError<TransactWriteItemsError>) -> bool {
    matches!(
        error.as_service_error(),
        Some(TransactWriteItemsError::TransactionCanceledException(_))
    )
}

impl DynamoLeases {
    /// The lease table `table`.
    pub fn new(client: aws_sdk_dynamodb::Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
        }
    }

    fn failed<E>(&self, operation: &'static str, error: SdkError<E>) -> LeaseError
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        let retryable = passes(&error);
        let error = Box::new(DynamoError::Call {
            table: self.table.clone(),
            operation,
            message: DisplayErrorContext(&error).to_string(),
        });
        if retryable {
            LeaseError::Unavailable(error)
        } else {
            LeaseError::Refused(error)
        }
    }

    fn corrupt(&self, key: &str, reason: String) -> LeaseError {
        LeaseError::Refused(Box::new(DynamoError::CorruptView {
            table: self.table.clone(),
            key: key.to_owned(),
            reason,
        }))
    }

    fn busy(&self, rule: &RuleKey) -> LeaseError {
        LeaseError::Unavailable(Box::new(DynamoError::Call {
            table: self.table.clone(),
            operation: "TransactWriteItems",
            message: format!(
                "the leases of {rule} changed {CONFLICT_RETRIES} times while this change was decided"
            ),
        }))
    }

    fn closing(&self, rule: &RuleKey, by: &str) -> LeaseError {
        match by.parse() {
            Ok(by) => LeaseError::Closing {
                rule: rule.clone(),
                by,
            },
            Err(_) => self.corrupt(&rule.as_key(), format!("`closing` is `{by}`, not an id")),
        }
    }

    /// The rule's head item, read consistently.
    async fn head(&self, key: &str) -> Result<Head, LeaseError> {
        let item = self
            .client
            .get_item()
            .table_name(&self.table)
            .consistent_read(true)
            .key(PARTITION, text(key))
            .key(SORT, text(HEAD))
            .send()
            .await
            .map_err(|e| self.failed("GetItem", e))?;
        let Some(item) = item.item() else {
            return Ok(Head::default());
        };
        let holders = match item.get("holders") {
            None => 0,
            Some(value) => value
                .as_n()
                .ok()
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| self.corrupt(key, "`holders` is not a count".into()))?,
        };
        let closing = item
            .get("closing")
            .and_then(|value| value.as_s().ok())
            .cloned();
        Ok(Head { holders, closing })
    }

    /// Whether `deployment` holds an open lease on the rule.
    async fn holds(&self, key: &str, deployment: &str) -> Result<bool, LeaseError> {
        let item = self
            .client
            .get_item()
            .table_name(&self.table)
            .consistent_read(true)
            .key(PARTITION, text(key))
            .key(SORT, text(&format!("{HOLDER}{deployment}")))
            .send()
            .await
            .map_err(|e| self.failed("GetItem", e))?;
        Ok(item.item().is_some())
    }

    /// Every open holder of the rule, read consistently, page by page.
    async fn holder_ids(&self, key: &str) -> Result<Vec<String>, LeaseError> {
        let mut holders = Vec::new();
        let mut start: Option<HashMap<String, AttributeValue>> = None;
        loop {
            let page = self
                .client
                .query()
                .table_name(&self.table)
                .consistent_read(true)
                .key_condition_expression("#p = :rule AND begins_with(#s, :holder)")
                .expression_attribute_names("#p", PARTITION)
                .expression_attribute_names("#s", SORT)
                .expression_attribute_values(":rule", text(key))
                .expression_attribute_values(":holder", text(HOLDER))
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| self.failed("Query", e))?;
            for item in page.items() {
                let sort = item
                    .get(SORT)
                    .and_then(|value| value.as_s().ok())
                    .ok_or_else(|| self.corrupt(key, "a holder item has no sort key".into()))?;
                holders.push(sort.trim_start_matches(HOLDER).to_owned());
            }
            match page.last_evaluated_key() {
                Some(next) if !next.is_empty() => start = Some(next.clone()),
                _ => return Ok(holders),
            }
        }
    }

    fn parse_ids(&self, key: &str, ids: &[String]) -> Result<Vec<DeploymentId>, LeaseError> {
        let mut parsed = ids
            .iter()
            .map(|id| {
                id.parse()
                    .map_err(|_| self.corrupt(key, format!("holder `{id}` is not an id")))
            })
            .collect::<Result<Vec<DeploymentId>, _>>()?;
        parsed.sort();
        Ok(parsed)
    }

    fn holder_item(&self, key: &str, deployment: &str) -> Result<TransactWriteItem, LeaseError> {
        let put = Put::builder()
            .table_name(&self.table)
            .item(PARTITION, text(key))
            .item(SORT, text(&format!("{HOLDER}{deployment}")))
            .item(
                "since",
                text(&chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)),
            )
            .condition_expression("attribute_not_exists(#p)")
            .expression_attribute_names("#p", PARTITION)
            .build()
            .map_err(|e| self.corrupt(key, e.to_string()))?;
        Ok(TransactWriteItem::builder().put(put).build())
    }

    fn drop_holder(&self, key: &str, deployment: &str) -> Result<TransactWriteItem, LeaseError> {
        let delete = Delete::builder()
            .table_name(&self.table)
            .key(PARTITION, text(key))
            .key(SORT, text(&format!("{HOLDER}{deployment}")))
            .condition_expression("attribute_exists(#p)")
            .expression_attribute_names("#p", PARTITION)
            .build()
            .map_err(|e| self.corrupt(key, e.to_string()))?;
        Ok(TransactWriteItem::builder().delete(delete).build())
    }

    /// Sets the head's count from `seen` to `holders`, and `closing` when given.
    fn set_head(
        &self,
        key: &str,
        seen: &Head,
        holders: u64,
        closing: Option<&str>,
    ) -> Result<TransactWriteItem, LeaseError> {
        let mut update = Update::builder()
            .table_name(&self.table)
            .key(PARTITION, text(key))
            .key(SORT, text(HEAD))
            .expression_attribute_names("#h", "holders")
            .expression_attribute_names("#c", "closing")
            .expression_attribute_values(":now", number(holders));
        let condition = if seen.holders == 0 {
            "(attribute_not_exists(#h) OR #h = :seen) AND attribute_not_exists(#c)"
        } else {
            "#h = :seen AND attribute_not_exists(#c)"
        };
        update = update
            .condition_expression(condition)
            .expression_attribute_values(":seen", number(seen.holders));
        update = match closing {
            Some(by) => update
                .update_expression("SET #h = :now, #c = :by")
                .expression_attribute_values(":by", text(by)),
            None => update.update_expression("SET #h = :now"),
        };
        let update = update
            .build()
            .map_err(|e| self.corrupt(key, e.to_string()))?;
        Ok(TransactWriteItem::builder().update(update).build())
    }

    async fn transact(
        &self,
        items: Vec<TransactWriteItem>,
    ) -> Result<Result<(), SdkError<TransactWriteItemsError>>, LeaseError> {
        match self
            .client
            .transact_write_items()
            .set_transact_items(Some(items))
            .send()
            .await
        {
            Ok(_) => Ok(Ok(())),
            Err(error) if cancelled(&error) => Ok(Err(error)),
            Err(error) => Err(self.failed("TransactWriteItems", error)),
        }
    }

    async fn try_acquire(&self, rule: &RuleKey, holder: &str) -> Result<Tried<()>, LeaseError> {
        let key = rule.as_key();
        let head = self.head(&key).await?;
        if let Some(by) = &head.closing {
            return Err(self.closing(rule, by));
        }
        if self.holds(&key, holder).await? {
            return Ok(Tried::Done(()));
        }
        let items = vec![
            self.holder_item(&key, holder)?,
            self.set_head(&key, &head, head.holders + 1, None)?,
        ];
        Ok(match self.transact(items).await? {
            Ok(()) => Tried::Done(()),
            Err(_) => Tried::Conflict,
        })
    }

    async fn try_release(
        &self,
        rule: &RuleKey,
        holder: &str,
    ) -> Result<Tried<Release>, LeaseError> {
        let key = rule.as_key();
        let head = self.head(&key).await?;
        let holds = self.holds(&key, holder).await?;
        if !holds {
            return match head.closing.as_deref() {
                Some(by) if by == holder => Ok(Tried::Done(Release::Last)),
                Some(by) => Err(self.closing(rule, by)),
                None if head.holders > 0 => {
                    let others = self.holder_ids(&key).await?;
                    Ok(Tried::Done(Release::Kept(self.parse_ids(&key, &others)?)))
                }
                None => {
                    let items = vec![self.set_head(&key, &head, 0, Some(holder))?];
                    Ok(match self.transact(items).await? {
                        Ok(()) => Tried::Done(Release::Last),
                        Err(_) => Tried::Conflict,
                    })
                }
            };
        }
        let last = head.holders <= 1;
        let items = vec![
            self.drop_holder(&key, holder)?,
            self.set_head(
                &key,
                &head,
                head.holders.saturating_sub(1),
                last.then_some(holder),
            )?,
        ];
        match self.transact(items).await? {
            Ok(()) if last => Ok(Tried::Done(Release::Last)),
            Ok(()) => {
                let others = self.holder_ids(&key).await?;
                Ok(Tried::Done(Release::Kept(self.parse_ids(&key, &others)?)))
            }
            // Another writer changed the rule, or another try of this release closed the lease,
            // between the read and the write.
            Err(_) => Ok(Tried::Conflict),
        }
    }
}

#[async_trait]
impl LeaseBastionRules for DynamoLeases {
    async fn acquire(&self, rule: &RuleKey, deployment: DeploymentId) -> Result<(), LeaseError> {
        let holder = deployment.to_string();
        for _ in 0..CONFLICT_RETRIES {
            if let Tried::Done(()) = self.try_acquire(rule, &holder).await? {
                return Ok(());
            }
        }
        Err(self.busy(rule))
    }

    async fn release(
        &self,
        rule: &RuleKey,
        deployment: DeploymentId,
    ) -> Result<Release, LeaseError> {
        let holder = deployment.to_string();
        for _ in 0..CONFLICT_RETRIES {
            if let Tried::Done(release) = self.try_release(rule, &holder).await? {
                return Ok(release);
            }
        }
        Err(self.busy(rule))
    }

    async fn closed(&self, rule: &RuleKey, deployment: DeploymentId) -> Result<(), LeaseError> {
        let deleted = self
            .client
            .delete_item()
            .table_name(&self.table)
            .key(PARTITION, text(&rule.as_key()))
            .key(SORT, text(HEAD))
            .condition_expression("#c = :by")
            .expression_attribute_names("#c", "closing")
            .expression_attribute_values(":by", text(&deployment.to_string()))
            .send()
            .await;
        match deleted {
            Ok(_) => Ok(()),
            // Closed already, or never closing for this deployment: nothing to end.
            Err(error)
                if error
                    .as_service_error()
                    .is_some_and(|e| e.is_conditional_check_failed_exception()) =>
            {
                Ok(())
            }
            Err(error) => Err(self.failed("DeleteItem", error)),
        }
    }

    async fn holders(&self, rule: &RuleKey) -> Result<Vec<DeploymentId>, LeaseError> {
        let key = rule.as_key();
        let ids = self.holder_ids(&key).await?;
        self.parse_ids(&key, &ids)
    }

    /// A scan: the table holds only the rules in use, and this is asked once at a deployment's
    /// end, so an index by deployment would cost every write more than it saves here.
    async fn held_by(&self, deployment: DeploymentId) -> Result<Vec<RuleKey>, LeaseError> {
        let holder = deployment.to_string();
        let mut held = Vec::new();
        let mut start: Option<HashMap<String, AttributeValue>> = None;
        loop {
            let page = self
                .client
                .scan()
                .table_name(&self.table)
                .consistent_read(true)
                .filter_expression("#s = :holder OR #c = :id")
                .expression_attribute_names("#s", SORT)
                .expression_attribute_names("#c", "closing")
                .expression_attribute_values(":holder", text(&format!("{HOLDER}{holder}")))
                .expression_attribute_values(":id", text(&holder))
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| self.failed("Scan", e))?;
            for item in page.items() {
                let key = item
                    .get(PARTITION)
                    .and_then(|value| value.as_s().ok())
                    .ok_or_else(|| self.corrupt(&holder, "an item has no partition key".into()))?;
                let rule = RuleKey::from_key(key)
                    .ok_or_else(|| self.corrupt(key, "the partition key is no rule".into()))?;
                held.push(rule);
            }
            match page.last_evaluated_key() {
                Some(next) if !next.is_empty() => start = Some(next.clone()),
                _ => break,
            }
        }
        held.sort();
        held.dedup();
        Ok(held)
    }
}

/// Creates the lease table unless it exists. For development and tests; on AWS the stack makes
/// it.
pub async fn create_leases_table(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
) -> Result<(), DynamoError> {
    crate::dynamodb::create_sorted_table(client, table, PARTITION, SORT).await
}
