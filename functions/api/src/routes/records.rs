//! What a deployment recorded and printed: its events as JSON, or as a live Server-Sent Events
//! stream until it ends; and a step's output, attempt by attempt.

use std::collections::VecDeque;
use std::convert::Infallible;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use overture_domain::projection::DeploymentStatus;
use overture_domain::text::escaped;
use overture_events::{DeploymentId, Envelope};
use overture_kit::query::AttemptLog;
use serde::Deserialize;
use utoipa::IntoParams;

use super::deployments::owned_view;
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::Api;

/// One line of JSON: an event of a Server-Sent Events stream.
fn json_line<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

/// Where a reconnecting Server-Sent Events client carries on.
#[derive(IntoParams)]
#[into_params(parameter_in = Header)]
#[allow(dead_code)] // Only its document is used: the header is read from the request's headers.
pub(super) struct Resume {
    /// Server-Sent Events: the last revision received.
    #[param(
        rename = "Last-Event-ID",
        required = false,
        nullable = false,
        maximum = 9223372036854775807_u64
    )]
    last_event_id: Option<u64>,
}

/// A deployment's events as recorded. With `Accept: text/event-stream`, Server-Sent Events: one
/// per event, its `id` the revision, live until the deployment ends; a reconnect with
/// `Last-Event-ID` carries on after that revision.
#[utoipa::path(
    get,
    path = "/v1/deployments/{id}/events",
    params(
        ("id" = String, Path, description = "The deployment: its id, or its name (the caller's own deployments only; a name is held by one deployment of the tenant until it is destroyed)"),
        Resume,
    ),
    security(("token" = [])),
    responses(
        (status = 200, description = "The envelopes, oldest first; or an event stream",
         content(([Envelope] = "application/json"), (String = "text/event-stream"))),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
    )
)]
pub(super) async fn deployment_events(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let view = owned_view(&api, &caller, &id).await?;
    // Read whatever is asked for: a header that is not a revision is refused either way.
    let after = match headers.get("last-event-id") {
        None => None,
        Some(value) => Some(
            value
                .to_str()
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
                // The log counts revisions as a signed 64-bit number.
                .filter(|&revision| i64::try_from(revision).is_ok())
                .ok_or_else(|| {
                    ApiError::BadRequest("Last-Event-ID: expected a revision (a number)".into())
                })?,
        ),
    };
    let wants_stream = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/event-stream"));
    if !wants_stream {
        return Ok(Json(api.queries.events(view.id).await?).into_response());
    }
    let follow = Follow {
        api,
        id: view.id,
        after,
        pending: VecDeque::new(),
        ended: false,
    };
    let stream = futures_util::stream::unfold(follow, |mut follow| async move {
        let event = follow.next().await?;
        Some((Ok::<Event, Infallible>(event), follow))
    });
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response())
}

/// Where a Server-Sent Events stream of one deployment stands.
struct Follow {
    api: Api,
    id: DeploymentId,
    /// The last revision sent (or the client's `Last-Event-ID`).
    after: Option<u64>,
    /// Read and not yet sent, in order.
    pending: VecDeque<Envelope>,
    /// The deployment had ended when `pending` was read: nothing follows it.
    ended: bool,
}

impl Follow {
    /// The next event, waiting for it while the deployment runs; none once it has ended (or the
    /// log cannot be read).
    async fn next(&mut self) -> Option<Event> {
        loop {
            if let Some(envelope) = self.pending.pop_front() {
                self.after = Some(envelope.revision);
                return Some(
                    Event::default()
                        .id(envelope.revision.to_string())
                        .event(envelope.event_type.clone())
                        .data(json_line(&envelope)),
                );
            }
            if self.ended {
                return None;
            }
            // The status first: once it says ended, the events read after it hold the end.
            let ended = match self.api.queries.deployment(self.id).await {
                Ok(view) => view.is_none_or(|v| v.status != DeploymentStatus::Running),
                Err(error) => {
                    tracing::warn!(id = %self.id, %error, "ending an event stream");
                    return None;
                }
            };
            let events = match self.api.queries.events(self.id).await {
                Ok(events) => events,
                Err(error) => {
                    tracing::warn!(id = %self.id, %error, "ending an event stream");
                    return None;
                }
            };
            let after = self.after;
            self.pending = events
                .into_iter()
                .filter(|e| after.is_none_or(|a| e.revision > a))
                .collect();
            self.ended = ended;
            if self.pending.is_empty() && !ended {
                self.api.deployments.changed().await;
            }
        }
    }
}

/// Which output of a step.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(super) struct LogQuery {
    /// The attempt (1-based); the step's last when left out.
    attempt: Option<u32>,
    /// The output of tearing the step down (`overture destroy`) instead of an attempt's.
    #[serde(default)]
    #[param(required = false)]
    destroy: bool,
}

/// A step attempt's output, with secrets masked.
#[utoipa::path(
    get,
    path = "/v1/deployments/{id}/logs/{step}",
    params(
        ("id" = String, Path, description = "The deployment: its id, or its name (the caller's own deployments only; a name is held by one deployment of the tenant until it is destroyed)"),
        ("step" = String, Path, description = "The step"),
        LogQuery,
    ),
    security(("token" = [])),
    responses(
        (status = 200, description = "The output", body = String, content_type = "text/plain"),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, description = "No such deployment, step or output", body = ErrorBody),
    )
)]
pub(super) async fn step_log(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    Path((id, step)): Path<(String, String)>,
    query: Result<Query<LogQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let view = owned_view(&api, &caller, &id).await?;
    let Query(query) = query.map_err(|_| {
        ApiError::BadRequest(
            "the query parameters are attempt=N, or destroy=true for the teardown's output".into(),
        )
    })?;
    let Some(step_view) = view.steps.get(&step) else {
        return Err(ApiError::NotFound(format!(
            "deployment {} has no step `{}`",
            view.id,
            escaped(&step)
        )));
    };
    let log = match (query.destroy, query.attempt) {
        (true, Some(_)) => {
            return Err(ApiError::BadRequest(
                "give attempt=N or destroy=true, not both".into(),
            ))
        }
        (true, None) => AttemptLog::Destroy,
        (false, attempt) => {
            match attempt.or((step_view.attempts > 0).then_some(step_view.attempts)) {
                Some(attempt) => AttemptLog::Attempt(attempt),
                None => {
                    return Err(ApiError::NotFound(format!(
                        "step `{}` has no output yet: no attempt has run",
                        escaped(&step)
                    )))
                }
            }
        }
    };
    match api.queries.attempt_log(view.id, &step, log).await? {
        Some(bytes) => {
            Ok(([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], bytes).into_response())
        }
        None => Err(ApiError::NotFound(match log {
            AttemptLog::Destroy => format!("step `{}` has not been destroyed yet", escaped(&step)),
            AttemptLog::Attempt(attempt) => format!(
                "step `{}` has no output for attempt {attempt}",
                escaped(&step)
            ),
        })),
    }
}
