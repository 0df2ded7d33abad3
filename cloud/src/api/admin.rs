//! The admin API, behind `X-Admin-Token` (the contents of `DIR/admin-token`), never subject to
//! faults: projects (in domains) and their users, tokens of any lifetime, faults, status and
//! shutdown.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{FromRequestParts, Path, Query, State as Shared};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::neutron::rule_body;
use super::{header, parse, reply, unauthorized};
use crate::cloud::{Cloud, Failure};
use crate::secret;
use crate::state::{StateError, DEFAULT_DOMAIN};

/// A caller holding the admin token.
#[derive(Debug)]
pub struct Admin;

impl FromRequestParts<Arc<Cloud>> for Admin {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, cloud: &Arc<Cloud>) -> Result<Self, Response> {
        match header(parts, "x-admin-token") {
            Some(token) if secret::same(token, cloud.admin_token()) => Ok(Admin),
            _ => Err(unauthorized()),
        }
    }
}

fn error(status: StatusCode, message: &str) -> Response {
    let title = status.canonical_reason().unwrap_or("Error");
    reply(
        status,
        json!({"error": {"code": status.as_u16(), "title": title, "message": message}}),
    )
}

fn failure(failure: Failure) -> Response {
    match failure {
        Failure::Refused(refusal) => {
            let status = match refusal {
                StateError::NoSuchProject(_)
                | StateError::NoSuchProjectIn { .. }
                | StateError::ServerNotFound(_) => StatusCode::NOT_FOUND,
                StateError::ProjectInUse(_) => StatusCode::CONFLICT,
                _ => StatusCode::BAD_REQUEST,
            };
            error(status, &refusal.to_string())
        }
        Failure::Broken(message) => error(StatusCode::INTERNAL_SERVER_ERROR, &message),
    }
}

fn default_domain() -> String {
    DEFAULT_DOMAIN.to_owned()
}

#[derive(Deserialize)]
struct NewProject {
    name: String,
    /// The domain's name, created if missing.
    #[serde(default = "default_domain")]
    domain: String,
}

/// `POST /admin/projects`: creates the project (and its domain) and its user if missing;
/// answers the password.
pub async fn create_project(Shared(cloud): Shared<Arc<Cloud>>, _: Admin, body: Bytes) -> Response {
    let NewProject { name, domain } = match parse::<NewProject>(&body) {
        Ok(new) => new,
        Err(message) => return error(StatusCode::BAD_REQUEST, &message),
    };
    let created = cloud.write(|state| {
        state.ensure_project(&name, &domain).map(|p| {
            let domain = json!({"id": p.domain.id, "name": p.domain.name});
            json!({
                "project": {"id": p.id, "name": p.name, "domain": domain},
                "user": {"id": p.user_id, "name": p.name, "domain": domain, "password": p.password},
            })
        })
    });
    match created {
        Ok(body) => reply(StatusCode::OK, body),
        Err(refusal) => failure(refusal.into()),
    }
}

#[derive(Deserialize)]
struct NewToken {
    #[serde(default = "an_hour")]
    expires_in_seconds: i64,
    /// The project's domain.
    #[serde(default = "default_domain")]
    domain: String,
}

fn an_hour() -> i64 {
    3600
}

/// `POST /admin/projects/{name}/tokens`: a token of any lifetime (negative: already expired).
pub async fn issue_token(
    Shared(cloud): Shared<Arc<Cloud>>,
    _: Admin,
    Path(name): Path<String>,
    body: Bytes,
) -> Response {
    let (lifetime, domain) = if body.is_empty() {
        (an_hour(), default_domain())
    } else {
        match parse::<NewToken>(&body) {
            Ok(new) => (new.expires_in_seconds, new.domain),
            Err(message) => return error(StatusCode::BAD_REQUEST, &message),
        }
    };
    const TEN_YEARS: i64 = 10 * 366 * 24 * 3600;
    if lifetime.abs() > TEN_YEARS {
        return error(
            StatusCode::BAD_REQUEST,
            "expires_in_seconds: give at most ten years either way",
        );
    }
    let issued = cloud.write(|state| {
        let id = state.project_in(&domain, &name)?.id.clone();
        state.issue_token(&id, Cloud::now(), chrono::Duration::seconds(lifetime))
    });
    match issued {
        Ok((value, token)) => reply(
            StatusCode::CREATED,
            json!({"token": value, "expires_at": token.expires_at.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()}),
        ),
        Err(refusal) => failure(refusal.into()),
    }
}

/// `DELETE /admin/projects/{name}?domain=NAME` (default `Default`): deletes a project without
/// servers, with its user, groups, rules and tokens; its name may then be taken again.
pub async fn delete_project(
    Shared(cloud): Shared<Arc<Cloud>>,
    _: Admin,
    Path(name): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let domain = query.get("domain").map_or(DEFAULT_DOMAIN, String::as_str);
    let deleted = cloud.write(|state| {
        let id = state.project_in(domain, &name)?.id.clone();
        state.delete_project(&id)
    });
    match deleted {
        Ok(_) => StatusCode::NO_CONTENT.into_response(),
        Err(refusal) => failure(refusal.into()),
    }
}

/// A fault to inject, as `POST /admin/faults` takes it (projects of the `Default` domain).
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
enum Fault {
    /// The next `times` Nova or Neutron calls of the project answer 503.
    BackendUnreachable { project: String, times: u32 },
    /// Servers of that name created later never start sshd.
    NeverBoot { project: String, server: String },
    /// The server (name or id) refuses everything from now on.
    Unreachable { project: String, server: String },
    /// The server (name or id) gets new SSH host keys and its sshd restarts with them.
    Rekey { project: String, server: String },
}

/// `POST /admin/faults`.
pub async fn inject(Shared(cloud): Shared<Arc<Cloud>>, _: Admin, body: Bytes) -> Response {
    let fault = match parse::<Fault>(&body) {
        Ok(fault) => fault,
        Err(message) => return error(StatusCode::BAD_REQUEST, &format!("{message}; kinds: backend-unreachable (with times), never-boot (with server), unreachable (with server), rekey (with server)")),
    };
    let project_named =
        |name: &str| cloud.read(|state| state.project_named(name).map(|p| p.id.clone()));
    let outcome = match &fault {
        Fault::BackendUnreachable { project, times } => project_named(project)
            .and_then(|id| cloud.write(|state| state.fail_backend(&id, *times)))
            .map_err(Failure::from),
        Fault::NeverBoot { project, server } => project_named(project)
            .and_then(|id| cloud.write(|state| state.never_boot(&id, server)))
            .map_err(Failure::from),
        Fault::Unreachable { project, server } => match project_named(project) {
            Ok(id) => cloud.make_unreachable(&id, server).await,
            Err(refusal) => Err(refusal.into()),
        },
        Fault::Rekey { project, server } => match project_named(project) {
            Ok(id) => cloud.rekey(&id, server).await,
            Err(refusal) => Err(refusal.into()),
        },
    };
    match outcome {
        Ok(()) => reply(StatusCode::OK, json!({ "fault": fault })),
        Err(problem) => failure(problem),
    }
}

/// `DELETE /admin/faults?project=NAME`.
pub async fn clear(
    Shared(cloud): Shared<Arc<Cloud>>,
    _: Admin,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let Some(name) = query.get("project") else {
        return error(
            StatusCode::BAD_REQUEST,
            "give the project whose faults to clear: ?project=NAME",
        );
    };
    let outcome = match cloud.read(|state| state.project_named(name).map(|p| p.id.clone())) {
        Ok(id) => cloud.clear_faults(&id).await,
        Err(refusal) => Err(refusal.into()),
    };
    match outcome {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(problem) => failure(problem),
    }
}

/// `GET /admin/status`: every project with its network, servers, groups, rules and faults.
pub async fn status(Shared(cloud): Shared<Arc<Cloud>>, _: Admin) -> Response {
    let names = cloud.names();
    let projects: Vec<Value> = cloud.read(|state| {
        state
            .projects()
            .iter()
            .map(|project| {
                let servers: Vec<Value> = project
                    .servers
                    .iter()
                    .map(|server| {
                        let groups: Vec<String> = server
                            .groups
                            .iter()
                            .filter_map(|id| state.group(&project.id, id).ok())
                            .map(|g| g.name.clone())
                            .collect();
                        json!({
                            "id": server.id,
                            "name": server.name,
                            "status": server.status.as_str(),
                            "address": state.server_address(project, server).to_string(),
                            "namespace": names.namespace(server.slot),
                            "sshd_pid": server.sshd_pid,
                            "security_groups": groups,
                            "metadata": server.metadata,
                            "unreachable": server.unreachable,
                        })
                    })
                    .collect();
                let groups: Vec<Value> = project
                    .groups
                    .iter()
                    .map(|group| {
                        let rules: Vec<Value> = project
                            .rules
                            .iter()
                            .filter(|r| r.group_id == group.id)
                            .map(|r| rule_body(r, &project.id))
                            .collect();
                        json!({"id": group.id, "name": group.name, "rules": rules})
                    })
                    .collect();
                json!({
                    "id": project.id,
                    "name": project.name,
                    "domain": {"id": project.domain.id, "name": project.domain.name},
                    "network": {
                        "bridge": names.bridge(project.index),
                        "cidr": state.subnet(project).to_string(),
                        "gateway": state.gateway(project).to_string(),
                    },
                    "servers": servers,
                    "security_groups": groups,
                    "faults": {
                        "backend_unreachable": project.faults.backend_unreachable,
                        "never_boot": project.faults.never_boot,
                    },
                })
            })
            .collect()
    });
    reply(
        StatusCode::OK,
        json!({"instance": names.id(), "url": cloud.base_url(), "projects": projects}),
    )
}

/// `POST /admin/shutdown`: answers, then the cloud stops and removes everything it created.
pub async fn shutdown(Shared(cloud): Shared<Arc<Cloud>>, _: Admin) -> Response {
    tracing::info!("shutdown requested through the admin API");
    cloud.request_shutdown();
    reply(StatusCode::OK, json!({}))
}
