//! The routes. Each handler carries its `#[utoipa::path]`, and [`router`] registers handlers
//! only through `routes!`, so `/openapi.json` lists exactly what is served.
//!
//! Every route under `/v1` is authenticated ([`crate::auth`]) and sees only the caller's
//! tenant: another tenant's deployment answers 404, as if it did not exist.
//!
//! - This file: the document's frame, the one list of routes, the request bodies they read,
//!   and the open routes (`/healthz`, `/openapi.json`).
//! - [`deployments`]: starting, listing, reading, cancelling and redriving a deployment.
//! - [`records`]: what a deployment recorded (its events, also as a live stream) and what its
//!   steps printed.
//! - [`tenant`]: the caller's tenant, its grants of access and its service registry.
//! - `POST /v1/events` is [`crate::events`].

mod deployments;
mod records;
mod tenant;

use std::sync::LazyLock;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::{Json, Router};
use serde::de::DeserializeOwned;
use tracing::Instrument;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, SecurityScheme};
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::auth::authenticate;
use crate::error::{malformed, ApiError, ErrorBody, Problem, MAX_BODY};
use crate::Api;

pub use deployments::{CreateDeployment, RedriveDeployment};

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
        .routes(routes!(
            deployments::create_deployment,
            deployments::list_deployments
        ))
        .routes(routes!(deployments::get_deployment))
        .routes(routes!(records::deployment_events))
        .routes(routes!(records::step_log))
        .routes(routes!(deployments::cancel_deployment))
        .routes(routes!(deployments::redrive_deployment))
        .routes(routes!(tenant::tenant))
        .routes(routes!(tenant::grants))
        .routes(routes!(tenant::services))
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
        .layer(middleware::from_fn(trace_request))
        .with_state(api)
}

/// Opens a span for each request naming its method, its path (which names the deployment),
/// its route and, once its token is checked, its tenant; and records the status it got.
async fn trace_request(request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|path| path.as_str().to_owned());
    let span = tracing::info_span!(
        "api",
        method = %request.method(),
        path = %request.uri().path(),
        route = %route.as_deref().unwrap_or("(none)"),
        tenant = tracing::field::Empty,
        status = tracing::field::Empty,
    );
    let response = next.run(request).instrument(span.clone()).await;
    span.record("status", response.status().as_u16());
    response
}

/// The OpenAPI document, built from the handlers' annotations, as JSON.
pub fn document() -> &'static serde_json::Value {
    static DOCUMENT: LazyLock<serde_json::Value> = LazyLock::new(|| {
        let (tenant, open) = described();
        let (_, mut document) = tenant.split_for_parts();
        document.merge(open.split_for_parts().1);
        let mut document = serde_json::to_value(document).unwrap_or_default();
        links_as_specified(&mut document);
        document
    });
    &DOCUMENT
}

/// utoipa 5 writes a link's fields as its Rust names (`operation_id`); OpenAPI, validators and
/// client generators read them in camel case (`operationId`).
fn links_as_specified(document: &mut serde_json::Value) {
    let operations = document["paths"]
        .as_object_mut()
        .into_iter()
        .flat_map(|paths| paths.values_mut())
        .filter_map(serde_json::Value::as_object_mut)
        .flat_map(|operations| operations.values_mut());
    let links = operations
        .filter_map(|operation| operation.get_mut("responses")?.as_object_mut())
        .flat_map(|responses| responses.values_mut())
        .filter_map(|response| response.get_mut("links")?.as_object_mut())
        .flat_map(|links| links.values_mut())
        .filter_map(serde_json::Value::as_object_mut);
    for link in links {
        for (rust, specified) in [
            ("operation_id", "operationId"),
            ("operation_ref", "operationRef"),
            ("request_body", "requestBody"),
        ] {
            if let Some(value) = link.remove(rust) {
                link.insert(specified.to_owned(), value);
            }
        }
    }
}

/// A JSON request body, read into `T`.
pub(crate) fn json_body<T: DeserializeOwned>(
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
    read_body(body)
}

/// The request's body, whatever its type, or why it could not be read (too large, stalled).
pub(crate) fn read_body(body: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
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

/// The answer of `/healthz`.
#[derive(serde::Serialize, utoipa::ToSchema)]
struct Health {
    /// Always `ok`: the server answers.
    status: &'static str,
}

/// Whether the server answers.
#[utoipa::path(
    get,
    path = "/healthz",
    responses((status = 200, description = "It answers", body = Health))
)]
async fn healthz() -> Json<Health> {
    Json(Health { status: "ok" })
}

/// This document.
#[utoipa::path(
    get,
    path = "/openapi.json",
    responses((status = 200, description = "The OpenAPI 3 document", body = Object))
)]
async fn openapi() -> Json<&'static serde_json::Value> {
    Json(document())
}
