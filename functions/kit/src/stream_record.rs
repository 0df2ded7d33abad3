//! A DynamoDB stream record of the event table, read back into the event it carries.
//!
//! Each record's new image is one event as the DynamoDB log stores it: `stream`, `revision`,
//! `id`, `type`, and `data` and `metadata` as JSON text. Every trigger on that stream (the
//! orchestrator's, the projector's) reads records here, so they cannot disagree on the shape.

use aws_lambda_events::event::dynamodb::EventRecord;
use overture_events::{DeploymentId, Envelope};
use serde_dynamo::AttributeValue;

/// A string attribute of the record's new image.
fn text<'a>(record: &'a EventRecord, name: &str) -> Option<&'a str> {
    match record.change.new_image.get(name) {
        Some(AttributeValue::S(text)) => Some(text.as_str()),
        _ => None,
    }
}

/// The deployment and event id a record carries; `None` for an item that is not an event of a
/// deployment stream (another writer's, or a removal), which no trigger of the log acts on.
pub fn event_of(record: &EventRecord) -> Option<(DeploymentId, uuid::Uuid)> {
    let deployment = DeploymentId::from_stream(text(record, "stream")?).ok()?;
    let id = uuid::Uuid::try_parse(text(record, "id")?).ok()?;
    Some((deployment, id))
}

/// The revision a record's event has, if it says.
pub fn revision_of(record: &EventRecord) -> Option<u64> {
    match record.change.new_image.get("revision") {
        Some(AttributeValue::N(number)) => number.parse().ok(),
        _ => None,
    }
}

/// The whole event a record carries, as the log stores it; `None` if any part is unreadable.
pub fn envelope_of(record: &EventRecord) -> Option<Envelope> {
    Some(Envelope {
        stream: text(record, "stream")?.to_owned(),
        revision: revision_of(record)?,
        id: uuid::Uuid::try_parse(text(record, "id")?).ok()?,
        event_type: text(record, "type")?.to_owned(),
        data: serde_json::from_str(text(record, "data")?).ok()?,
        metadata: serde_json::from_str(text(record, "metadata")?).ok()?,
    })
}
