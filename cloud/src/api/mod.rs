//! The HTTP API (see `API.md`): one module per service, each rendering its own error shape.
//!
//! - This file: the router, the callers ([`Caller`] for Keystone, [`Tenant`] for Nova and Neutron,
//!   which also takes the backend-unreachable fault), and shared helpers.
//! - [`keystone`], [`nova`], [`neutron`]: the OpenStack subset.
//! - [`admin`]: projects (in domains), tokens, faults, status and shutdown, behind
//!   `X-Admin-Token`.

mod admin;
mod keystone;
mod neutron;
mod nova;

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use crate::cloud::{Cloud, Failure};
use crate::state::{State, StateError};

/// The cloud's routes.
pub fn router(cloud: Arc<Cloud>) -> Router {
    Router::new()
        .route(
            "/identity/v3/auth/tokens",
            post(keystone::issue)
                .get(keystone::validate)
                .delete(keystone::revoke),
        )
        .route("/compute/v2.1/servers", post(nova::create).get(nova::list))
        .route("/compute/v2.1/servers/detail", get(nova::list_detail))
        .route(
            "/compute/v2.1/servers/{id}",
            get(nova::show).delete(nova::delete),
        )
        .route("/compute/v2.1/servers/{id}/action", post(nova::action))
        .route(
            "/network/v2.0/security-groups",
            post(neutron::create_group).get(neutron::list_groups),
        )
        .route(
            "/network/v2.0/security-groups/{id}",
            get(neutron::show_group).delete(neutron::delete_group),
        )
        .route(
            "/network/v2.0/security-group-rules",
            post(neutron::create_rule).get(neutron::list_rules),
        )
        .route(
            "/network/v2.0/security-group-rules/{id}",
            get(neutron::show_rule).delete(neutron::delete_rule),
        )
        .route("/admin/projects", post(admin::create_project))
        .route("/admin/projects/{name}", delete(admin::delete_project))
        .route("/admin/projects/{name}/tokens", post(admin::issue_token))
        .route("/admin/faults", post(admin::inject).delete(admin::clear))
        .route("/admin/status", get(admin::status))
        .route("/admin/shutdown", post(admin::shutdown))
        .fallback(not_found)
        .with_state(cloud)
}

async fn not_found() -> Response {
    reply(
        StatusCode::NOT_FOUND,
        json!({"error": {"code": 404, "title": "Not Found", "message": "This cloud has no such resource; see API.md for the paths it serves."}}),
    )
}

/// A JSON answer.
pub fn reply(status: StatusCode, body: Value) -> Response {
    (status, Json(body)).into_response()
}

/// The 401 every service answers for a missing or bad token.
pub fn unauthorized() -> Response {
    reply(
        StatusCode::UNAUTHORIZED,
        json!({"error": {"code": 401, "title": "Unauthorized", "message": "The request you have made requires authentication."}}),
    )
}

/// Parses a JSON body, or says why not.
pub fn parse<T: DeserializeOwned>(body: &Bytes) -> Result<T, String> {
    serde_json::from_slice(body).map_err(|e| format!("the body is not the expected JSON: {e}"))
}

/// A header's value, if present and text.
fn header<'a>(parts: &'a Parts, name: &str) -> Option<&'a str> {
    parts.headers.get(name).and_then(|v| v.to_str().ok())
}

/// Whether a query names a project other than the caller's (`project_id` or `tenant_id`).
pub fn names_other_project(query: &HashMap<String, String>, project_id: &str) -> bool {
    ["project_id", "tenant_id"]
        .iter()
        .filter_map(|key| query.get(*key))
        .any(|named| named != project_id)
}

/// How Nova or Neutron words its answers: the one thing their handlers do not share.
pub struct Service {
    /// A failure in the service's own error shape.
    pub failure: fn(Failure) -> Response,
    /// The 403 for a query or body naming a project other than the caller's.
    pub other_project: fn() -> Response,
}

impl Service {
    /// The found value under `key` with `status`, or the refusal in this service's error shape.
    pub fn answer<T: serde::Serialize, E>(
        &self,
        status: StatusCode,
        key: &str,
        found: Result<T, E>,
    ) -> Response
    where
        Failure: From<E>,
    {
        match found {
            Ok(value) => reply(status, json!({ key: value })),
            Err(refusal) => (self.failure)(refusal.into()),
        }
    }

    /// 204 once the deletion is done, or the refusal in this service's error shape.
    pub fn deleted(&self, done: Result<(), Failure>) -> Response {
        match done {
            Ok(()) => StatusCode::NO_CONTENT.into_response(),
            Err(problem) => (self.failure)(problem),
        }
    }

    /// A `GET` of a collection: what `find` shows of the caller's project, under `key`; refused
    /// when the query names another project.
    pub fn list(
        &self,
        cloud: &Cloud,
        tenant: &Tenant,
        query: &HashMap<String, String>,
        key: &str,
        find: impl FnOnce(&State, &str) -> Result<Vec<Value>, StateError>,
    ) -> Response {
        if names_other_project(query, &tenant.project_id) {
            return (self.other_project)();
        }
        let found = cloud.read(|state| find(state, &tenant.project_id));
        self.answer(StatusCode::OK, key, found)
    }
}

/// Each item as `show` renders it: the body of a collection.
pub fn each<T>(items: Vec<&T>, show: impl Fn(&T) -> Value) -> Vec<Value> {
    items.into_iter().map(show).collect()
}

/// A caller holding a valid token: the project it is scoped to.
#[derive(Debug)]
pub struct Caller {
    /// The token's project.
    pub project_id: String,
}

impl FromRequestParts<Arc<Cloud>> for Caller {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, cloud: &Arc<Cloud>) -> Result<Self, Response> {
        let token = header(parts, "x-auth-token").ok_or_else(unauthorized)?;
        cloud
            .read(|state| {
                state
                    .token(token, Cloud::now())
                    .map(|t| t.project_id.clone())
            })
            .map(|project_id| Caller { project_id })
            .map_err(|_| unauthorized())
    }
}

/// A caller of Nova or Neutron: a valid token, and no backend-unreachable fault left to serve.
#[derive(Debug)]
pub struct Tenant {
    /// The token's project.
    pub project_id: String,
}

impl FromRequestParts<Arc<Cloud>> for Tenant {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, cloud: &Arc<Cloud>) -> Result<Self, Response> {
        let Caller { project_id } = Caller::from_request_parts(parts, cloud).await?;
        if cloud.write(|state| state.take_backend_fault(&project_id)) {
            return Err(reply(
                StatusCode::SERVICE_UNAVAILABLE,
                json!({"error": {"code": 503, "message": "The backend server is unreachable"}}),
            ));
        }
        Ok(Tenant { project_id })
    }
}
