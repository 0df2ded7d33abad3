//! The read models on two DynamoDB tables, written by the projector one deployment at a time
//! ([`DeploymentViews`]), keeping the same contract as the SQLite read models
//! (`overture_projector::contract`).
//!
//! - **The deployments table** (partition key `id`, sort key `item`): per deployment, a header
//!   item (`item` = `view`) with `tenant`, `status`, `started_at`, `revision` (the last record
//!   folded in) and `view`, the `status --json` object without its steps as JSON text; and an
//!   item per step (`item` = `step#NAME`) with its `position` in the blueprint, the `revision`
//!   it was written at and its `view` as JSON text. A save writes the header and the steps the
//!   records changed only, so its cost does not grow with the deployment; `status` reads the
//!   deployment's items with one query.
//! - **The tenants table** (partition key `tenant`): one item per tenant with the counters
//!   `running`, `succeeded`, `failed`, `cancelled`, `total` and `last_deployment_at` (RFC 3339 in
//!   UTC with nanoseconds, fixed width, so text order is time order, and the time reads back
//!   exactly as recorded, as from the SQLite read models).
//! - **A save** is one `TransactWriteItems`: the header's `Put`, conditional on the revision it
//!   was loaded at (`attribute_not_exists(id)` for a new one), the changed steps' `Put`s, and
//!   the tenant's `Update`, which
//!   `ADD`s the counters' changes, so projectors of different deployments of one tenant never
//!   overwrite each other's counts. A cancelled transaction whose view condition failed is
//!   [`ViewError::Conflict`]: the projector reloads and folds again. `last_deployment_at` is set
//!   only if it moves forward: when that condition alone fails (an older deployment projected
//!   after a newer one), the save is made again without it. Steps beyond what one transaction
//!   holds (a new deployment of many steps) go first, in transactions of their own that check
//!   the header is still as loaded; each step's `Put` is conditional on not overwriting a step
//!   written at a later revision, so a projector that lost a race never undoes the winner's.
//! - **A tenant's deployments** are found through the table's global secondary index
//!   [`BY_TENANT`] (`tenant`, `started_at`; keys only; only headers have those attributes), so
//!   listing one tenant reads that tenant's entries, not the whole table; each view is then
//!   read by its key. The index is
//!   eventually consistent: a deployment projected a moment ago may be missing from its
//!   tenant's list for that moment (never from `status`, which reads its view by key).
//! - **The service registry** ([`overture_domain::registry`]) is kept in the deployments
//!   table too, one partition per tenant (`id` = `registry#TENANT`, which no deployment id can
//!   be, and which has no header, so no view is read from it): an item per registered
//!   instance (`item` = `instance#SERVICE#ADDRESS#PORT#DEPLOYMENT`, with `service`, `address`,
//!   `port`, `deployment`, `step`, `host`, `registered_at` and the `revision` of the record
//!   that wrote it) and one per interest (`item` = `interest#SERVICE#DEPLOYMENT`, with
//!   `service`, `deployment` and `watched`). A save writes what its records set in it in the
//!   same transactions as the view, each instance's put or delete conditional on the item not
//!   having been written at a later revision, as steps are; reading a tenant's registry is a
//!   query of its partition. Keeping it here rather than in a table of its own leaves the stack
//!   as it is.
//! - **Reads** are strongly consistent (but the index's); [`DynamoReadModels::tenants`] and
//!   [`DynamoReadModels::deployments`] follow `LastEvaluatedKey` to the last page.

use std::collections::{BTreeSet, HashMap};

use async_trait::async_trait;
use aws_sdk_dynamodb::error::{DisplayErrorContext, SdkError};
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::Delete;
use aws_sdk_dynamodb::types::{
    AttributeValue, ConditionCheck, KeysAndAttributes, Put, TransactWriteItem, Update,
};
use aws_sdk_dynamodb::Client;
use chrono::SecondsFormat;
use indexmap::IndexMap;
use overture_domain::projection::{DeploymentView, Header, StepView, TenantDelta, TenantView};
use overture_domain::registry::{still_interested, InstanceKey, InterestKey, Registry};
use overture_domain::services::{RegisteredInstance, ServiceInstance};
use overture_events::{DeploymentId, Timestamp};
use overture_kit::registry::{ReadServiceRegistry, RegistryError};
use overture_projector::{DeploymentViews, ViewError};

use crate::dynamodb::{create_sorted_table_with_index, create_table_keyed_by, KeysIndex};

use crate::dynamodb::{DynamoError, MAX_ITEM_BYTES};

const ID: &str = "id";
const ITEM: &str = "item";
/// The sort key of a deployment's header item.
const HEADER: &str = "view";
/// The sort key prefix of a deployment's step items.
const STEP: &str = "step#";
const POSITION: &str = "position";
const TENANT: &str = "tenant";
const STATUS: &str = "status";
const STARTED_AT: &str = "started_at";
const REVISION: &str = "revision";
const VIEW: &str = "view";
const LAST_DEPLOYMENT_AT: &str = "last_deployment_at";
/// The partition key prefix of a tenant's service registry.
const REGISTRY: &str = "registry#";
/// The sort key prefix of a registered instance.
const INSTANCE: &str = "instance#";
/// The sort key prefix of an interest in a service.
const INTEREST: &str = "interest#";
const SERVICE: &str = "service";
const ADDRESS: &str = "address";
const PORT: &str = "port";
const DEPLOYMENT: &str = "deployment";
const STEP_NAME: &str = "step";
const HOST: &str = "host";
const REGISTERED_AT: &str = "registered_at";
const WATCHED: &str = "watched";
/// The deployments table's index of each tenant's deployments by start (keys only).
pub const BY_TENANT: &str = "by-tenant";
/// The most keys one `BatchGetItem` asks for.
const BATCH_GET_KEYS: usize = 100;
/// The most writes one `TransactWriteItems` holds.
const TRANSACTION_ITEMS: usize = 100;

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
    /// The view was not at the revision it was loaded at, or a step was written later.
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
        let mut views = match tenant {
            Some(tenant) => {
                let mut views = Vec::new();
                for id in self.tenant_deployments(tenant).await? {
                    let items = self.query_deployment(&id).await?;
                    views.extend(self.assemble(&id, &items)?);
                }
                views
            }
            None => {
                let mut by_id: HashMap<String, Vec<HashMap<String, AttributeValue>>> =
                    HashMap::new();
                for item in self.scan(&self.deployments).await? {
                    let id = item
                        .get(ID)
                        .and_then(|v| v.as_s().ok())
                        .cloned()
                        .unwrap_or_default();
                    by_id.entry(id).or_default().push(item);
                }
                let mut views = Vec::with_capacity(by_id.len());
                for (id, items) in &by_id {
                    views.extend(self.assemble(id, items)?);
                }
                views
            }
        };
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

    /// Every item of one deployment (its header and steps), strongly consistent, page after
    /// page.
    async fn query_deployment(
        &self,
        id: &str,
    ) -> Result<Vec<HashMap<String, AttributeValue>>, ViewError> {
        self.query_partition(id, None).await
    }

    /// Every item of one partition of the deployments table, those whose sort key starts with
    /// `prefix` when one is given, strongly consistent, page after page.
    async fn query_partition(
        &self,
        partition: &str,
        prefix: Option<&str>,
    ) -> Result<Vec<HashMap<String, AttributeValue>>, ViewError> {
        let mut items = Vec::new();
        let mut start = None;
        loop {
            let query = self
                .client
                .query()
                .table_name(&self.deployments)
                .consistent_read(true)
                .expression_attribute_names("#id", ID)
                .expression_attribute_values(":id", AttributeValue::S(partition.to_owned()));
            let query = match prefix {
                None => query.key_condition_expression("#id = :id"),
                Some(prefix) => query
                    .key_condition_expression("#id = :id AND begins_with(#item, :prefix)")
                    .expression_attribute_names("#item", ITEM)
                    .expression_attribute_values(":prefix", AttributeValue::S(prefix.to_owned())),
            };
            let page = query
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| unavailable(Self::call_failed(&self.deployments, "Query", e)))?;
            items.extend(page.items().iter().cloned());
            match page.last_evaluated_key() {
                Some(key) if !key.is_empty() => start = Some(key.clone()),
                _ => return Ok(items),
            }
        }
    }

    /// The deployments table's items of one deployment with these sort keys, strongly
    /// consistent, a hundred keys a call, until DynamoDB has answered for every key.
    async fn get_items(
        &self,
        id: &str,
        sort_keys: Vec<String>,
    ) -> Result<Vec<HashMap<String, AttributeValue>>, ViewError> {
        let keys = sort_keys
            .into_iter()
            .map(|sort| (id.to_owned(), sort))
            .collect();
        self.get_keys(keys).await
    }

    /// The deployments table's items with these keys (`id`, `item`), as [`Self::get_items`].
    async fn get_keys(
        &self,
        keys: Vec<(String, String)>,
    ) -> Result<Vec<HashMap<String, AttributeValue>>, ViewError> {
        let mut items = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(BATCH_GET_KEYS) {
            let keys = chunk
                .iter()
                .map(|(id, sort)| {
                    HashMap::from([
                        (ID.to_owned(), AttributeValue::S(id.clone())),
                        (ITEM.to_owned(), AttributeValue::S(sort.clone())),
                    ])
                })
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

    /// A deployment's view from its items: the header and the steps among them, in blueprint
    /// order. `None` without a header.
    fn assemble(
        &self,
        id: &str,
        items: &[HashMap<String, AttributeValue>],
    ) -> Result<Option<DeploymentView>, ViewError> {
        let corrupt_item = |reason: String| {
            corrupt(DynamoError::CorruptView {
                table: self.deployments.clone(),
                key: id.to_owned(),
                reason,
            })
        };
        let text = |item: &HashMap<String, AttributeValue>, name: &str| {
            item.get(name)
                .and_then(|v| v.as_s().ok())
                .cloned()
                .ok_or_else(|| corrupt_item(format!("no text attribute `{name}`")))
        };
        let mut header: Option<Header> = None;
        let mut steps = Vec::new();
        for item in items {
            let sort = text(item, ITEM)?;
            if sort == HEADER {
                let json = text(item, VIEW)?;
                let read = serde_json::from_str(&json)
                    .map_err(|e| corrupt_item(format!("its view: {e}")))?;
                header = Some(read);
            } else if let Some(name) = sort.strip_prefix(STEP) {
                let position = item
                    .get(POSITION)
                    .and_then(|v| v.as_n().ok())
                    .and_then(|n| n.parse::<u64>().ok())
                    .ok_or_else(|| corrupt_item(format!("step `{name}` has no `{POSITION}`")))?;
                let json = text(item, VIEW)?;
                let view: StepView = serde_json::from_str(&json)
                    .map_err(|e| corrupt_item(format!("step `{name}`: {e}")))?;
                steps.push((position, name.to_owned(), view));
            }
        }
        steps.sort_by_key(|(position, _, _)| *position);
        let steps: IndexMap<String, StepView> = steps
            .into_iter()
            .map(|(_, name, view)| (name, view))
            .collect();
        Ok(header.map(|header| header.with_steps(steps)))
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

    /// The header's put, conditional on the view being as loaded.
    fn put_header(
        &self,
        view: &DeploymentView,
        json: String,
        loaded_at: Option<u64>,
    ) -> Result<TransactWriteItem, ViewError> {
        let put = Put::builder()
            .table_name(&self.deployments)
            .item(ID, AttributeValue::S(view.id.to_string()))
            .item(ITEM, AttributeValue::S(HEADER.to_owned()))
            .item(TENANT, AttributeValue::S(view.tenant.clone()))
            .item(STATUS, AttributeValue::S(view.status.as_str().to_owned()))
            .item(STARTED_AT, AttributeValue::S(timestamp(view.started_at)))
            .item(REVISION, AttributeValue::N(view.revision.to_string()))
            .item(VIEW, AttributeValue::S(json));
        let (condition, names, values) = Self::as_loaded(loaded_at);
        let put = put
            .condition_expression(condition)
            .set_expression_attribute_names(Some(names))
            .set_expression_attribute_values(values)
            .build()
            .map_err(|e| unavailable(Self::call_failed(&self.deployments, "Put", e)))?;
        Ok(TransactWriteItem::builder().put(put).build())
    }

    /// The condition that the header is as loaded: absent, or at the revision loaded.
    #[allow(clippy::type_complexity)]
    fn as_loaded(
        loaded_at: Option<u64>,
    ) -> (
        &'static str,
        HashMap<String, String>,
        Option<HashMap<String, AttributeValue>>,
    ) {
        match loaded_at {
            None => (
                "attribute_not_exists(#id)",
                HashMap::from([("#id".to_owned(), ID.to_owned())]),
                None,
            ),
            Some(revision) => (
                "#r = :loaded",
                HashMap::from([("#r".to_owned(), REVISION.to_owned())]),
                Some(HashMap::from([(
                    ":loaded".to_owned(),
                    AttributeValue::N(revision.to_string()),
                )])),
            ),
        }
    }

    /// A check, in a transaction of steps alone, that the header is still as loaded.
    fn check_header(
        &self,
        view: &DeploymentView,
        loaded_at: Option<u64>,
    ) -> Result<TransactWriteItem, ViewError> {
        let (condition, names, values) = Self::as_loaded(loaded_at);
        let check = ConditionCheck::builder()
            .table_name(&self.deployments)
            .key(ID, AttributeValue::S(view.id.to_string()))
            .key(ITEM, AttributeValue::S(HEADER.to_owned()))
            .condition_expression(condition)
            .set_expression_attribute_names(Some(names))
            .set_expression_attribute_values(values)
            .build()
            .map_err(|e| unavailable(Self::call_failed(&self.deployments, "ConditionCheck", e)))?;
        Ok(TransactWriteItem::builder().condition_check(check).build())
    }

    /// A step's put, unless the stored step was written at a later revision.
    fn put_step(
        &self,
        view: &DeploymentView,
        position: usize,
        name: &str,
        json: String,
    ) -> Result<TransactWriteItem, ViewError> {
        let put = Put::builder()
            .table_name(&self.deployments)
            .item(ID, AttributeValue::S(view.id.to_string()))
            .item(ITEM, AttributeValue::S(format!("{STEP}{name}")))
            .item(POSITION, AttributeValue::N(position.to_string()))
            .item(REVISION, AttributeValue::N(view.revision.to_string()))
            .item(VIEW, AttributeValue::S(json))
            .condition_expression("attribute_not_exists(#id) OR #r <= :r")
            .expression_attribute_names("#id", ID)
            .expression_attribute_names("#r", REVISION)
            .expression_attribute_values(":r", AttributeValue::N(view.revision.to_string()))
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

    /// Runs one transaction; `tenant_at` is where the tenant's update is among `writes`, and a
    /// failed condition on any other write means the view moved.
    async fn transact(
        &self,
        writes: Vec<TransactWriteItem>,
        tenant_at: Option<usize>,
    ) -> Result<Saved, ViewError> {
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
        let moved = (0..reasons.len()).any(|index| Some(index) != tenant_at && failed(index));
        if moved {
            Ok(Saved::ViewMoved)
        } else if tenant_at.is_some_and(failed) {
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
        let id = deployment.to_string();
        let items = self.query_deployment(&id).await?;
        self.assemble(&id, &items)
    }

    async fn view_of_steps(
        &self,
        deployment: DeploymentId,
        steps: &BTreeSet<String>,
    ) -> Result<Option<DeploymentView>, ViewError> {
        let id = deployment.to_string();
        let keys = std::iter::once(HEADER.to_owned())
            .chain(steps.iter().map(|name| format!("{STEP}{name}")))
            .collect();
        let items = self.get_items(&id, keys).await?;
        self.assemble(&id, &items)
    }

    async fn save(
        &self,
        view: &DeploymentView,
        loaded_at: Option<u64>,
        delta: &TenantDelta,
        steps: &BTreeSet<String>,
        registry: &Registry,
    ) -> Result<(), ViewError> {
        let too_large = |bytes: usize| ViewError::TooLarge {
            deployment: view.id,
            bytes,
            limit: MAX_ITEM_BYTES,
        };
        let json =
            serde_json::to_string(&view.header()).map_err(|e| ViewError::Corrupt(Box::new(e)))?;
        // The attributes beside the view and their names take well under a kilobyte.
        let bytes = json.len() + view.tenant.len() + 256;
        if bytes > MAX_ITEM_BYTES {
            return Err(too_large(bytes));
        }
        let mut step_writes = Vec::with_capacity(steps.len());
        for name in steps {
            if let Some((position, name, step)) = view.steps.get_full(name) {
                let json =
                    serde_json::to_string(step).map_err(|e| ViewError::Corrupt(Box::new(e)))?;
                let bytes = json.len() + name.len() + 256;
                if bytes > MAX_ITEM_BYTES {
                    return Err(too_large(bytes));
                }
                step_writes.push(self.put_step(view, position, name, json)?);
            }
        }
        // The registry's writes go with the steps': beside the header, or before it with the
        // check that it is still as loaded.
        step_writes.extend(self.registry_writes(view.revision, registry)?);
        let moved = || ViewError::Conflict {
            deployment: view.id,
            loaded_at,
        };
        // Steps beyond what the last transaction holds beside the header and the tenant go
        // first, each batch with a check that the header is still as loaded.
        let in_last = TRANSACTION_ITEMS - 2;
        while step_writes.len() > in_last {
            let rest = step_writes.split_off((TRANSACTION_ITEMS - 1).min(step_writes.len()));
            let batch = std::mem::replace(&mut step_writes, rest);
            let mut writes = vec![self.check_header(view, loaded_at)?];
            writes.extend(batch);
            self.transact_until_done(writes, None, moved).await?;
        }
        let mut newest = true;
        for _ in 0..TRANSACTION_CONFLICT_TRIES {
            let mut writes = vec![self.put_header(view, json.clone(), loaded_at)?];
            let tenant = self.update_tenant(&view.tenant, delta, newest)?;
            let tenant_at = tenant.as_ref().map(|_| 1);
            writes.extend(tenant);
            writes.extend(step_writes.iter().cloned());
            match self.transact(writes, tenant_at).await? {
                Saved::Done => return Ok(()),
                Saved::ViewMoved => return Err(moved()),
                Saved::NotNewest => newest = false,
                Saved::Busy => {}
            }
        }
        Err(self.too_busy())
    }

    async fn tenant(&self, tenant: &str) -> Result<Option<TenantView>, ViewError> {
        self.get(&self.tenants, TENANT, tenant.to_owned())
            .await?
            .map(|item| self.tenant_view(&item))
            .transpose()
    }
}

impl DynamoReadModels {
    /// Runs a transaction of steps, again while other transactions hold its items.
    async fn transact_until_done(
        &self,
        writes: Vec<TransactWriteItem>,
        tenant_at: Option<usize>,
        moved: impl Fn() -> ViewError,
    ) -> Result<(), ViewError> {
        for _ in 0..TRANSACTION_CONFLICT_TRIES {
            match self.transact(writes.clone(), tenant_at).await? {
                Saved::Done => return Ok(()),
                Saved::ViewMoved | Saved::NotNewest => return Err(moved()),
                Saved::Busy => {}
            }
        }
        Err(self.too_busy())
    }

    fn too_busy(&self) -> ViewError {
        unavailable(DynamoError::Call {
            table: format!("{} and {}", self.deployments, self.tenants),
            operation: "TransactWriteItems",
            message: format!(
                "cancelled {TRANSACTION_CONFLICT_TRIES} times by concurrent transactions"
            ),
        })
    }
}

/// The partition of a tenant's service registry.
fn registry_partition(tenant: &str) -> String {
    format!("{REGISTRY}{tenant}")
}

fn instance_sort_key(key: &InstanceKey) -> String {
    // The port at a fixed width, so that the partition lists in the registry's order.
    format!(
        "{INSTANCE}{}#{}#{:05}#{}",
        key.service, key.address, key.port, key.deployment
    )
}

fn interest_prefix(service: &str) -> String {
    format!("{INTEREST}{service}#")
}

fn from_view(error: ViewError) -> RegistryError {
    match error {
        ViewError::Unavailable(source) => RegistryError::Unavailable(source),
        other => RegistryError::Corrupt(Box::new(other)),
    }
}

impl DynamoReadModels {
    /// The writes of what `registry` sets, by records up to `revision`: instances deleted and
    /// put unless written at a later revision, interests put (watching wins).
    fn registry_writes(
        &self,
        revision: u64,
        registry: &Registry,
    ) -> Result<Vec<TransactWriteItem>, ViewError> {
        let build_failed =
            |operation, e| unavailable(Self::call_failed(&self.deployments, operation, e));
        let not_later = "attribute_not_exists(#id) OR #r <= :r";
        let mut writes = Vec::new();
        for key in &registry.removed {
            let delete = Delete::builder()
                .table_name(&self.deployments)
                .key(ID, AttributeValue::S(registry_partition(&key.tenant)))
                .key(ITEM, AttributeValue::S(instance_sort_key(key)))
                .condition_expression(not_later)
                .expression_attribute_names("#id", ID)
                .expression_attribute_names("#r", REVISION)
                .expression_attribute_values(":r", AttributeValue::N(revision.to_string()))
                .build()
                .map_err(|e| build_failed("Delete", e))?;
            writes.push(TransactWriteItem::builder().delete(delete).build());
        }
        for (key, registered) in &registry.instances {
            let put = Put::builder()
                .table_name(&self.deployments)
                .item(ID, AttributeValue::S(registry_partition(&key.tenant)))
                .item(ITEM, AttributeValue::S(instance_sort_key(key)))
                .item(SERVICE, AttributeValue::S(key.service.clone()))
                .item(ADDRESS, AttributeValue::S(key.address.clone()))
                .item(PORT, AttributeValue::N(key.port.to_string()))
                .item(DEPLOYMENT, AttributeValue::S(key.deployment.to_string()))
                .item(
                    STEP_NAME,
                    AttributeValue::S(registered.instance.step.clone()),
                )
                .item(HOST, AttributeValue::S(registered.instance.host.clone()))
                .item(
                    REGISTERED_AT,
                    AttributeValue::S(timestamp(registered.registered_at)),
                )
                .item(REVISION, AttributeValue::N(revision.to_string()))
                .condition_expression(not_later)
                .expression_attribute_names("#id", ID)
                .expression_attribute_names("#r", REVISION)
                .expression_attribute_values(":r", AttributeValue::N(revision.to_string()))
                .build()
                .map_err(|e| build_failed("Put", e))?;
            writes.push(TransactWriteItem::builder().put(put).build());
        }
        for (key, watched) in &registry.interests {
            let InterestKey {
                tenant,
                service,
                deployment,
            } = key;
            // Watching wins over requiring: `true` is always written, `false` only on a new row.
            let watching = if *watched {
                "#w = :w"
            } else {
                "#w = if_not_exists(#w, :w)"
            };
            let update = Update::builder()
                .table_name(&self.deployments)
                .key(ID, AttributeValue::S(registry_partition(tenant)))
                .key(
                    ITEM,
                    AttributeValue::S(format!("{}{deployment}", interest_prefix(service))),
                )
                .update_expression(format!("SET #s = :s, #d = :d, {watching}"))
                .expression_attribute_names("#s", SERVICE)
                .expression_attribute_names("#d", DEPLOYMENT)
                .expression_attribute_names("#w", WATCHED)
                .expression_attribute_values(":s", AttributeValue::S(service.clone()))
                .expression_attribute_values(":d", AttributeValue::S(deployment.to_string()))
                .expression_attribute_values(":w", AttributeValue::Bool(*watched));
            let update = update.build().map_err(|e| build_failed("Update", e))?;
            writes.push(TransactWriteItem::builder().update(update).build());
        }
        Ok(writes)
    }

    /// Every item of a tenant's registry partition whose sort key starts with `prefix`,
    /// strongly consistent, page after page.
    async fn query_registry(
        &self,
        tenant: &str,
        prefix: &str,
    ) -> Result<Vec<HashMap<String, AttributeValue>>, ViewError> {
        self.query_partition(&registry_partition(tenant), Some(prefix))
            .await
    }

    fn registry_item_error(&self, tenant: &str, reason: String) -> ViewError {
        corrupt(DynamoError::CorruptView {
            table: self.deployments.clone(),
            key: registry_partition(tenant),
            reason,
        })
    }

    /// A registered instance from its item.
    fn instance_of(
        &self,
        tenant: &str,
        item: &HashMap<String, AttributeValue>,
    ) -> Result<(InstanceKey, RegisteredInstance), ViewError> {
        let bad = |reason: String| self.registry_item_error(tenant, reason);
        let text = |name: &str| {
            item.get(name)
                .and_then(|v| v.as_s().ok())
                .cloned()
                .ok_or_else(|| bad(format!("an instance without the text attribute `{name}`")))
        };
        let port = item
            .get(PORT)
            .and_then(|v| v.as_n().ok())
            .and_then(|n| n.parse::<u16>().ok())
            .ok_or_else(|| bad(format!("an instance whose `{PORT}` is not a port")))?;
        let deployment = text(DEPLOYMENT)?;
        let deployment: DeploymentId = deployment
            .parse()
            .map_err(|e| bad(format!("`{deployment}`, not a deployment id: {e}")))?;
        let registered_at = text(REGISTERED_AT)?;
        let registered_at = chrono::DateTime::parse_from_rfc3339(&registered_at)
            .map_err(|e| bad(format!("`{REGISTERED_AT}`: {e}")))?
            .with_timezone(&chrono::Utc);
        let key = InstanceKey {
            tenant: tenant.to_owned(),
            service: text(SERVICE)?,
            address: text(ADDRESS)?,
            port,
            deployment,
        };
        let registered = RegisteredInstance {
            deployment,
            instance: ServiceInstance {
                service: key.service.clone(),
                step: text(STEP_NAME)?,
                host: text(HOST)?,
                address: key.address.clone(),
                port,
            },
            registered_at,
        };
        Ok((key, registered))
    }

    /// The tenant's registered instances, in the registry's order.
    async fn tenant_instances(&self, tenant: &str) -> Result<Vec<RegisteredInstance>, ViewError> {
        let mut instances = self
            .query_registry(tenant, INSTANCE)
            .await?
            .iter()
            .map(|item| self.instance_of(tenant, item))
            .collect::<Result<Vec<_>, _>>()?;
        // The sort keys list them so already; the keys' own order says it for certain.
        instances.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(instances.into_iter().map(|(_, r)| r).collect())
    }

    /// The tenant's deployments interested in `service` that still care about it.
    async fn interested(
        &self,
        tenant: &str,
        service: &str,
    ) -> Result<Vec<DeploymentId>, ViewError> {
        let mut rows = Vec::new();
        for item in self
            .query_registry(tenant, &interest_prefix(service))
            .await?
        {
            // A prefix could match a longer name with `#` in it: the attribute says for sure.
            if item
                .get(SERVICE)
                .and_then(|v| v.as_s().ok())
                .map(String::as_str)
                != Some(service)
            {
                continue;
            }
            let bad = |reason: String| self.registry_item_error(tenant, reason);
            let deployment = item
                .get(DEPLOYMENT)
                .and_then(|v| v.as_s().ok())
                .ok_or_else(|| bad(format!("an interest without `{DEPLOYMENT}`")))?;
            let deployment: DeploymentId = deployment
                .parse()
                .map_err(|e| bad(format!("`{deployment}`, not a deployment id: {e}")))?;
            let watched = item
                .get(WATCHED)
                .and_then(|v| v.as_bool().ok())
                .copied()
                .ok_or_else(|| {
                    bad(format!(
                        "an interest whose `{WATCHED}` is not true or false"
                    ))
                })?;
            rows.push((deployment, watched));
        }
        let keys = rows
            .iter()
            .map(|(id, _)| (id.to_string(), HEADER.to_owned()))
            .collect();
        let mut headers = HashMap::new();
        for item in self.get_keys(keys).await? {
            let Some(id) = item.get(ID).and_then(|v| v.as_s().ok()).cloned() else {
                continue;
            };
            if let Some(view) = self.assemble(&id, std::slice::from_ref(&item))? {
                headers.insert(view.id, view);
            }
        }
        let mut interested: Vec<DeploymentId> = rows
            .into_iter()
            .filter(|(id, watched)| {
                headers.get(id).is_some_and(|view| {
                    let destroy = view.destroy.as_ref().map(|d| d.status);
                    still_interested(view.status, destroy, *watched)
                })
            })
            .map(|(id, _)| id)
            .collect();
        interested.sort();
        interested.dedup();
        Ok(interested)
    }
}

#[async_trait]
impl ReadServiceRegistry for DynamoReadModels {
    async fn service_instances(
        &self,
        tenant: &str,
    ) -> Result<Vec<RegisteredInstance>, RegistryError> {
        self.tenant_instances(tenant).await.map_err(from_view)
    }

    async fn interested_deployments(
        &self,
        tenant: &str,
        service: &str,
    ) -> Result<Vec<DeploymentId>, RegistryError> {
        self.interested(tenant, service).await.map_err(from_view)
    }
}

/// Creates the deployments and tenants tables unless they exist. For development and tests; on
/// AWS the stack makes them.
pub async fn create_read_model_tables(
    client: &Client,
    deployments: &str,
    tenants: &str,
) -> Result<(), DynamoError> {
    create_sorted_table_with_index(
        client,
        deployments,
        ID,
        ITEM,
        KeysIndex {
            name: BY_TENANT,
            partition: TENANT,
            sort: STARTED_AT,
        },
    )
    .await?;
    create_table_keyed_by(client, tenants, TENANT).await
}
