//! The read models on two DynamoDB tables, written by the projector one deployment at a time
//! ([`DeploymentViews`]), keeping the same contract as the SQLite read models
//! (`overture_projector::contract`).
//!
//! - **The deployments table** (partition key `id`): one item per deployment with `tenant`,
//!   `status`, `started_at`, `revision` (the last record folded in) and `view`, the
//!   `status --json` object as JSON text.
//! - **The tenants table** (partition key `tenant`): one item per tenant with the counters
//!   `running`, `succeeded`, `failed`, `cancelled`, `total` and `last_deployment_at` (RFC 3339 in
//!   UTC with nanoseconds, fixed width, so text order is time order, and the time reads back
//!   exactly as recorded, as from the SQLite read models).
//! - **A save** is one `TransactWriteItems`: the view's `Put`, conditional on the revision it
//!   was loaded at (`attribute_not_exists(id)` for a new one), and the tenant's `Update`, which
//!   `ADD`s the counters' changes, so projectors of different deployments of one tenant never
//!   overwrite each other's counts. A cancelled transaction whose view condition failed is
//!   [`ViewError::Conflict`]: the projector reloads and folds again. `last_deployment_at` is set
//!   only if it moves forward: when that condition alone fails (an older deployment projected
//!   after a newer one), the save is made again without it.
//! - **A tenant's deployments** are found through the table's global secondary index
//!   [`BY_TENANT`] (`tenant`, `started_at`; keys only), so listing one tenant reads that
//!   tenant's entries, not the whole table; the views are then read by their keys. The index is
//!   eventually consistent: a deployment projected a moment ago may be missing from its
//!   tenant's list for that moment (never from `status`, which reads its view by key).
//! - **Reads** are strongly consistent (but the index's); [`DynamoReadModels::tenants`] and
//!   [`DynamoReadModels::deployments`] follow `LastEvaluatedKey` to the last page.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::error::{DisplayErrorContext, SdkError};
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{AttributeValue, KeysAndAttributes, Put, TransactWriteItem, Update};
use aws_sdk_dynamodb::Client;
use chrono::SecondsFormat;
use overture_domain::projection::{DeploymentView, TenantDelta, TenantView};
use overture_events::{DeploymentId, Timestamp};
use overture_projector::{DeploymentViews, ViewError};

use crate::dynamodb::{create_table, create_table_keyed_by, KeysIndex};

use crate::dynamodb::{DynamoError, MAX_ITEM_BYTES};

const ID: &str = "id";
const TENANT: &str = "tenant";
const STATUS: &str = "status";
const STARTED_AT: &str = "started_at";
const REVISION: &str = "revision";
const VIEW: &str = "view";
const LAST_DEPLOYMENT_AT: &str = "last_deployment_at";
/// The deployments table's index of each tenant's deployments by start (keys only).
pub const BY_TENANT: &str = "by-tenant";
/// The most keys one `BatchGetItem` asks for.
const BATCH_GET_KEYS: usize = 100;

/// How many times a save is tried again when DynamoDB cancels it for a concurrent transaction
/// on the same tenant item (`TransactionConflict`), which says nothing about the view.
const TRANSACTION_CONFLICT_TRIES: u32 = 10;

/// The read models in a deployments table and a tenants table.
#[derive(Clone)]
pub struct DynamoReadModels {
    client: Client,
    deployments: String,
    tenants: String,
}

/// How one transaction ended.
enum Saved {
    Done,
    /// The view was not at the revision it was loaded at.
    ViewMoved,
    /// Only `last_deployment_at` was already newer.
    NotNewest,
    /// Another transaction held an item; nothing was written.
    Busy,
}

fn timestamp(at: Timestamp) -> String {
    at.to_rfc3339_opts(SecondsFormat::Nanos, true)
}

fn unavailable(error: DynamoError) -> ViewError {
    ViewError::Unavailable(Box::new(error))
}

fn corrupt(error: DynamoError) -> ViewError {
    ViewError::Corrupt(Box::new(error))
}

impl DynamoReadModels {
    /// Read models in the `deployments` and `tenants` tables.
    pub fn new(client: Client, deployments: impl Into<String>, tenants: impl Into<String>) -> Self {
        Self {
            client,
            deployments: deployments.into(),
            tenants: tenants.into(),
        }
    }

    fn call_failed<E: std::error::Error + 'static>(
        table: &str,
        operation: &'static str,
        error: E,
    ) -> DynamoError {
        DynamoError::Call {
            table: table.to_owned(),
            operation,
            message: DisplayErrorContext(error).to_string(),
        }
    }

    /// Every tenant's summary, by tenant name, page after page.
    pub async fn tenants(&self) -> Result<Vec<TenantView>, ViewError> {
        let items = self.scan(&self.tenants).await?;
        let mut tenants = items
            .iter()
            .map(|item| self.tenant_view(item))
            .collect::<Result<Vec<_>, _>>()?;
        tenants.sort_by(|a, b| a.tenant.cmp(&b.tenant));
        Ok(tenants)
    }

    /// Deployment views (of one tenant, or all), newest first, page after page.
    pub async fn deployments(
        &self,
        tenant: Option<&str>,
    ) -> Result<Vec<DeploymentView>, ViewError> {
        let items = match tenant {
            Some(tenant) => {
                let ids = self.tenant_deployments(tenant).await?;
                self.get_views(ids).await?
            }
            None => self.scan(&self.deployments).await?,
        };
        let mut views = items
            .iter()
            .map(|item| self.deployment_view(item))
            .collect::<Result<Vec<_>, _>>()?;
        views.sort_by_key(|view| std::cmp::Reverse((view.started_at, view.id)));
        Ok(views)
    }

    /// The ids of a tenant's deployments, from the tenant index: a query reads that tenant's
    /// entries only, where a scan of the table would read every tenant's deployments. The index
    /// is eventually consistent; the views are then read strongly consistent by their keys.
    async fn tenant_deployments(&self, tenant: &str) -> Result<Vec<String>, ViewError> {
        let mut ids = Vec::new();
        let mut start = None;
        loop {
            let page = self
                .client
                .query()
                .table_name(&self.deployments)
                .index_name(BY_TENANT)
                .key_condition_expression("#t = :t")
                .expression_attribute_names("#t", TENANT)
                .expression_attribute_values(":t", AttributeValue::S(tenant.to_owned()))
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| unavailable(Self::call_failed(&self.deployments, "Query", e)))?;
            ids.extend(
                page.items()
                    .iter()
                    .filter_map(|item| item.get(ID)?.as_s().ok().cloned()),
            );
            match page.last_evaluated_key() {
                Some(key) if !key.is_empty() => start = Some(key.clone()),
                _ => return Ok(ids),
            }
        }
    }

    /// The deployments table's items of `ids`, strongly consistent, a hundred keys a call, until
    /// DynamoDB has answered for every key.
    async fn get_views(
        &self,
        ids: Vec<String>,
    ) -> Result<Vec<HashMap<String, AttributeValue>>, ViewError> {
        let mut items = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(BATCH_GET_KEYS) {
            let keys = chunk
                .iter()
                .map(|id| HashMap::from([(ID.to_owned(), AttributeValue::S(id.clone()))]))
                .collect();
            let mut wanted = Some(
                KeysAndAttributes::builder()
                    .set_keys(Some(keys))
                    .consistent_read(true)
                    .build()
                    .map_err(|e| {
                        corrupt(Self::call_failed(&self.deployments, "BatchGetItem", e))
                    })?,
            );
            let mut round = 0;
            while let Some(keys) = wanted.take() {
                if round > 0 {
                    // Keys left unanswered mean the table is busy: wait a little longer each
                    // time, as DynamoDB asks of a client.
                    tokio::time::sleep(std::time::Duration::from_millis(50 << round.min(6))).await;
                }
                round += 1;
                let answer = self
                    .client
                    .batch_get_item()
                    .request_items(&self.deployments, keys)
                    .send()
                    .await
                    .map_err(|e| {
                        unavailable(Self::call_failed(&self.deployments, "BatchGetItem", e))
                    })?;
                if let Some(found) = answer.responses().and_then(|r| r.get(&self.deployments)) {
                    items.extend(found.iter().cloned());
                }
                wanted = answer
                    .unprocessed_keys()
                    .and_then(|left| left.get(&self.deployments))
                    .filter(|left| !left.keys().is_empty())
                    .cloned();
            }
        }
        Ok(items)
    }

    async fn scan(&self, table: &str) -> Result<Vec<HashMap<String, AttributeValue>>, ViewError> {
        let mut items = Vec::new();
        let mut start = None;
        loop {
            let page = self
                .client
                .scan()
                .table_name(table)
                .consistent_read(true)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| unavailable(Self::call_failed(table, "Scan", e)))?;
            items.extend(page.items().iter().cloned());
            match page.last_evaluated_key() {
                Some(key) if !key.is_empty() => start = Some(key.clone()),
                _ => return Ok(items),
            }
        }
    }

    async fn get(
        &self,
        table: &str,
        key: &str,
        value: String,
    ) -> Result<Option<HashMap<String, AttributeValue>>, ViewError> {
        let found = self
            .client
            .get_item()
            .table_name(table)
            .consistent_read(true)
            .key(key, AttributeValue::S(value))
            .send()
            .await
            .map_err(|e| unavailable(Self::call_failed(table, "GetItem", e)))?;
        Ok(found.item().cloned())
    }

    fn deployment_view(
        &self,
        item: &HashMap<String, AttributeValue>,
    ) -> Result<DeploymentView, ViewError> {
        let corrupt_item = |reason: String| {
            corrupt(DynamoError::CorruptView {
                table: self.deployments.clone(),
                key: item
                    .get(ID)
                    .and_then(|v| v.as_s().ok())
                    .cloned()
                    .unwrap_or_default(),
                reason,
            })
        };
        let json = item
            .get(VIEW)
            .and_then(|v| v.as_s().ok())
            .ok_or_else(|| corrupt_item(format!("no text attribute `{VIEW}`")))?;
        serde_json::from_str(json).map_err(|e| corrupt_item(format!("its view: {e}")))
    }

    fn tenant_view(&self, item: &HashMap<String, AttributeValue>) -> Result<TenantView, ViewError> {
        let name = item
            .get(TENANT)
            .and_then(|v| v.as_s().ok())
            .cloned()
            .unwrap_or_default();
        let corrupt_item = |reason: String| {
            corrupt(DynamoError::CorruptView {
                table: self.tenants.clone(),
                key: name.clone(),
                reason,
            })
        };
        let counter = |attribute: &str| -> Result<u64, ViewError> {
            match item.get(attribute) {
                None => Ok(0),
                Some(value) => value
                    .as_n()
                    .ok()
                    .and_then(|n| n.parse::<i64>().ok())
                    // A counter below zero would mean a record counted out twice; show none.
                    .map(|n| n.max(0) as u64)
                    .ok_or_else(|| corrupt_item(format!("`{attribute}` is not a whole number"))),
            }
        };
        let last_deployment_at = match item.get(LAST_DEPLOYMENT_AT) {
            None => None,
            Some(value) => {
                let text = value
                    .as_s()
                    .map_err(|_| corrupt_item(format!("`{LAST_DEPLOYMENT_AT}` is not text")))?;
                let at = chrono::DateTime::parse_from_rfc3339(text)
                    .map_err(|e| corrupt_item(format!("`{LAST_DEPLOYMENT_AT}`: {e}")))?;
                Some(at.with_timezone(&chrono::Utc))
            }
        };
        Ok(TenantView {
            running: counter("running")?,
            succeeded: counter("succeeded")?,
            failed: counter("failed")?,
            cancelled: counter("cancelled")?,
            total: counter("total")?,
            tenant: name,
            last_deployment_at,
        })
    }

    /// The view's conditional put.
    fn put_view(
        &self,
        view: &DeploymentView,
        json: String,
        loaded_at: Option<u64>,
    ) -> Result<TransactWriteItem, ViewError> {
        let put = Put::builder()
            .table_name(&self.deployments)
            .item(ID, AttributeValue::S(view.id.to_string()))
            .item(TENANT, AttributeValue::S(view.tenant.clone()))
            .item(STATUS, AttributeValue::S(view.status.as_str().to_owned()))
            .item(STARTED_AT, AttributeValue::S(timestamp(view.started_at)))
            .item(REVISION, AttributeValue::N(view.revision.to_string()))
            .item(VIEW, AttributeValue::S(json));
        let put = match loaded_at {
            None => put
                .condition_expression("attribute_not_exists(#id)")
                .expression_attribute_names("#id", ID),
            Some(revision) => put
                .condition_expression("#r = :loaded")
                .expression_attribute_names("#r", REVISION)
                .expression_attribute_values(":loaded", AttributeValue::N(revision.to_string())),
        };
        let put = put
            .build()
            .map_err(|e| unavailable(Self::call_failed(&self.deployments, "Put", e)))?;
        Ok(TransactWriteItem::builder().put(put).build())
    }

    /// The tenant's update: `ADD` for each counter that changes, and `last_deployment_at` if
    /// `newest` and only if it moves forward. `None` when it changes nothing.
    fn update_tenant(
        &self,
        tenant: &str,
        delta: &TenantDelta,
        newest: bool,
    ) -> Result<Option<TransactWriteItem>, ViewError> {
        let mut update = Update::builder()
            .table_name(&self.tenants)
            .key(TENANT, AttributeValue::S(tenant.to_owned()));
        let mut adds = Vec::new();
        for (name, change) in [
            ("running", delta.running),
            ("succeeded", delta.succeeded),
            ("failed", delta.failed),
            ("cancelled", delta.cancelled),
            ("total", delta.total),
        ] {
            if change != 0 {
                adds.push(format!("#{name} :{name}"));
                update = update
                    .expression_attribute_names(format!("#{name}"), name)
                    .expression_attribute_values(
                        format!(":{name}"),
                        AttributeValue::N(change.to_string()),
                    );
            }
        }
        let mut expression = Vec::new();
        if let Some(at) = delta.requested_at.filter(|_| newest) {
            expression.push("SET #last = :at".to_owned());
            update = update
                .condition_expression("attribute_not_exists(#last) OR #last < :at")
                .expression_attribute_names("#last", LAST_DEPLOYMENT_AT)
                .expression_attribute_values(":at", AttributeValue::S(timestamp(at)));
        }
        if !adds.is_empty() {
            expression.push(format!("ADD {}", adds.join(", ")));
        }
        if expression.is_empty() {
            return Ok(None);
        }
        let update = update
            .update_expression(expression.join(" "))
            .build()
            .map_err(|e| unavailable(Self::call_failed(&self.tenants, "Update", e)))?;
        Ok(Some(TransactWriteItem::builder().update(update).build()))
    }

    async fn transact(&self, writes: Vec<TransactWriteItem>) -> Result<Saved, ViewError> {
        let error = match self
            .client
            .transact_write_items()
            .set_transact_items(Some(writes))
            .send()
            .await
        {
            Ok(_) => return Ok(Saved::Done),
            Err(error) => error,
        };
        let reasons: Vec<Option<String>> = match cancelled(&error) {
            Some(reasons) => reasons,
            None => {
                let table = format!("{} and {}", self.deployments, self.tenants);
                return Err(unavailable(Self::call_failed(
                    &table,
                    "TransactWriteItems",
                    error,
                )));
            }
        };
        let failed = |index: usize| {
            reasons.get(index).and_then(Option::as_deref) == Some("ConditionalCheckFailed")
        };
        let busy = reasons.iter().flatten().any(|code| {
            matches!(
                code.as_str(),
                "TransactionConflict" | "ThrottlingError" | "ProvisionedThroughputExceeded"
            )
        });
        if failed(0) {
            Ok(Saved::ViewMoved)
        } else if failed(1) {
            Ok(Saved::NotNewest)
        } else if busy {
            Ok(Saved::Busy)
        } else {
            let table = format!("{} and {}", self.deployments, self.tenants);
            Err(unavailable(Self::call_failed(
                &table,
                "TransactWriteItems",
                error,
            )))
        }
    }
}

/// The reason codes, item by item, of a transaction DynamoDB cancelled.
fn cancelled(error: &SdkError<TransactWriteItemsError>) -> Option<Vec<Option<String>>> {
    match error.as_service_error() {
        Some(TransactWriteItemsError::TransactionCanceledException(cancelled)) => Some(
            cancelled
                .cancellation_reasons()
                .iter()
                .map(|reason| reason.code().map(str::to_owned))
                .collect(),
        ),
        _ => None,
    }
}

#[async_trait]
impl DeploymentViews for DynamoReadModels {
    async fn view(&self, deployment: DeploymentId) -> Result<Option<DeploymentView>, ViewError> {
        self.get(&self.deployments, ID, deployment.to_string())
            .await?
            .map(|item| self.deployment_view(&item))
            .transpose()
    }

    async fn save(
        &self,
        view: &DeploymentView,
        loaded_at: Option<u64>,
        delta: &TenantDelta,
    ) -> Result<(), ViewError> {
        let json = serde_json::to_string(view).map_err(|e| ViewError::Corrupt(Box::new(e)))?;
        // The attributes beside the view and their names take well under a kilobyte.
        let bytes = json.len() + view.tenant.len() + 256;
        if bytes > MAX_ITEM_BYTES {
            return Err(ViewError::TooLarge {
                deployment: view.id,
                bytes,
                limit: MAX_ITEM_BYTES,
            });
        }
        let mut newest = true;
        for _ in 0..TRANSACTION_CONFLICT_TRIES {
            let mut writes = vec![self.put_view(view, json.clone(), loaded_at)?];
            writes.extend(self.update_tenant(&view.tenant, delta, newest)?);
            match self.transact(writes).await? {
                Saved::Done => return Ok(()),
                Saved::ViewMoved => {
                    return Err(ViewError::Conflict {
                        deployment: view.id,
                        loaded_at,
                    })
                }
                Saved::NotNewest => newest = false,
                Saved::Busy => {}
            }
        }
        Err(unavailable(DynamoError::Call {
            table: format!("{} and {}", self.deployments, self.tenants),
            operation: "TransactWriteItems",
            message: format!(
                "cancelled {TRANSACTION_CONFLICT_TRIES} times by concurrent transactions"
            ),
        }))
    }

    async fn tenant(&self, tenant: &str) -> Result<Option<TenantView>, ViewError> {
        self.get(&self.tenants, TENANT, tenant.to_owned())
            .await?
            .map(|item| self.tenant_view(&item))
            .transpose()
    }
}

/// Creates the deployments and tenants tables unless they exist. For development and tests; on
/// AWS the stack makes them.
pub async fn create_read_model_tables(
    client: &Client,
    deployments: &str,
    tenants: &str,
) -> Result<(), DynamoError> {
    create_table(
        client,
        deployments,
        ID,
        Some(KeysIndex {
            name: BY_TENANT,
            partition: TENANT,
            sort: STARTED_AT,
        }),
    )
    .await?;
    create_table_keyed_by(client, tenants, TENANT).await
}
