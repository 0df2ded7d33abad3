//! A deployment's routes: start one, list the caller's, read one (as it stands or as it stood),
//! cancel it, redrive it; and how the engine's refusals answer.

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use overture_domain::history::{self, Moment};
use overture_domain::projection::{project, DeploymentStatus, DeploymentView, Header};
use overture_domain::secret::{SecretString, SecretValues};
use overture_domain::DeploymentError;
use overture_events::DeploymentId;
use overture_kit::query::DeploymentFilter;
use overture_submit::again::Redrive;
use overture_submit::{CloudSession, Submission, SubmitError};
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};

use super::json_body;
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody, Problem};
use crate::{Api, RunError};

/// A deployment request.
///
/// Secret values are read straight into [`SecretString`]s; this type is never printed.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({
    "blueprint": "name: hello\nsteps:\n  greet:\n    run: script\n    with: { command: 'echo hello' }\n",
    "params": {},
}))]
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
    /// A name for the deployment, unique among the tenant's deployments that are not destroyed
    /// (lowercase letters, digits and '-', at most 63 characters, not shaped like an id);
    /// every path's `{id}` then takes it.
    #[serde(default)]
    name: Option<String>,
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
        (status = 201, description = "Recorded and started: the status object", body = DeploymentView,
         headers(("Location" = String, description = "The deployment's URL")),
         links(
             ("status" = (operation_id = "get_deployment", parameters(("id" = "$response.body#/id")))),
             ("events" = (operation_id = "deployment_events", parameters(("id" = "$response.body#/id")))),
             ("cancel" = (operation_id = "cancel_deployment", parameters(("id" = "$response.body#/id")))),
         )),
        (status = 400, description = "Malformed, or an invalid blueprint or name; nothing recorded", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 409, description = "Another of the tenant's deployments that is not destroyed has the name; nothing recorded", body = ErrorBody),
        (status = 413, description = "Larger than 1 MiB", body = ErrorBody),
        (status = 415, description = "Not JSON", body = ErrorBody),
    )
)]
pub(super) async fn create_deployment(
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
        name: request.name,
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
        RunError::Submit(SubmitError::Log(taken @ overture_kit::LogError::NameTaken { .. })) => {
            ApiError::Conflict(taken.to_string())
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

/// Which deployments a list holds.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(super) struct ListQuery {
    /// Only deployments with this status.
    status: Option<DeploymentStatus>,
}

/// The caller's deployments, newest first, without their steps.
#[utoipa::path(
    get,
    path = "/v1/deployments",
    params(ListQuery),
    security(("token" = [])),
    responses(
        (status = 200, description = "Status objects without steps", body = [Header],
         links(
             ("first_status" = (operation_id = "get_deployment", parameters(("id" = "$response.body#/0/id")))),
             ("first_events" = (operation_id = "deployment_events", parameters(("id" = "$response.body#/0/id")))),
             ("first_cancel" = (operation_id = "cancel_deployment", parameters(("id" = "$response.body#/0/id")))),
             ("first_redrive" = (operation_id = "redrive_deployment", parameters(("id" = "$response.body#/0/id")))),
         )),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
    )
)]
pub(super) async fn list_deployments(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<Vec<Header>>, ApiError> {
    let Query(query) = query.map_err(|_| {
        ApiError::BadRequest(
            "the only query parameter is status, expected running, succeeded, failed or cancelled"
                .into(),
        )
    })?;
    let views = api
        .queries
        .list(&DeploymentFilter {
            tenant: Some(caller.tenant().to_owned()),
            status: query.status,
        })
        .await?;
    Ok(Json(views.iter().map(DeploymentView::header).collect()))
}

/// The caller's deployment `id`, given by its id or its name, or 404 (also when it is
/// another tenant's: a name is looked up among the caller's deployments only).
pub(super) async fn owned_view(
    api: &Api,
    caller: &Caller,
    id: &str,
) -> Result<DeploymentView, ApiError> {
    let parsed = match id.parse::<DeploymentId>() {
        Ok(parsed) => parsed,
        Err(_) if overture_domain::text::check_deployment_name(id).is_ok() => {
            let named = api.queries.named(Some(caller.tenant()), id).await?;
            match named.into_iter().next() {
                Some(view) => view.id,
                None => return Err(ApiError::no_deployment(id)),
            }
        }
        Err(_) => return Err(ApiError::no_deployment(id)),
    };
    match api.queries.deployment(parsed).await? {
        Some(view) if caller.owns(&view.tenant) => Ok(view),
        _ => Err(ApiError::no_deployment(id)),
    }
}

/// When to show a deployment as it stood.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(super) struct StatusQuery {
    /// As it stood then, folded from the log alone: after the event at this revision (0-based),
    /// or after every event recorded at or before this RFC 3339 time.
    at: Option<String>,
}

/// A deployment's status object, with its steps; with `at`, as it stood then.
#[utoipa::path(
    get,
    path = "/v1/deployments/{id}",
    params(("id" = String, Path, description = "The deployment: its id, or its name (the caller's own deployments only; a name is held by one deployment of the tenant until it is destroyed)"), StatusQuery),
    security(("token" = [])),
    responses(
        (status = 200, description = "The status object", body = DeploymentView,
         links(
             ("events" = (operation_id = "deployment_events", parameters(("id" = "$response.body#/id")))),
             ("redrive" = (operation_id = "redrive_deployment", parameters(("id" = "$response.body#/id")))),
         )),
        (status = 400, description = "`at` is not a revision or a time of it", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
    )
)]
pub(super) async fn get_deployment(
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

/// Cancel a running deployment: its running steps are killed, no other starts, its bastion is
/// closed and its secrets purged.
#[utoipa::path(
    post,
    path = "/v1/deployments/{id}/cancel",
    params(("id" = String, Path, description = "The deployment: its id, or its name (the caller's own deployments only; a name is held by one deployment of the tenant until it is destroyed)")),
    security(("token" = [])),
    responses(
        (status = 202, description = "Recorded; the status object", body = DeploymentView),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, description = "It has already ended", body = ErrorBody),
    )
)]
pub(super) async fn cancel_deployment(
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
    params(("id" = String, Path, description = "The deployment: its id, or its name (the caller's own deployments only; a name is held by one deployment of the tenant until it is destroyed)")),
    request_body(content = Option<RedriveDeployment>, description = "The secrets, given again"),
    security(("token" = [])),
    responses(
        (status = 202, description = "Recorded and started: the status object", body = DeploymentView),
        (status = 400, description = "Malformed, or a secret is missing; nothing recorded", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, description = "It did not fail (it runs, succeeded, was cancelled or destroyed)", body = ErrorBody),
        (status = 413, description = "Larger than 1 MiB", body = ErrorBody),
        (status = 415, description = "Not JSON", body = ErrorBody),
    )
)]
pub(super) async fn redrive_deployment(
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
    // The body is optional: none, or JSON `null`, gives no secrets.
    let request: RedriveDeployment = if empty {
        RedriveDeployment::default()
    } else {
        json_body::<Option<RedriveDeployment>>(&headers, body)?.unwrap_or_default()
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
