//! Reading the read models: a deployment's items assembled into its view, a tenant's
//! deployments through the index, every tenant's summary; every page followed.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::{AttributeValue, KeysAndAttributes};
use indexmap::IndexMap;
use overture_domain::projection::{DeploymentView, Header, StepView, TenantView};
use overture_projector::ViewError;

use super::{
    corrupt, unavailable, DynamoReadModels, BATCH_GET_KEYS, BY_TENANT, HEADER, ID, ITEM,
    LAST_DEPLOYMENT_AT, POSITION, STEP, TENANT, VIEW,
};
use crate::dynamodb::DynamoError;

impl DynamoReadModels {
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
    pub(super) async fn tenant_deployments(&self, tenant: &str) -> Result<Vec<String>, ViewError> {
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
    pub(super) async fn query_deployment(
        &self,
        id: &str,
    ) -> Result<Vec<HashMap<String, AttributeValue>>, ViewError> {
        self.query_partition(id, None).await
    }

    /// Every item of one partition of the deployments table, those whose sort key starts with
    /// `prefix` when one is given, strongly consistent, page after page.
    pub(super) async fn query_partition(
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
    pub(super) async fn get_items(
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
    pub(super) async fn get_keys(
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

    pub(super) async fn scan(
        &self,
        table: &str,
    ) -> Result<Vec<HashMap<String, AttributeValue>>, ViewError> {
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

    pub(super) async fn get(
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
    pub(super) fn assemble(
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

    pub(super) fn tenant_view(
        &self,
        item: &HashMap<String, AttributeValue>,
    ) -> Result<TenantView, ViewError> {
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
}
