//! The routes. Each handler carries its `#[utoipa::path]`, and [`router`] registers handlers
//! only through `routes!`, so `/openapi.json` lists exactly what is served.
//!
//! Every route under `/v1` is authenticated ([`crate::auth`]) and sees only the caller's
//! tenant: another tenant's deployment answers 404, as if it did not exist.

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::sync::LazyLock;

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::{middleware, Extension, Json, Router};
use overture_domain::history::{self, Moment};
use overture_domain::projection::{project, DeploymentStatus, DeploymentView, TenantView};
use overture_domain::secret::{SecretString, SecretValues};
use overture_domain::services::RegisteredInstance;
use overture_domain::text::escaped;
use overture_domain::DeploymentError;
use overture_events::{DeploymentId, Envelope};
use overture_kit::query::{AttemptLog, DeploymentFilter};
use overture_submit::again::Redrive;
use overture_submit::{CloudSession, Submission, SubmitError};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};
use utoipa::openapi::security::{ApiKey, ApiKeyValue, SecurityScheme};
use utoipa::{IntoParams, OpenApi, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::auth::{authenticate, Caller};
use crate::error::{malformed, ApiError, ErrorBody, Problem, MAX_BODY};
use crate::grants::{grant_rows, GrantRow};
use crate::{Api, RunError};

/// The document's frame; the paths come from the handlers.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Overture",
        description = "Deployments of blueprints, per tenant. Authenticate with your cloud token \
                       in X-Auth-Token; your tenant is the token's project (by id: two \
                       projects named alike in two domains are two tenants)."
    ),
    modifiers(&TokenHeader),
    components(schemas(ErrorBody, Problem))
)]
struct Document;

/// Declares the `X-Auth-Token` header as the API's authentication.
struct TokenHeader;

impl utoipa::Modify for TokenHeader {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "token",
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::new("X-Auth-Token"))),
        );
    }
}

/// Every route, as two routers: the tenant's (authenticated) and the open ones. The only list
/// of routes: both the application and its document are made from it.
fn described() -> (OpenApiRouter<Api>, OpenApiRouter<Api>) {
    let tenant = OpenApiRouter::with_openapi(Document::openapi())
        .routes(routes!(create_deployment, list_deployments))
        .routes(routes!(get_deployment))
        .routes(routes!(deployment_events))
        .routes(routes!(step_log))
        .routes(routes!(cancel_deployment))
        .routes(routes!(redrive_deployment))
        .routes(routes!(tenant))
        .routes(routes!(grants))
        .routes(routes!(services))
        .routes(routes!(crate::events::post_event));
    let open = OpenApiRouter::new()
        .routes(routes!(healthz))
        .routes(routes!(openapi));
    (tenant, open)
}

/// The application: every route, over the ports in `api`.
pub fn router(api: Api) -> Router {
    let (tenant, open) = described();
    let (tenant, _) = tenant.split_for_parts();
    let (open, _) = open.split_for_parts();
    tenant
        .route_layer(middleware::from_fn_with_state(api.clone(), authenticate))
        .merge(open)
        .fallback(|| async { ApiError::NotFound("no such route; see /openapi.json".into()) })
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(api)
}

/// The OpenAPI document, built from the handlers' annotations.
pub fn document() -> &'static utoipa::openapi::OpenApi {
    static DOCUMENT: LazyLock<utoipa::openapi::OpenApi> = LazyLock::new(|| {
        let (tenant, open) = described();
        let (_, mut document) = tenant.split_for_parts();
        document.merge(open.split_for_parts().1);
        document
    });
    &DOCUMENT
}

/// A deployment request.
///
/// Secret values are read straight into [`SecretString`]s; this type is never printed.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateDeployment {
    /// The blueprint's YAML text.
    blueprint: String,
    /// The files the steps take from the blueprint's folder, by path relative to it.
    #[serde(default)]
    files: BTreeMap<String, String>,
    /// Parameter values, by name.
    #[serde(default)]
    params: BTreeMap<String, String>,
    /// Secret values, by name: never recorded, never echoed, masked in every log.
    #[serde(default, deserialize_with = "secret_values")]
    #[schema(value_type = BTreeMap<String, String>)]
    secrets: SecretValues,
}

fn secret_values<'de, D: serde::Deserializer<'de>>(d: D) -> Result<SecretValues, D::Error> {
    let values = BTreeMap::<String, String>::deserialize(d)?;
    Ok(values
        .into_iter()
        .map(|(name, value)| (name, SecretString::from(value)))
        .collect())
}

/// Where a blueprint sent over HTTP comes from, in messages and in the record.
const SOURCE: &str = "blueprint";

/// Start a deployment of a blueprint; it acts with the caller's token.
#[utoipa::path(
    post,
    path = "/v1/deployments",
    request_body = CreateDeployment,
    security(("token" = [])),
    responses(
        (status = 201, description = "Recorded and started: the status object", body = Object,
         headers(("Location" = String, description = "The deployment's URL"))),
        (status = 400, description = "Malformed, or an invalid blueprint; nothing recorded", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 413, description = "Larger than 1 MiB", body = ErrorBody),
        (status = 415, description = "Not JSON", body = ErrorBody),
    )
)]
async fn create_deployment(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let request: CreateDeployment = json_body(&headers, body)?;
    let submission = Submission {
        triggered_by: None,
        source: SOURCE.into(),
        text: request.blueprint,
        tenant: caller.tenant().to_owned(),
        requested_by: caller.account.user.clone(),
        trigger: "http".into(),
        params: request.params,
        secrets: request.secrets,
        files: request.files,
        cloud: Some(CloudSession {
            account: caller.account.clone(),
            token: caller.token.clone(),
        }),
    };
    let id = api.deployments.start(submission).await.map_err(refused)?;
    let view = owned_view(&api, &caller, &id.to_string()).await?;
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, format!("/v1/deployments/{id}"))],
        Json(view),
    )
        .into_response())
}

/// A JSON request body, read into `T`.
fn json_body<T: DeserializeOwned>(
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<T, ApiError> {
    let body = body_of(headers, body, &["application/json"])?;
    serde_json::from_slice(&body).map_err(|e| malformed(&e))
}

/// A request body of one of the media types `accepted`, within the size limit.
pub(crate) fn body_of(
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
    accepted: &[&str],
) -> Result<Bytes, ApiError> {
    let accepted = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(str::trim)
        .is_some_and(|v| accepted.iter().any(|a| v.eq_ignore_ascii_case(a)));
    if !accepted {
        return Err(ApiError::UnsupportedMediaType);
    }
    body.map_err(|rejection| {
        let stalled = std::iter::successors(
            Some(&rejection as &(dyn std::error::Error + 'static)),
            |error| error.source(),
        )
        .any(|error| error.is::<tower_http::timeout::TimeoutError>());
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::PayloadTooLarge
        } else if stalled {
            ApiError::RequestTimeout
        } else {
            ApiError::BadRequest("the request body could not be read".into())
        }
    })
}

fn refused(error: RunError) -> ApiError {
    match error {
        RunError::Submit(SubmitError::Invalid(problems)) => {
            let message = problems
                .0
                .iter()
                .map(|p| format!("{SOURCE}: {p}"))
                .collect::<Vec<_>>()
                .join("\n");
            ApiError::Invalid {
                message,
                problems: problems
                    .0
                    .into_iter()
                    .map(|p| Problem {
                        field: p.field,
                        problem: p.problem,
                    })
                    .collect(),
            }
        }
        // An id collision: the aggregate refused it, and asking again makes a new id.
        RunError::Submit(error @ SubmitError::Refused(_)) => {
            ApiError::Unavailable(error.to_string())
        }
        RunError::Submit(error) => {
            let retryable = match &error {
                SubmitError::Log(e) => e.is_retryable(),
                SubmitError::Payload(e) => e.is_retryable(),
                SubmitError::Seal(e) => e.is_retryable(),
                _ => false,
            };
            if retryable {
                ApiError::Unavailable(error.to_string())
            } else {
                ApiError::Internal(error.to_string())
            }
        }
        RunError::Log(error) if error.is_retryable() => ApiError::Unavailable(error.to_string()),
        RunError::Log(error) => ApiError::Internal(error.to_string()),
        RunError::Engine(message) => ApiError::Internal(message),
    }
}

/// One line of JSON: an event of a Server-Sent Events stream.
fn json_line<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

/// Which deployments a list holds.
#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    /// Only deployments with this status: running, succeeded, failed or cancelled.
    status: Option<String>,
}

/// The caller's deployments, newest first, without their steps.
#[utoipa::path(
    get,
    path = "/v1/deployments",
    params(ListQuery),
    security(("token" = [])),
    responses(
        (status = 200, description = "Status objects without steps", body = [Object]),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
    )
)]
async fn list_deployments(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<Vec<Value>>, ApiError> {
    let Query(query) = query.map_err(|_| {
        ApiError::BadRequest(
            "the only query parameter is status=running|succeeded|failed|cancelled".into(),
        )
    })?;
    let status = match query.status.as_deref() {
        None => None,
        Some("running") => Some(DeploymentStatus::Running),
        Some("succeeded") => Some(DeploymentStatus::Succeeded),
        Some("failed") => Some(DeploymentStatus::Failed),
        Some("cancelled") => Some(DeploymentStatus::Cancelled),
        Some(other) => {
            return Err(ApiError::BadRequest(format!(
                "status `{}`: expected running, succeeded, failed or cancelled",
                escaped(other)
            )))
        }
    };
    let views = api
        .queries
        .list(&DeploymentFilter {
            tenant: Some(caller.tenant().to_owned()),
            status,
        })
        .await?;
    let rows: Result<Vec<Value>, ApiError> = views
        .iter()
        .map(|view| {
            let mut value =
                serde_json::to_value(view).map_err(|e| ApiError::Internal(e.to_string()))?;
            if let Some(object) = value.as_object_mut() {
                object.remove("steps");
            }
            Ok(value)
        })
        .collect();
    Ok(Json(rows?))
}

/// The caller's deployment `id`, or 404 (also when it is another tenant's).
async fn owned_view(api: &Api, caller: &Caller, id: &str) -> Result<DeploymentView, ApiError> {
    let Ok(parsed) = id.parse::<DeploymentId>() else {
        return Err(ApiError::no_deployment(id));
    };
    match api.queries.deployment(parsed).await? {
        Some(view) if caller.owns(&view.tenant) => Ok(view),
        _ => Err(ApiError::no_deployment(id)),
    }
}

/// When to show a deployment as it stood.
#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
struct StatusQuery {
    /// As it stood then, folded from the log alone: after the event at this revision (0-based),
    /// or after every event recorded at or before this RFC 3339 time.
    at: Option<String>,
}

/// A deployment's status object, with its steps; with `at`, as it stood then.
#[utoipa::path(
    get,
    path = "/v1/deployments/{id}",
    params(("id" = String, Path, description = "The deployment id"), StatusQuery),
    security(("token" = [])),
    responses(
        (status = 200, description = "The status object", body = Object),
        (status = 400, description = "`at` is not a revision or a time of it", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
    )
)]
async fn get_deployment(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    query: Result<Query<StatusQuery>, QueryRejection>,
) -> Result<Json<DeploymentView>, ApiError> {
    let view = owned_view(&api, &caller, &id).await?;
    let Query(query) = query
        .map_err(|_| ApiError::BadRequest("the only query parameter is at=REVISION|TIME".into()))?;
    let Some(at) = query.at else {
        return Ok(Json(view));
    };
    let moment: Moment = at
        .parse()
        .map_err(|e: overture_domain::history::MomentError| {
            ApiError::BadRequest(format!("at: {e}"))
        })?;
    let records = api.queries.events(view.id).await?;
    let then =
        history::prefix(&records, moment).map_err(|e| ApiError::BadRequest(format!("at: {e}")))?;
    let projected = project(None, then).map_err(|e| ApiError::Internal(e.to_string()))?;
    projected.view.map(Json).ok_or_else(|| {
        ApiError::Internal("the stream does not start with the deployment's request".into())
    })
}

/// A deployment's events as recorded. With `Accept: text/event-stream`, Server-Sent Events: one
/// per event, its `id` the revision, live until the deployment ends; a reconnect with
/// `Last-Event-ID` carries on after that revision.
#[utoipa::path(
    get,
    path = "/v1/deployments/{id}/events",
    params(
        ("id" = String, Path, description = "The deployment id"),
        ("Last-Event-ID" = Option<u64>, Header, description = "Server-Sent Events: the last revision received"),
    ),
    security(("token" = [])),
    responses(
        (status = 200, description = "The envelopes, oldest first; or an event stream",
         content(([Object] = "application/json"), (String = "text/event-stream"))),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
    )
)]
async fn deployment_events(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let view = owned_view(&api, &caller, &id).await?;
    let wants_stream = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/event-stream"));
    if !wants_stream {
        return Ok(Json(api.queries.events(view.id).await?).into_response());
    }
    let after = match headers.get("last-event-id") {
        None => None,
        Some(value) => Some(
            value
                .to_str()
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
                .ok_or_else(|| {
                    ApiError::BadRequest("Last-Event-ID: expected a revision (a number)".into())
                })?,
        ),
    };
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
#[serde(deny_unknown_fields)]
struct LogQuery {
    /// The attempt (1-based); the step's last when left out.
    attempt: Option<u32>,
    /// The output of tearing the step down (`overture destroy`) instead of an attempt's.
    #[serde(default)]
    destroy: bool,
}

/// A step attempt's output, with secrets masked.
#[utoipa::path(
    get,
    path = "/v1/deployments/{id}/logs/{step}",
    params(
        ("id" = String, Path, description = "The deployment id"),
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
async fn step_log(
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

/// Cancel a running deployment: its running steps are killed, no other starts, its bastion is
/// closed and its secrets purged.
#[utoipa::path(
    post,
    path = "/v1/deployments/{id}/cancel",
    params(("id" = String, Path, description = "The deployment id")),
    security(("token" = [])),
    responses(
        (status = 202, description = "Recorded; the status object", body = Object),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, description = "It has already ended", body = ErrorBody),
    )
)]
async fn cancel_deployment(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let view = owned_view(&api, &caller, &id).await?;
    let recorded = api
        .deployments
        .cancel(view.id, &caller.account.user, "cancelled over the HTTP API")
        .await
        .map_err(refused)?;
    match recorded {
        Ok(()) => {}
        Err(DeploymentError::AlreadyFinished) => {
            return Err(ApiError::Conflict(format!(
                "deployment {} has already ended ({}); there is nothing to cancel",
                view.id,
                view.status.as_str()
            )))
        }
        Err(refusal) => {
            return Err(ApiError::Conflict(format!(
                "deployment {}: {refusal}",
                view.id
            )))
        }
    }
    let view = owned_view(&api, &caller, &id).await?;
    Ok((StatusCode::ACCEPTED, Json(view)).into_response())
}

/// A redrive request: what was purged when the deployment ended and must be given again.
///
/// Secret values are read straight into [`SecretString`]s; this type is never printed.
#[derive(Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RedriveDeployment {
    /// Secret values, by name, as in a deployment request: the blueprint's secrets again.
    #[serde(default, deserialize_with = "secret_values")]
    #[schema(value_type = BTreeMap<String, String>)]
    secrets: SecretValues,
}

/// Carry a failed deployment on from its failed and abandoned steps, in the same deployment:
/// steps that succeeded are not run again. It acts with the caller's token; the body, optional
/// when the blueprint has no secrets, gives the secrets again.
#[utoipa::path(
    post,
    path = "/v1/deployments/{id}/redrive",
    params(("id" = String, Path, description = "The deployment id")),
    request_body(content = Option<RedriveDeployment>, description = "The secrets, given again"),
    security(("token" = [])),
    responses(
        (status = 202, description = "Recorded and started: the status object", body = Object),
        (status = 400, description = "Malformed, or a secret is missing; nothing recorded", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, description = "It did not fail (it runs, succeeded, was cancelled or destroyed)", body = ErrorBody),
        (status = 413, description = "Larger than 1 MiB", body = ErrorBody),
        (status = 415, description = "Not JSON", body = ErrorBody),
    )
)]
async fn redrive_deployment(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let view = owned_view(&api, &caller, &id).await?;
    let empty = body
        .as_ref()
        .is_ok_and(|b| b.iter().all(u8::is_ascii_whitespace));
    let request: RedriveDeployment = if empty {
        RedriveDeployment::default()
    } else {
        json_body(&headers, body)?
    };
    let redrive = Redrive {
        deployment: view.id,
        requested_by: caller.account.user.clone(),
        secrets: request.secrets,
        cloud: Some(CloudSession {
            account: caller.account.clone(),
            token: caller.token.clone(),
        }),
    };
    let id = view.id;
    let refusal = match api.deployments.redrive(redrive).await {
        Ok(()) => None,
        Err(RunError::Submit(SubmitError::Refused(refusal))) => Some(refusal),
        Err(other) => return Err(refused(other)),
    };
    let conflict = |why: &str| Err(ApiError::Conflict(format!("deployment {id} {why}")));
    match refusal {
        None => {}
        Some(DeploymentError::NotRequested) => {
            return Err(ApiError::no_deployment(&id.to_string()))
        }
        Some(DeploymentError::RedriveWhileRunning) => {
            return conflict("is still running; only a failed deployment is redriven")
        }
        Some(DeploymentError::RedriveSucceeded) => {
            return conflict("succeeded: nothing is left to redrive")
        }
        Some(DeploymentError::RedriveCancelled) => {
            return conflict("was cancelled, so it is not redriven")
        }
        Some(DeploymentError::RedriveDestroyed) => {
            return conflict("has had its resources destroyed, so it is not redriven")
        }
        Some(other) => return conflict(&format!("cannot be redriven: {other}")),
    }
    let view = owned_view(&api, &caller, &id.to_string()).await?;
    Ok((StatusCode::ACCEPTED, Json(view)).into_response())
}

/// The caller's tenant: how many deployments it has, by status.
#[utoipa::path(
    get,
    path = "/v1/tenant",
    security(("token" = [])),
    responses(
        (status = 200, description = "The tenant's summary", body = Object),
        (status = 401, body = ErrorBody),
    )
)]
async fn tenant(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<TenantView>, ApiError> {
    let tenants = api.queries.tenants().await?;
    Ok(Json(
        tenants
            .into_iter()
            .find(|t| caller.owns(&t.tenant))
            .unwrap_or_else(|| TenantView::new(caller.tenant())),
    ))
}

/// Which grants.
#[derive(Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
struct GrantsQuery {
    /// Only grants still open.
    #[serde(default)]
    open: bool,
}

/// The temporary grants of access the caller's deployments held, oldest first.
#[utoipa::path(
    get,
    path = "/v1/grants",
    params(GrantsQuery),
    security(("token" = [])),
    responses(
        (status = 200, description = "The grants", body = [Object]),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
    )
)]
async fn grants(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    query: Result<Query<GrantsQuery>, QueryRejection>,
) -> Result<Json<Vec<GrantRow>>, ApiError> {
    let Query(query) = query
        .map_err(|_| ApiError::BadRequest("the only query parameter is open=true|false".into()))?;
    let views = api
        .queries
        .list(&DeploymentFilter {
            tenant: Some(caller.tenant().to_owned()),
            status: None,
        })
        .await?;
    Ok(Json(grant_rows(&views, query.open)))
}

/// The caller's service registry: the instances its deployments registered, by service, then
/// address, then port. Another tenant's, even one whose project has the same name, is not shown.
#[utoipa::path(
    get,
    path = "/v1/services",
    security(("token" = [])),
    responses(
        (status = 200, description = "The registered instances", body = [Object]),
        (status = 401, body = ErrorBody),
    )
)]
async fn services(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<Vec<RegisteredInstance>>, ApiError> {
    Ok(Json(api.queries.service_instances(caller.tenant()).await?))
}

/// Whether the server answers.
#[utoipa::path(
    get,
    path = "/healthz",
    responses((status = 200, description = "It answers", body = Object))
)]
async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// This document.
#[utoipa::path(
    get,
    path = "/openapi.json",
    responses((status = 200, description = "The OpenAPI 3 document", body = Object))
)]
async fn openapi() -> Json<&'static utoipa::openapi::OpenApi> {
    Json(document())
}
