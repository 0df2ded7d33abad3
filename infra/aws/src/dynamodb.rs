//! The event log on a DynamoDB table.
//!
//! One item per event, keyed by stream (partition key `stream`) and revision (sort key
//! `revision`); the envelope's other fields are attributes: `id`, `type`, and `data` and
//! `metadata` as JSON text. Items are only ever put, never updated or deleted.
//!
//! - **Appends** write all of a command's events in one `TransactWriteItems`, each `Put`
//!   conditional on `attribute_not_exists(revision)`: of two writers at one revision exactly one
//!   succeeds, and the other's cancelled transaction (reason `ConditionalCheckFailed`) becomes
//!   the same typed [`LogError::Conflict`] as on SQLite. A transaction holds at most
//!   [`MAX_EVENTS_PER_APPEND`] actions and an item at most 400 KB: a command beyond either is
//!   refused whole ([`LogError::TooLarge`]), never split, so an append stays all or nothing.
//! - **Chains**: each event records the link of the event before it and its own
//!   ([`overture_events::chain`]), in its `metadata`. An append after revision n needs n's link:
//!   this client keeps the last link it read or wrote of each deployment, so on the usual path
//!   (load, decide, append) it reads nothing more; otherwise it reads item n (strongly
//!   consistent). Items are never changed, so that link stays n's, and the conditional puts
//!   make sure the new events follow n and nothing else. An item an older Overture wrote has no
//!   link: its stream's unchained events are linked as they stand when the next event is
//!   appended, which then attests them.
//! - **An expected revision ahead of the stream's end** would leave a gap: reading item n for
//!   its link shows that it exists (events are never deleted, so "revision n exists", once
//!   true, stays true), and an append after a revision that does not exist is a conflict.
//! - **Reads** are strongly consistent and follow `LastEvaluatedKey`, so a stream larger than
//!   one 1 MB page reads back whole.
//! - **Loading** keeps each deployment's last fold and reads only what is new, as the SQLite
//!   adapter does.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use aws_sdk_dynamodb::error::{DisplayErrorContext, SdkError};
use aws_sdk_dynamodb::operation::create_table::CreateTableError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, GlobalSecondaryIndex, KeySchemaElement,
    KeyType, Projection, ProjectionType, Put, ScalarAttributeType, StreamSpecification,
    StreamViewType, TransactWriteItem,
};
use aws_sdk_dynamodb::Client;
use overture_events::chain::{self, GENESIS};
use overture_events::{DeploymentEvent, DeploymentId, Envelope, Metadata};
use overture_kit::folds::Folds;
use overture_kit::{Cause, Clock, DeploymentLog, Loaded, LogError, ReadStream};
use uuid::Uuid;

/// The most events one append may hold: DynamoDB's limit of actions per transaction.
pub const MAX_EVENTS_PER_APPEND: usize = 100;
/// The largest item DynamoDB stores.
pub const MAX_ITEM_BYTES: usize = 400 * 1024;

const STREAM: &str = "stream";
const REVISION: &str = "revision";
const ID: &str = "id";
const TYPE: &str = "type";
const DATA: &str = "data";
const METADATA: &str = "metadata";

/// Why the table could not be used.
#[derive(Debug, thiserror::Error)]
pub enum DynamoError {
    /// A call to DynamoDB failed.
    #[error("DynamoDB table `{table}`: {operation} failed: {message}")]
    Call {
        /// The table.
        table: String,
        /// The API operation.
        operation: &'static str,
        /// What the SDK said, with its causes.
        message: String,
    },
    /// An item of the table does not hold an event.
    #[error("DynamoDB table `{table}`: the item of `{stream}` at revision {revision} is not an event: {reason}")]
    Corrupt {
        /// The table.
        table: String,
        /// The item's stream.
        stream: String,
        /// The item's revision, as stored.
        revision: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An item of a read-model table does not hold a view.
    #[error("DynamoDB table `{table}`: the item `{key}` is not a read model: {reason}")]
    CorruptView {
        /// The table.
        table: String,
        /// The item's key.
        key: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// Deployments stored in a DynamoDB table of events.
#[derive(Clone)]
pub struct DynamoDeployments {
    client: Client,
    table: String,
    clock: Arc<dyn Clock>,
    folds: Folds,
    heads: Heads,
}

/// The last link this client read or wrote of each deployment's stream, with its revision.
type Heads = Arc<Mutex<HashMap<DeploymentId, (u64, String)>>>;

impl DynamoDeployments {
    /// Deployments in `table`; `clock` stamps `recorded_at` on appended events.
    pub fn new(client: Client, table: impl Into<String>, clock: Arc<dyn Clock>) -> Self {
        Self {
            client,
            table: table.into(),
            clock,
            folds: Folds::default(),
            heads: Heads::default(),
        }
    }

    /// Keeps `link` as the link of `stream`'s event at `revision`, unless a later one is kept.
    fn keep_head(&self, deployment: DeploymentId, revision: u64, link: String) {
        let mut heads = self.heads.lock().unwrap_or_else(PoisonError::into_inner);
        let later = heads
            .get(&deployment)
            .is_some_and(|(kept, _)| *kept >= revision);
        if !later {
            heads.insert(deployment, (revision, link));
        }
    }

    /// The link of the event at `revision` of `deployment`'s stream, `None` when that event
    /// does not exist.
    async fn link_at(
        &self,
        deployment: DeploymentId,
        revision: u64,
    ) -> Result<Option<String>, DynamoError> {
        let kept = self
            .heads
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&deployment)
            .filter(|(kept, _)| *kept == revision)
            .map(|(_, link)| link.clone());
        if kept.is_some() {
            return Ok(kept);
        }
        let stream = deployment.stream();
        let found = self
            .client
            .get_item()
            .table_name(&self.table)
            .consistent_read(true)
            .key(STREAM, AttributeValue::S(stream.clone()))
            .key(REVISION, AttributeValue::N(revision.to_string()))
            // Only the metadata, which holds the link: the item's data may be 400 KB.
            .projection_expression("#m")
            .expression_attribute_names("#m", METADATA)
            .send()
            .await
            .map_err(|e| self.call_failed("GetItem", e))?;
        let Some(item) = found.item() else {
            return Ok(None);
        };
        let metadata: Metadata = item
            .get(METADATA)
            .and_then(|v| v.as_s().ok())
            .and_then(|text| serde_json::from_str(text).ok())
            .ok_or_else(|| DynamoError::Corrupt {
                table: self.table.clone(),
                stream: stream.clone(),
                revision: revision.to_string(),
                reason: "its metadata is not an event's".into(),
            })?;
        let link = match metadata.hash {
            Some(hash) => hash,
            None => self.unchained_head(&stream, revision).await?,
        };
        Ok(Some(link))
    }

    /// The link of revision `last` of a stream an older Overture began: each event's own link
    /// where it has one, else the one computed from its content, as [`chain::ChainCheck`] does.
    async fn unchained_head(&self, stream: &str, last: u64) -> Result<String, DynamoError> {
        let mut head = GENESIS.to_owned();
        for envelope in self.query(stream, 0).await? {
            if envelope.revision > last {
                break;
            }
            head = match envelope.metadata.hash.clone() {
                Some(hash) => hash,
                None => chain::link(&head, &chain::content_hash(&envelope)).unwrap_or_default(),
            };
        }
        Ok(head)
    }

    fn call_failed<E: std::error::Error + 'static>(
        &self,
        operation: &'static str,
        error: E,
    ) -> DynamoError {
        DynamoError::Call {
            table: self.table.clone(),
            operation,
            message: DisplayErrorContext(error).to_string(),
        }
    }

    /// The name of every stream the table holds, in order: a scan of the keys, page after page
    /// (for `overture verify`, which reads every stream).
    pub async fn streams(&self) -> Result<Vec<String>, DynamoError> {
        let mut streams = std::collections::BTreeSet::new();
        let mut start = None;
        loop {
            let page = self
                .client
                .scan()
                .table_name(&self.table)
                .consistent_read(true)
                .projection_expression("#s")
                .expression_attribute_names("#s", STREAM)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| self.call_failed("Scan", e))?;
            streams.extend(
                page.items()
                    .iter()
                    .filter_map(|item| item.get(STREAM)?.as_s().ok().cloned()),
            );
            match page.last_evaluated_key() {
                Some(key) if !key.is_empty() => start = Some(key.clone()),
                _ => return Ok(streams.into_iter().collect()),
            }
        }
    }

    /// Every event of `stream` from revision `from` on, page after page.
    async fn query(&self, stream: &str, from: u64) -> Result<Vec<Envelope>, DynamoError> {
        let mut envelopes = Vec::new();
        let mut start = None;
        loop {
            let page = self
                .client
                .query()
                .table_name(&self.table)
                .consistent_read(true)
                .key_condition_expression("#s = :s AND #r >= :from")
                .expression_attribute_names("#s", STREAM)
                .expression_attribute_names("#r", REVISION)
                .expression_attribute_values(":s", AttributeValue::S(stream.to_owned()))
                .expression_attribute_values(":from", AttributeValue::N(from.to_string()))
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| self.call_failed("Query", e))?;
            for item in page.items() {
                envelopes.push(self.envelope(stream, item)?);
            }
            match page.last_evaluated_key() {
                Some(key) if !key.is_empty() => start = Some(key.clone()),
                _ => return Ok(envelopes),
            }
        }
    }

    /// The put of one sealed event, conditional on its revision being free.
    fn put(
        &self,
        deployment: DeploymentId,
        envelope: &Envelope,
    ) -> Result<TransactWriteItem, LogError> {
        let data = envelope.data.to_string();
        let metadata = serde_json::to_string(&envelope.metadata).map_err(unavailable)?;
        let size =
            envelope.stream.len() + data.len() + metadata.len() + envelope.event_type.len() + 128;
        if size > MAX_ITEM_BYTES {
            return Err(LogError::TooLarge {
                deployment,
                reason: format!(
                    "event `{}` takes {size} bytes; a DynamoDB item holds at most \
                     {MAX_ITEM_BYTES}",
                    envelope.event_type
                ),
            });
        }
        let put = Put::builder()
            .table_name(&self.table)
            .item(STREAM, AttributeValue::S(envelope.stream.clone()))
            .item(REVISION, AttributeValue::N(envelope.revision.to_string()))
            .item(ID, AttributeValue::S(envelope.id.to_string()))
            .item(TYPE, AttributeValue::S(envelope.event_type.clone()))
            .item(DATA, AttributeValue::S(data))
            .item(METADATA, AttributeValue::S(metadata))
            .condition_expression("attribute_not_exists(#r)")
            .expression_attribute_names("#r", REVISION)
            .build()
            .map_err(unavailable)?;
        Ok(TransactWriteItem::builder().put(put).build())
    }

    fn envelope(
        &self,
        stream: &str,
        item: &HashMap<String, AttributeValue>,
    ) -> Result<Envelope, DynamoError> {
        let revision_text = item
            .get(REVISION)
            .and_then(|v| v.as_n().ok())
            .cloned()
            .unwrap_or_default();
        let corrupt = |reason: String| DynamoError::Corrupt {
            table: self.table.clone(),
            stream: stream.to_owned(),
            revision: revision_text.clone(),
            reason,
        };
        let text = |name: &str| {
            item.get(name)
                .and_then(|v| v.as_s().ok())
                .ok_or_else(|| corrupt(format!("no text attribute `{name}`")))
        };
        let revision = revision_text
            .parse::<u64>()
            .map_err(|_| corrupt("its revision is not a whole number".into()))?;
        let id = Uuid::try_parse(text(ID)?).map_err(|e| corrupt(format!("its id: {e}")))?;
        let data =
            serde_json::from_str(text(DATA)?).map_err(|e| corrupt(format!("its data: {e}")))?;
        let metadata: Metadata = serde_json::from_str(text(METADATA)?)
            .map_err(|e| corrupt(format!("its metadata: {e}")))?;
        Ok(Envelope {
            stream: stream.to_owned(),
            revision,
            id,
            event_type: text(TYPE)?.clone(),
            data,
            metadata,
        })
    }
}

fn unavailable(error: impl std::error::Error + Send + Sync + 'static) -> LogError {
    LogError::Unavailable(Box::new(error))
}

/// Whether a failed transaction was cancelled because a condition did not hold.
fn is_condition_failure(error: &SdkError<TransactWriteItemsError>) -> bool {
    match error.as_service_error() {
        Some(TransactWriteItemsError::TransactionCanceledException(cancelled)) => cancelled
            .cancellation_reasons()
            .iter()
            .any(|reason| reason.code() == Some("ConditionalCheckFailed")),
        _ => false,
    }
}

#[async_trait]
impl DeploymentLog for DynamoDeployments {
    async fn load(&self, deployment: DeploymentId) -> Result<Loaded, LogError> {
        let last = self.folds.last(deployment);
        let from = last.revision.map_or(0, |r| r + 1);
        let newer = self
            .query(&deployment.stream(), from)
            .await
            .map_err(unavailable)?;
        if let Some(envelope) = newer.last() {
            if let Some(hash) = &envelope.metadata.hash {
                self.keep_head(deployment, envelope.revision, hash.clone());
            }
        }
        self.folds
            .fold(deployment, last, newer)
            .map_err(unavailable)
    }

    async fn append(
        &self,
        deployment: DeploymentId,
        tenant: &str,
        expected: Option<u64>,
        events: Vec<DeploymentEvent>,
        cause: &Cause,
    ) -> Result<(), LogError> {
        if events.is_empty() {
            return Ok(());
        }
        if events.len() > MAX_EVENTS_PER_APPEND {
            return Err(LogError::TooLarge {
                deployment,
                reason: format!(
                    "a command's {} events exceed the {MAX_EVENTS_PER_APPEND} a DynamoDB \
                     transaction can write at once",
                    events.len()
                ),
            });
        }
        let stream = deployment.stream();
        let conflict = LogError::Conflict {
            deployment,
            expected,
        };
        let mut head = match expected {
            None => GENESIS.to_owned(),
            Some(last) => match self.link_at(deployment, last).await {
                Ok(Some(link)) => link,
                Ok(None) => return Err(conflict),
                Err(error) => return Err(unavailable(error)),
            },
        };
        let metadata = Metadata {
            tenant: tenant.to_owned(),
            actor: cause.actor.clone(),
            correlation_id: cause.correlation_id,
            causation_id: cause.causation_id,
            recorded_at: self.clock.now(),
            previous: None,
            hash: None,
        };
        let first = expected.map_or(0, |last| last + 1);
        let mut writes = Vec::with_capacity(events.len());
        let mut last = first;
        for (revision, event) in (first..).zip(&events) {
            last = revision;
            let mut envelope = Envelope {
                stream: stream.clone(),
                revision,
                id: Uuid::now_v7(),
                event_type: event.event_type().to_owned(),
                data: event.data(),
                metadata: metadata.clone(),
            };
            head = chain::seal(&mut envelope, &head);
            writes.push(self.put(deployment, &envelope)?);
        }
        match self
            .client
            .transact_write_items()
            .set_transact_items(Some(writes))
            .send()
            .await
        {
            Ok(_) => {
                self.keep_head(deployment, last, head);
                Ok(())
            }
            Err(error) if is_condition_failure(&error) => Err(conflict),
            Err(error) => Err(unavailable(self.call_failed("TransactWriteItems", error))),
        }
    }
}

#[async_trait]
impl ReadStream for DynamoDeployments {
    async fn read_stream(
        &self,
        deployment: DeploymentId,
        from: u64,
    ) -> Result<Vec<Envelope>, LogError> {
        self.query(&deployment.stream(), from)
            .await
            .map_err(unavailable)
    }
}

/// Creates the events table (with its stream of new images, which delivers events to the
/// functions) unless it exists. For development and tests; on AWS the stack makes it.
pub async fn create_events_table(client: &Client, table: &str) -> Result<(), DynamoError> {
    let key = |name: &str, kind| {
        KeySchemaElement::builder()
            .attribute_name(name)
            .key_type(kind)
            .build()
    };
    let attribute = |name: &str, kind| {
        AttributeDefinition::builder()
            .attribute_name(name)
            .attribute_type(kind)
            .build()
    };
    let failed = |message: String| DynamoError::Call {
        table: table.to_owned(),
        operation: "CreateTable",
        message,
    };
    let created = client
        .create_table()
        .table_name(table)
        .billing_mode(BillingMode::PayPerRequest)
        .key_schema(key(STREAM, KeyType::Hash).map_err(|e| failed(e.to_string()))?)
        .key_schema(key(REVISION, KeyType::Range).map_err(|e| failed(e.to_string()))?)
        .attribute_definitions(
            attribute(STREAM, ScalarAttributeType::S).map_err(|e| failed(e.to_string()))?,
        )
        .attribute_definitions(
            attribute(REVISION, ScalarAttributeType::N).map_err(|e| failed(e.to_string()))?,
        )
        .stream_specification(
            StreamSpecification::builder()
                .stream_enabled(true)
                .stream_view_type(StreamViewType::NewImage)
                .build()
                .map_err(|e| failed(e.to_string()))?,
        )
        .send()
        .await;
    match created {
        Ok(_) => Ok(()),
        Err(error) if already_exists(&error) => Ok(()),
        Err(error) => Err(failed(DisplayErrorContext(error).to_string())),
    }
}

/// Creates a table whose items are keyed by the text attribute `key` alone, unless it exists.
pub async fn create_table_keyed_by(
    client: &Client,
    table: &str,
    key: &str,
) -> Result<(), DynamoError> {
    create_table(client, table, key, None).await
}

/// A global secondary index of a table: its items by `partition` and `sort`, both text, with
/// only the keys projected.
pub struct KeysIndex<'a> {
    /// The index's name.
    pub name: &'a str,
    /// Its partition key.
    pub partition: &'a str,
    /// Its sort key.
    pub sort: &'a str,
}

/// Creates a table keyed by the text attribute `key`, with `index` if given, unless it exists.
pub async fn create_table(
    client: &Client,
    table: &str,
    key: &str,
    index: Option<KeysIndex<'_>>,
) -> Result<(), DynamoError> {
    create_keyed_table(client, table, key, None, index).await
}

/// Creates a table keyed by the text attributes `partition` and `sort`, unless it exists.
pub async fn create_sorted_table(
    client: &Client,
    table: &str,
    partition: &str,
    sort: &str,
) -> Result<(), DynamoError> {
    create_keyed_table(client, table, partition, Some(sort), None).await
}

/// Creates a table keyed by the text attributes `partition` and `sort`, with `index`, unless it
/// exists.
pub async fn create_sorted_table_with_index(
    client: &Client,
    table: &str,
    partition: &str,
    sort: &str,
    index: KeysIndex<'_>,
) -> Result<(), DynamoError> {
    create_keyed_table(client, table, partition, Some(sort), Some(index)).await
}

async fn create_keyed_table(
    client: &Client,
    table: &str,
    key: &str,
    sort: Option<&str>,
    index: Option<KeysIndex<'_>>,
) -> Result<(), DynamoError> {
    let failed = |message: String| DynamoError::Call {
        table: table.to_owned(),
        operation: "CreateTable",
        message,
    };
    let element = |name: &str, kind: KeyType| {
        KeySchemaElement::builder()
            .attribute_name(name)
            .key_type(kind)
            .build()
            .map_err(|e| failed(e.to_string()))
    };
    let text = |name: &str| {
        AttributeDefinition::builder()
            .attribute_name(name)
            .attribute_type(ScalarAttributeType::S)
            .build()
            .map_err(|e| failed(e.to_string()))
    };
    let mut create = client
        .create_table()
        .table_name(table)
        .billing_mode(BillingMode::PayPerRequest)
        .key_schema(element(key, KeyType::Hash)?)
        .attribute_definitions(text(key)?);
    if let Some(sort) = sort {
        create = create
            .key_schema(element(sort, KeyType::Range)?)
            .attribute_definitions(text(sort)?);
    }
    if let Some(index) = index {
        create = create
            .attribute_definitions(text(index.partition)?)
            .attribute_definitions(text(index.sort)?)
            .global_secondary_indexes(
                GlobalSecondaryIndex::builder()
                    .index_name(index.name)
                    .key_schema(element(index.partition, KeyType::Hash)?)
                    .key_schema(element(index.sort, KeyType::Range)?)
                    .projection(
                        Projection::builder()
                            .projection_type(ProjectionType::KeysOnly)
                            .build(),
                    )
                    .build()
                    .map_err(|e| failed(e.to_string()))?,
            );
    }
    match create.send().await {
        Ok(_) => Ok(()),
        Err(error) if already_exists(&error) => Ok(()),
        Err(error) => Err(failed(DisplayErrorContext(error).to_string())),
    }
}

/// Whether a table could not be created because it exists.
fn already_exists(error: &SdkError<CreateTableError>) -> bool {
    matches!(
        error.as_service_error(),
        Some(CreateTableError::ResourceInUseException(_))
    )
}
