//! `POST /v1/events`: an event for the server's trigger file (`overture serve --triggers FILE`),
//! or, on the serverless form, for the triggers function's (the event is queued for it).
//!
//! Embedded, the event is evaluated at once and each decision answered
//! ([`crate::DeliverEvents`]); the deployments it starts, and the chains their ends start, are
//! driven on by the server. On AWS it is answered once queued, with `queued` (the message's id)
//! and no decisions yet: `overture --backend aws triggers log` shows them. A
//! trigger deploys only into the caller's tenant: one whose `tenant` is another is refused, and
//! that is recorded.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};

use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::{Api, DeliverError};

/// Deliver an event (CloudEvents 1.0 JSON, or EventBridge's shape) to the server's triggers.
#[utoipa::path(
    post,
    path = "/v1/events",
    request_body(content = Object, description = "A CloudEvent (specversion 1.0) or an EventBridge event"),
    security(("token" = [])),
    responses(
        (status = 202, description = "Evaluated: every trigger's decision, and the deployments started", body = Object),
        (status = 400, description = "Not an event", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, description = "The server has no trigger file", body = ErrorBody),
        (status = 413, description = "Larger than 1 MiB", body = ErrorBody),
        (status = 415, description = "Not JSON", body = ErrorBody),
        (status = 503, description = "A store failed; send the event again later", body = ErrorBody),
    )
)]
pub async fn post_event(
    State(api): State<Api>,
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
    let body = crate::routes::body_of(
        &headers,
        body,
        &["application/json", "application/cloudevents+json"],
    )?;
    let text = std::str::from_utf8(&body)
        .map_err(|_| ApiError::BadRequest("the body is not UTF-8 JSON".into()))?;
    let answer = dispatcher
        .deliver(text, caller.tenant())
        .await
        .map_err(|error| match error {
            DeliverError::NotAnEvent(message) => ApiError::BadRequest(message),
            unavailable @ DeliverError::Unavailable(_) => {
                ApiError::Unavailable(unavailable.to_string())
            }
            failed @ DeliverError::Failed(_) => ApiError::Internal(failed.to_string()),
        })?;
    Ok((StatusCode::ACCEPTED, Json(answer)).into_response())
}
