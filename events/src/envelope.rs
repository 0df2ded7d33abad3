//! The envelope a stored event travels in, shaped like EventStoreDB's.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::Timestamp;

/// One stored event: where it sits in its stream, what it is, and who caused it.
///
/// This is the stable machine-readable form `overture events --json` prints, one per line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Envelope {
    /// The stream the event belongs to, `deployment-<uuid>`.
    pub stream: String,
    /// 0-based, gapless position within the stream.
    pub revision: u64,
    /// Unique id of this event.
    pub id: Uuid,
    /// Stable type string, such as `StepSucceeded`.
    #[serde(rename = "type")]
    pub event_type: String,
    /// The event's own fields.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub data: serde_json::Value,
    /// Who and what caused the event, and when it was recorded.
    pub metadata: Metadata,
}

/// Context recorded beside every event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Metadata {
    /// The tenant the deployment belongs to.
    pub tenant: String,
    /// The user or function that appended the event.
    pub actor: String,
    /// The id shared by every event of one deployment's causal chain.
    #[serde(rename = "$correlationId")]
    pub correlation_id: Uuid,
    /// The id of the event (or request) that caused this one.
    #[serde(rename = "$causationId")]
    pub causation_id: Uuid,
    /// When the log recorded the event.
    #[cfg_attr(feature = "openapi", schema(value_type = String, format = DateTime))]
    pub recorded_at: Timestamp,
    /// The link of the stream's event before this one (64 zeros before the first), in hex;
    /// absent on events recorded before the log was chained. See [`crate::chain`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<String>,
    /// This event's own link, SHA-256 of `previous` and its content hash, in hex; set by the
    /// log when it records the event. See [`crate::chain`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash: Option<String>,
}

/// An envelope together with its position in the global, ordered read of all streams.
#[derive(Clone, Debug, PartialEq)]
pub struct LogEntry {
    /// 1-based position across every stream; strictly increasing in append order.
    pub position: u64,
    /// The event itself.
    pub envelope: Envelope,
}
