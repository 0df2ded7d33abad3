//! `POST /v1/events`: events for the server's trigger file (`overture serve --triggers FILE`),
//! or, on the serverless form, for the triggers function's (each event is queued for it).
//!
//! The request is read as the CloudEvents HTTP protocol binding says ([`binding`]): in binary
//! mode (`ce-*` headers, the data as the body), in structured mode
//! (`application/cloudevents+json`), in batched mode (`application/cloudevents-batch+json`),
//! or as one event in plain `application/json` (a CloudEvent or an EventBridge event). Every
//! event reaches the port ([`crate::DeliverEvents`]) in the JSON format, so a trigger sees the
//! same event whichever mode carried it, and an event id counts once across modes.
//!
//! Embedded, an event is evaluated at once and each decision answered; the deployments it
//! starts, and the chains their ends start, are driven on by the server. On AWS it is answered
//! once queued, with `queued` (the message's id) and no decisions yet: `overture --backend aws
//! triggers log` shows them. A trigger deploys only into the caller's tenant: one whose
//! `tenant` is another is refused, and that is recorded.
//!
//! One event is answered 202 with what was decided ([`Delivered`]). A batch is answered 200
//! with one result per event, in order ([`BatchAnswer`]): each event is delivered on its own,
//! and one that is refused or fails leaves the others delivered, so the batch as a whole has no
//! single outcome to answer with; each result carries the status that event alone would have
//! had (202, 400, 500, 503), and a sender sends again those answered 503.

pub mod binding;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::{DeliverError, DeliverEvents};
use binding::{BindingError, Mode};

/// What delivering one event did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Delivered {
    /// The event's source.
    pub source: String,
    /// The event's id.
    pub id: String,
    /// The deployments it started (none yet when it was queued).
    pub deployments: Vec<String>,
    /// Every trigger's decision, as recorded (none yet when it was queued).
    pub decisions: Vec<Decided>,
    /// On the serverless form: the id of the queue message that carries the event to the
    /// triggers function, which decides later.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued: Option<String>,
}

/// One trigger's decision about an event, as `overture triggers log` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Decided {
    /// When, RFC 3339 with milliseconds.
    pub at: String,
    /// The event's source.
    pub source: String,
    /// The event's id.
    pub event_id: String,
    /// The trigger's name.
    pub trigger: String,
    /// What it decided.
    pub decision: Verdict,
    /// The deployment it started, when it started one.
    pub deployment: Option<String>,
    /// Why: the condition that failed, the refusal, or what was deployed.
    pub reason: String,
}

/// What a trigger decided about an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// It started a deployment.
    Deployed,
    /// The event was handled by this trigger before (in any content mode).
    Duplicate,
    /// The event is not for this trigger.
    NotMatched,
    /// The event is for this trigger, but it must not deploy.
    Refused,
}

/// The answer to a batch: one result per event, in the batch's order.
#[derive(Debug, Serialize, ToSchema)]
pub struct BatchAnswer {
    /// Each event's result.
    pub results: Vec<EventResult>,
}

/// What became of one event of a batch.
#[derive(Debug, Serialize, ToSchema)]
pub struct EventResult {
    /// The status this event alone would have been answered with: 202 delivered, 400 not an
    /// event, 404 no trigger file, 500 failed, 503 failed for now (send it again later).
    pub status: u16,
    /// The event's id, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// What was decided, when it was delivered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delivered: Option<Delivered>,
    /// Why not, when it was not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
}

/// Deliver events (CloudEvents 1.0 in binary, structured or batched mode, or one CloudEvent or
/// EventBridge event as JSON) to the server's triggers.
#[utoipa::path(
    post,
    path = "/v1/events",
    params(
        ("ce-specversion" = Option<String>, Header, description = "Binary mode: `1.0`. Any `ce-*` header makes the request binary mode (unless its Content-Type is a CloudEvents format), whose body is the event's data"),
        ("ce-id" = Option<String>, Header, description = "Binary mode: the event's id (required), percent-encoded as the binding says"),
        ("ce-source" = Option<String>, Header, description = "Binary mode: the event's source (required)"),
        ("ce-type" = Option<String>, Header, description = "Binary mode: the event's type (required)"),
        ("ce-subject" = Option<String>, Header, description = "Binary mode: the event's subject; `ce-time`, `ce-dataschema` and extensions (`ce-<name>`) likewise"),
    ),
    request_body(
        description = "Structured mode: one CloudEvent in the JSON format. Batched mode: a JSON array of them (at most 100). Plain JSON: one CloudEvent or EventBridge event; with `ce-*` headers, the event's data (binary mode). Binary mode's data may be of any type: JSON (or no Content-Type) is read as JSON, other text as a string, anything else as `data_base64`; a binary-mode event without data sends an empty body",
        content(
            (Object = "application/cloudevents+json"),
            (Vec<Object> = "application/cloudevents-batch+json"),
            (Object = "application/json"),
            (String = "text/plain"),
        )
    ),
    security(("token" = [])),
    responses(
        (status = 200, description = "A batch: each event's result, in order (one refused or failed event leaves the others delivered)", body = BatchAnswer),
        (status = 202, description = "One event, evaluated: every trigger's decision and the deployments started (on the serverless form, queued)", body = Delivered),
        (status = 400, description = "Not an event: a required attribute or `ce-*` header is missing, a header is not percent-encoded UTF-8, the data is not the JSON it says it is, or a batch is not an array", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, description = "The server has no trigger file", body = ErrorBody),
        (status = 408, description = "The body stopped arriving", body = ErrorBody),
        (status = 413, description = "Larger than 1 MiB", body = ErrorBody),
        (status = 415, description = "In no mode: no `ce-*` header and a Content-Type that is not a CloudEvents JSON format or application/json", body = ErrorBody),
        (status = 503, description = "A store failed; send the event again later", body = ErrorBody),
    )
)]
pub async fn post_event(
    State(api): State<crate::Api>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let Some(dispatcher) = api.triggers.clone() else {
        return Err(ApiError::NotFound(
            "this server has no trigger file (`overture serve --triggers FILE` gives it one)"
                .into(),
        ));
    };
    let mode = binding::mode_of(&headers).map_err(refused)?;
    let body = crate::routes::read_body(body)?;
    let tenant = caller.tenant();
    let event = match mode {
        Mode::Batched => {
            let events = binding::batch_events(&body).map_err(refused)?;
            let mut results = Vec::with_capacity(events.len());
            for event in events {
                results.push(one_of_batch(dispatcher.as_ref(), event, tenant).await);
            }
            return Ok((StatusCode::OK, Json(BatchAnswer { results })).into_response());
        }
        Mode::Binary => binding::binary_event(&headers, &body)
            .map_err(refused)?
            .to_string(),
        Mode::Structured | Mode::PlainJson => std::str::from_utf8(&body)
            .map_err(|_| ApiError::BadRequest("the body is not UTF-8 JSON".into()))?
            .to_owned(),
    };
    let delivered = dispatcher
        .deliver(&event, tenant)
        .await
        .map_err(undelivered)?;
    Ok((StatusCode::ACCEPTED, Json(delivered)).into_response())
}

/// Delivers one event of a batch, answering what became of it rather than failing the batch.
async fn one_of_batch(dispatcher: &dyn DeliverEvents, event: Value, tenant: &str) -> EventResult {
    let id = event.get("id").and_then(Value::as_str).map(str::to_owned);
    let outcome = if event.get("specversion").is_none() {
        Err(ApiError::BadRequest(
            "each event of a batch is a CloudEvent in the JSON format, with its `specversion`"
                .into(),
        ))
    } else {
        dispatcher
            .deliver(&event.to_string(), tenant)
            .await
            .map_err(undelivered)
    };
    match outcome {
        Ok(delivered) => EventResult {
            status: StatusCode::ACCEPTED.as_u16(),
            id,
            delivered: Some(delivered),
            error: None,
        },
        Err(error) => {
            let (status, code) = error.status_and_code();
            if status.is_server_error() {
                tracing::warn!(code, %error, "an event of a batch failed");
            }
            EventResult {
                status: status.as_u16(),
                id,
                delivered: None,
                error: Some(ErrorBody {
                    code,
                    message: error.to_string(),
                    problems: Vec::new(),
                }),
            }
        }
    }
}

/// A request in no mode of the binding (415), or not an event (400).
fn refused(error: BindingError) -> ApiError {
    if error.is_media_type() {
        ApiError::UnsupportedContent(error.to_string())
    } else {
        ApiError::BadRequest(error.to_string())
    }
}

/// Why the port did not deliver an event, as the API answers it.
fn undelivered(error: DeliverError) -> ApiError {
    match error {
        DeliverError::NotAnEvent(message) => ApiError::BadRequest(message),
        unavailable @ DeliverError::Unavailable(_) => {
            ApiError::Unavailable(unavailable.to_string())
        }
        failed @ DeliverError::Failed(_) => ApiError::Internal(failed.to_string()),
    }
}
