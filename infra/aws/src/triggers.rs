//! The triggers function's adapters on AWS.
//!
//! - [`DynamoTriggerLedger`]: claims and decisions in one DynamoDB table, keyed by `partition`
//!   and `sort`. A claim is an item of its own (`claim`, the JSON array of source, event id and
//!   trigger), put on the condition that it does not exist: of many receivers of one event,
//!   exactly one wins. Decisions share the partition `decisions`, sorted by time and a v7 UUID,
//!   so `overture triggers log` reads them oldest first with one query. (One partition takes
//!   ~1,000 writes a second, far more than triggers fire.)
//! - [`S3TriggerBundle`]: the published trigger file with its blueprints, one object
//!   ([`BUNDLE_KEY`]) in the payloads bucket.
//! - [`SqsEvents`]: events published on the trigger events queue, where the triggers function
//!   receives them: a deployment's end, or an event the HTTP API was sent (`POST /v1/events` on
//!   the api function, queued for the caller's tenant; the triggers decide later).

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::error::{DisplayErrorContext, SdkError};
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_sqs::types::MessageAttributeValue;
#[cfg(feature = "api")]
use overture_api::events::Delivered;
#[cfg(feature = "api")]
use overture_api::{DeliverError, DeliverEvents};
use overture_domain::trigger::IncomingEvent;
use overture_triggers::bundle::{BundleError, LoadBundle, TriggerBundle};
use overture_triggers::ends::{PublishError, PublishEvents};
use overture_triggers::queue::TENANT_ATTRIBUTE;
use overture_triggers::{Claim, LedgerError, TriggerDecision, TriggerLedger, Verdict};

use crate::dynamodb::DynamoError;
use crate::s3::{passes, S3Error};

/// The key of the published trigger bundle in the payloads bucket.
pub const BUNDLE_KEY: &str = "triggers/bundle.json";

const PARTITION: &str = "partition";
const SORT: &str = "sort";
const DECISIONS: &str = "decisions";
/// The sort key of a claim, which is alone in its partition.
const CLAIMED: &str = "claimed";

/// The trigger ledger in a DynamoDB table.
#[derive(Clone, Debug)]
pub struct DynamoTriggerLedger {
    client: aws_sdk_dynamodb::Client,
    table: String,
}

impl DynamoTriggerLedger {
    /// The ledger in `table`.
    pub fn new(client: aws_sdk_dynamodb::Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
        }
    }

    fn failed<E>(&self, operation: &'static str, error: SdkError<E>) -> LedgerError
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
            LedgerError::Unavailable(error)
        } else {
            LedgerError::Failed(error)
        }
    }

    fn corrupt(&self, key: &str, reason: &str) -> LedgerError {
        LedgerError::Failed(Box::new(DynamoError::CorruptView {
            table: self.table.clone(),
            key: key.to_owned(),
            reason: reason.to_owned(),
        }))
    }
}

/// A claim's partition key: unambiguous whatever characters the event's source and id hold.
fn claim_key(claim: Claim<'_>) -> String {
    serde_json::json!([claim.source, claim.event_id, claim.trigger]).to_string()
}

fn text(value: &str) -> AttributeValue {
    AttributeValue::S(value.to_owned())
}

#[async_trait]
impl TriggerLedger for DynamoTriggerLedger {
    async fn claim(&self, claim: Claim<'_>, at: &str) -> Result<bool, LedgerError> {
        let put = self
            .client
            .put_item()
            .table_name(&self.table)
            .item(PARTITION, text(&claim_key(claim)))
            .item(SORT, text(CLAIMED))
            .item("at", text(at))
            .condition_expression("attribute_not_exists(#partition)")
            .expression_attribute_names("#partition", PARTITION)
            .send()
            .await;
        match put {
            Ok(_) => Ok(true),
            Err(error)
                if error
                    .as_service_error()
                    .is_some_and(|e| e.is_conditional_check_failed_exception()) =>
            {
                Ok(false)
            }
            Err(error) => Err(self.failed("PutItem", error)),
        }
    }

    async fn release(&self, claim: Claim<'_>) -> Result<(), LedgerError> {
        self.client
            .delete_item()
            .table_name(&self.table)
            .key(PARTITION, text(&claim_key(claim)))
            .key(SORT, text(CLAIMED))
            .send()
            .await
            .map_err(|e| self.failed("DeleteItem", e))?;
        Ok(())
    }

    async fn record(&self, decision: &TriggerDecision) -> Result<(), LedgerError> {
        // The time sorts the partition; the UUID keeps two decisions of one millisecond apart.
        let sort = format!("{}/{}", decision.at, uuid::Uuid::now_v7());
        let mut put = self
            .client
            .put_item()
            .table_name(&self.table)
            .item(PARTITION, text(DECISIONS))
            .item(SORT, text(&sort))
            .item("at", text(&decision.at))
            .item("source", text(&decision.source))
            .item("event_id", text(&decision.event_id))
            .item("trigger", text(&decision.trigger))
            .item("decision", text(decision.decision.as_str()))
            .item("reason", text(&decision.reason));
        if let Some(deployment) = &decision.deployment {
            put = put.item("deployment", text(deployment));
        }
        put.send().await.map_err(|e| self.failed("PutItem", e))?;
        Ok(())
    }

    async fn decisions(&self) -> Result<Vec<TriggerDecision>, LedgerError> {
        let mut decisions = Vec::new();
        let mut start: Option<HashMap<String, AttributeValue>> = None;
        loop {
            let page = self
                .client
                .query()
                .table_name(&self.table)
                .consistent_read(true)
                .key_condition_expression("#partition = :decisions")
                .expression_attribute_names("#partition", PARTITION)
                .expression_attribute_values(":decisions", text(DECISIONS))
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(|e| self.failed("Query", e))?;
            for item in page.items() {
                decisions.push(self.decision(item)?);
            }
            match page.last_evaluated_key() {
                Some(key) if !key.is_empty() => start = Some(key.clone()),
                _ => return Ok(decisions),
            }
        }
    }
}

impl DynamoTriggerLedger {
    /// A decision item read back.
    fn decision(
        &self,
        item: &HashMap<String, AttributeValue>,
    ) -> Result<TriggerDecision, LedgerError> {
        let sort = item
            .get(SORT)
            .and_then(|v| v.as_s().ok())
            .map_or("?", |s| s);
        let field = |name: &str| -> Result<String, LedgerError> {
            item.get(name)
                .and_then(|value| value.as_s().ok())
                .cloned()
                .ok_or_else(|| self.corrupt(sort, &format!("no text attribute `{name}`")))
        };
        let verdict = field("decision")?;
        Ok(TriggerDecision {
            at: field("at")?,
            source: field("source")?,
            event_id: field("event_id")?,
            trigger: field("trigger")?,
            decision: Verdict::parse(&verdict)
                .ok_or_else(|| self.corrupt(sort, &format!("unknown decision `{verdict}`")))?,
            deployment: item
                .get("deployment")
                .and_then(|value| value.as_s().ok())
                .cloned(),
            reason: field("reason")?,
        })
    }
}

/// Creates the trigger ledger's table unless it exists. For development and tests; on AWS the
/// stack makes it.
pub async fn create_triggers_table(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
) -> Result<(), DynamoError> {
    crate::dynamodb::create_sorted_table(client, table, PARTITION, SORT).await
}

/// The published trigger bundle, an object of the payloads bucket.
#[derive(Clone, Debug)]
pub struct S3TriggerBundle {
    client: aws_sdk_s3::Client,
    bucket: String,
}

impl S3TriggerBundle {
    /// The bundle in `bucket`, through `client` (see [`crate::s3::client`]).
    pub fn new(client: aws_sdk_s3::Client, bucket: impl Into<String>) -> Self {
        Self {
            client,
            bucket: bucket.into(),
        }
    }

    fn failed<E>(&self, operation: &'static str, error: SdkError<E>) -> S3Error
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        S3Error {
            bucket: self.bucket.clone(),
            operation,
            message: DisplayErrorContext(&error).to_string(),
        }
    }

    /// Publishes the bundle, replacing the one before: the function reads it from its next
    /// batch on.
    pub async fn publish(&self, bundle: &TriggerBundle) -> Result<(), S3Error> {
        self.client
            .put_object()
            .bucket(&self.bucket)
            .key(BUNDLE_KEY)
            .content_type("application/json")
            .body(ByteStream::from(bundle.to_json().into_bytes()))
            .send()
            .await
            .map_err(|e| self.failed("PutObject", e))?;
        Ok(())
    }
}

#[async_trait]
impl LoadBundle for S3TriggerBundle {
    async fn load(&self) -> Result<Option<TriggerBundle>, BundleError> {
        let object = match self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(BUNDLE_KEY)
            .send()
            .await
        {
            Ok(object) => object,
            Err(error) if error.as_service_error().is_some_and(|e| e.is_no_such_key()) => {
                return Ok(None)
            }
            Err(error) if passes(&error) => {
                return Err(BundleError::Unavailable(Box::new(
                    self.failed("GetObject", error),
                )))
            }
            Err(error) => {
                return Err(BundleError::Invalid(
                    self.failed("GetObject", error).to_string(),
                ))
            }
        };
        let body = object.body.collect().await.map_err(|error| {
            BundleError::Unavailable(Box::new(S3Error {
                bucket: self.bucket.clone(),
                operation: "GetObject",
                message: format!("reading the object: {}", DisplayErrorContext(&error)),
            }))
        })?;
        let text = String::from_utf8(body.into_bytes().to_vec())
            .map_err(|e| BundleError::Invalid(e.to_string()))?;
        TriggerBundle::from_json(&text).map(Some)
    }
}

/// Events on the trigger events queue.
#[derive(Clone, Debug)]
pub struct SqsEvents {
    client: aws_sdk_sqs::Client,
    url: String,
}

impl SqsEvents {
    /// The queue at `url`.
    pub fn new(client: aws_sdk_sqs::Client, url: impl Into<String>) -> Self {
        Self {
            client,
            url: url.into(),
        }
    }

    /// Puts the event (its JSON text) on the queue, delivered for `tenant` when given (the
    /// triggers of other tenants then refuse it).
    pub async fn send(&self, event: &str, tenant: Option<&str>) -> Result<String, PublishError> {
        let mut send = self
            .client
            .send_message()
            .queue_url(&self.url)
            .message_body(event);
        if let Some(tenant) = tenant {
            let attribute = MessageAttributeValue::builder()
                .data_type("String")
                .string_value(tenant)
                .build()
                .map_err(|e| PublishError::Refused(Box::new(e)))?;
            send = send.message_attributes(TENANT_ATTRIBUTE, attribute);
        }
        let sent = send.send().await.map_err(|error| {
            let retryable = passes(&error);
            let error = Box::new(crate::sqs::SqsError::Call {
                queue: self.url.clone(),
                operation: "SendMessage",
                message: DisplayErrorContext(&error).to_string(),
            });
            if retryable {
                PublishError::Unavailable(error)
            } else {
                PublishError::Refused(error)
            }
        })?;
        Ok(sent.message_id().unwrap_or_default().to_owned())
    }
}

#[async_trait]
impl PublishEvents for SqsEvents {
    async fn publish(&self, event: &IncomingEvent) -> Result<(), PublishError> {
        self.send(&event.document.to_string(), None).await?;
        Ok(())
    }
}

#[cfg(feature = "api")]
#[async_trait]
impl DeliverEvents for SqsEvents {
    async fn deliver(&self, event: &str, tenant: &str) -> Result<Delivered, DeliverError> {
        let value = serde_json::from_str(event)
            .map_err(|e| DeliverError::NotAnEvent(format!("the event: not JSON: {e}")))?;
        let incoming = IncomingEvent::from_json(value)
            .map_err(|e| DeliverError::NotAnEvent(format!("the event: {e}")))?;
        let message = self.send(event, Some(tenant)).await.map_err(|error| {
            if error.is_retryable() {
                DeliverError::Unavailable(Box::new(error))
            } else {
                DeliverError::Failed(Box::new(error))
            }
        })?;
        // The triggers function decides later; `overture triggers log` shows what it decided.
        Ok(Delivered {
            source: incoming.source,
            id: incoming.id,
            deployments: Vec::new(),
            decisions: Vec::new(),
            queued: Some(message),
        })
    }
}
