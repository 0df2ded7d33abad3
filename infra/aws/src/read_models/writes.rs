//! Saving a deployment's view ([`DeploymentViews`]): the header, the changed steps and the
//! tenant's counters in one conditional transaction, tried again while DynamoDB is busy.

use std::collections::{BTreeSet, HashMap};

use async_trait::async_trait;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{AttributeValue, ConditionCheck, Put, TransactWriteItem, Update};
use overture_domain::projection::{DeploymentView, TenantDelta, TenantView};
use overture_domain::registry::Registry;
use overture_events::DeploymentId;
use overture_projector::{DeploymentViews, ViewError};

use super::{
    timestamp, unavailable, DynamoReadModels, Saved, HEADER, ID, ITEM, LAST_DEPLOYMENT_AT,
    POSITION, REVISION, STARTED_AT, STATUS, STEP, TENANT, TRANSACTION_CONFLICT_TRIES,
    TRANSACTION_ITEMS, VIEW,
};
use crate::dynamodb::{DynamoError, MAX_ITEM_BYTES};

impl DynamoReadModels {
    /// The header's put, conditional on the view being as loaded.
    pub(super) fn put_header(
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
    pub(super) fn as_loaded(
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
    pub(super) fn check_header(
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
    pub(super) fn put_step(
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
    pub(super) fn update_tenant(
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
    pub(super) async fn transact(
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
pub(super) fn cancelled(error: &SdkError<TransactWriteItemsError>) -> Option<Vec<Option<String>>> {
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
    async fn view(
        &self,
        deployment: DeploymentId,
    ) -> Result<Option<DeploymentView>, ViewError> {
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
    pub(super) async fn transact_until_done(
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

    pub(super) fn too_busy(&self) -> ViewError {
        unavailable(DynamoError::Call {
            table: format!("{} and {}", self.deployments, self.tenants),
            operation: "TransactWriteItems",
            message: format!(
                "cancelled {TRANSACTION_CONFLICT_TRIES} times by concurrent transactions"
            ),
        })
    }
}
