//! The tenants' service registry, kept in the deployments table one partition per tenant:
//! what a save writes in it, and [`ReadServiceRegistry`].

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::{AttributeValue, Delete, Put, TransactWriteItem, Update};
use overture_domain::registry::{still_interested, InstanceKey, InterestKey, Registry};
use overture_domain::services::{RegisteredInstance, ServiceInstance};
use overture_events::DeploymentId;
use overture_kit::registry::{ReadServiceRegistry, RegistryError};
use overture_projector::ViewError;

use super::{
    corrupt, timestamp, unavailable, DynamoReadModels, ADDRESS, DEPLOYMENT, HEADER, HOST, ID,
    INSTANCE, INTEREST, ITEM, PORT, REGISTERED_AT, REGISTRY, REVISION, SERVICE, STEP_NAME, WATCHED,
};
use crate::dynamodb::DynamoError;

/// The partition of a tenant's service registry.
pub(super) fn registry_partition(tenant: &str) -> String {
    format!("{REGISTRY}{tenant}")
}

pub(super) fn instance_sort_key(key: &InstanceKey) -> String {
    // The port at a fixed width, so that the partition lists in the registry's order.
    format!(
        "{INSTANCE}{}#{}#{:05}#{}",
        key.service, key.address, key.port, key.deployment
    )
}

pub(super) fn interest_prefix(service: &str) -> String {
    format!("{INTEREST}{service}#")
}

pub(super) fn from_view(error: ViewError) -> RegistryError {
    match error {
        ViewError::Unavailable(source) => RegistryError::Unavailable(source),
        other => RegistryError::Corrupt(Box::new(other)),
    }
}

impl DynamoReadModels {
    /// The writes of what `registry` sets, by records up to `revision`: instances deleted and
    /// put unless written at a later revision, interests put (watching wins).
    pub(super) fn registry_writes(
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
    pub(super) async fn query_registry(
        &self,
        tenant: &str,
        prefix: &str,
    ) -> Result<Vec<HashMap<String, AttributeValue>>, ViewError> {
        self.query_partition(&registry_partition(tenant), Some(prefix))
            .await
    }

    pub(super) fn registry_item_error(&self, tenant: &str, reason: String) -> ViewError {
        corrupt(DynamoError::CorruptView {
            table: self.deployments.clone(),
            key: registry_partition(tenant),
            reason,
        })
    }

    /// A registered instance from its item.
    pub(super) fn instance_of(
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
    pub(super) async fn tenant_instances(
        &self,
        tenant: &str,
    ) -> Result<Vec<RegisteredInstance>, ViewError> {
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
    pub(super) async fn interested(
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
