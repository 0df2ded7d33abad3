//! Nova: creating, showing, listing and deleting servers of the caller's project.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, Query, State as Shared};
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{each, parse, reply, unauthorized, Service, Tenant};
use crate::cloud::{Cloud, Failure};
use crate::cloud_init;
use crate::state::{timestamp, NewServer, Project, Server, ServerStatus, State, StateError};

#[derive(Deserialize)]
struct CreateBody {
    server: CreateServer,
}

/// The fields of a server this cloud reads; `imageRef`, `flavorRef`, `networks` are accepted
/// and ignored (every server is the host's system on the project's one network).
#[derive(Deserialize)]
struct CreateServer {
    name: String,
    #[serde(default)]
    user_data: Option<String>,
    #[serde(default)]
    metadata: BTreeMap<String, String>,
    #[serde(default)]
    security_groups: Vec<GroupName>,
}

#[derive(Deserialize)]
struct GroupName {
    name: String,
}

/// Nova's error shape: `{"<kind>": {"code", "message"}}`.
fn error(status: StatusCode, message: &str) -> Response {
    let kind = match status {
        StatusCode::BAD_REQUEST => "badRequest",
        StatusCode::FORBIDDEN => "forbidden",
        StatusCode::NOT_FOUND => "itemNotFound",
        StatusCode::CONFLICT => "conflictingRequest",
        _ => "computeFault",
    };
    reply(
        status,
        json!({kind: {"code": status.as_u16(), "message": message}}),
    )
}

/// Nova's words for a failure and for another project.
const NOVA: Service = Service {
    failure,
    other_project,
};

fn failure(failure: Failure) -> Response {
    match failure {
        Failure::Refused(refusal) => {
            let status = match &refusal {
                StateError::Unauthenticated => return unauthorized(),
                StateError::ServerNotFound(_) | StateError::NoSuchProject(_) => {
                    StatusCode::NOT_FOUND
                }
                StateError::AmbiguousGroup(_) => StatusCode::CONFLICT,
                StateError::Exhausted(_) => StatusCode::FORBIDDEN,
                _ => StatusCode::BAD_REQUEST,
            };
            error(status, &refusal.to_string())
        }
        Failure::Broken(message) => error(StatusCode::INTERNAL_SERVER_ERROR, &message),
    }
}

fn other_project() -> Response {
    error(
        StatusCode::FORBIDDEN,
        "Policy doesn't allow listing another project's servers: a token sees its own project only.",
    )
}

/// `POST /compute/v2.1/servers`: 202, the server boots in the background.
pub async fn create(Shared(cloud): Shared<Arc<Cloud>>, tenant: Tenant, body: Bytes) -> Response {
    let request = match parse::<CreateBody>(&body) {
        Ok(CreateBody { server }) => server,
        Err(message) => return error(StatusCode::BAD_REQUEST, &message),
    };
    let user_data = match request.user_data.as_deref().map(cloud_init::parse) {
        None => Default::default(),
        Some(Ok(user_data)) => user_data,
        Some(Err(problem)) => return error(StatusCode::BAD_REQUEST, &problem.to_string()),
    };
    let new = NewServer {
        name: request.name,
        metadata: request.metadata,
        groups: request
            .security_groups
            .into_iter()
            .map(|g| g.name)
            .collect(),
        user_data,
    };
    match cloud.create_server(&tenant.project_id, new).await {
        Ok(server) => {
            let groups = cloud.read(|state| group_names(state, &tenant.project_id, &server));
            reply(
                StatusCode::ACCEPTED,
                json!({"server": {"id": server.id, "links": [], "security_groups": groups}}),
            )
        }
        Err(problem) => failure(problem),
    }
}

/// `GET /compute/v2.1/servers[?name=]`.
pub async fn list(
    Shared(cloud): Shared<Arc<Cloud>>,
    tenant: Tenant,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    NOVA.list(&cloud, &tenant, &query, "servers", |state, project| {
        let servers = state.servers(project, query.get("name").map(String::as_str))?;
        Ok(each(
            servers,
            |s| json!({"id": s.id, "name": s.name, "links": []}),
        ))
    })
}

/// `GET /compute/v2.1/servers/detail[?name=]`.
pub async fn list_detail(
    Shared(cloud): Shared<Arc<Cloud>>,
    tenant: Tenant,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    NOVA.list(&cloud, &tenant, &query, "servers", |state, project_id| {
        let project = state.project(project_id)?;
        let servers = state.servers(project_id, query.get("name").map(String::as_str))?;
        Ok(each(servers, |server| server_body(state, project, server)))
    })
}

/// `GET /compute/v2.1/servers/{id}`.
pub async fn show(
    Shared(cloud): Shared<Arc<Cloud>>,
    tenant: Tenant,
    Path(id): Path<String>,
) -> Response {
    let server = cloud.read(|state| -> Result<Value, StateError> {
        let project = state.project(&tenant.project_id)?;
        let server = state.server(&tenant.project_id, &id)?;
        Ok(server_body(state, project, server))
    });
    NOVA.answer(StatusCode::OK, "server", server)
}

/// `DELETE /compute/v2.1/servers/{id}`: 204 once its namespace, link and processes are gone.
pub async fn delete(
    Shared(cloud): Shared<Arc<Cloud>>,
    tenant: Tenant,
    Path(id): Path<String>,
) -> Response {
    NOVA.deleted(cloud.delete_server(&tenant.project_id, &id).await)
}

/// The actions of `POST /servers/{id}/action` this cloud takes: only `os-getConsoleOutput`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ActionBody {
    #[serde(rename = "os-getConsoleOutput")]
    console_output: ConsoleOutput,
}

#[derive(Deserialize)]
struct ConsoleOutput {
    /// The last lines to answer; every line when absent or null (as Nova takes it).
    #[serde(default)]
    length: Option<LengthValue>,
}

/// Nova takes the length as a number or as a numeric string; -1 means every line.
#[derive(Deserialize)]
#[serde(untagged)]
enum LengthValue {
    Number(i64),
    Text(String),
}

/// `POST /compute/v2.1/servers/{id}/action` with `{"os-getConsoleOutput": {"length": N}}`:
/// the server's console log, `{"output": TEXT}`.
pub async fn action(
    Shared(cloud): Shared<Arc<Cloud>>,
    tenant: Tenant,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    let request = match parse::<ActionBody>(&body) {
        Ok(request) => request,
        Err(message) => {
            return error(
                StatusCode::BAD_REQUEST,
                &format!("{message}; this cloud takes only the action os-getConsoleOutput"),
            )
        }
    };
    let length = match request.console_output.length {
        None => None,
        Some(LengthValue::Number(n)) => Some(n),
        Some(LengthValue::Text(text)) => match text.parse::<i64>() {
            Ok(n) => Some(n),
            Err(_) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    "os-getConsoleOutput: length must be an integer",
                )
            }
        },
    };
    let length = match length {
        None | Some(-1) => None,
        Some(n) if n >= 0 => usize::try_from(n).ok(),
        Some(_) => {
            return error(
                StatusCode::BAD_REQUEST,
                "os-getConsoleOutput: length must be -1 or more",
            )
        }
    };
    match cloud.console_output(&tenant.project_id, &id, length).await {
        Ok(output) => reply(StatusCode::OK, json!({ "output": output })),
        Err(problem) => failure(problem),
    }
}

fn group_names(state: &State, project_id: &str, server: &Server) -> Vec<Value> {
    server
        .groups
        .iter()
        .filter_map(|id| state.group(project_id, id).ok())
        .map(|group| json!({"name": group.name}))
        .collect()
}

/// A server as `GET /servers/{id}` shows it.
fn server_body(state: &State, project: &Project, server: &Server) -> Value {
    let addresses = if server.status == ServerStatus::Build {
        json!({})
    } else {
        json!({"private": [{
            "addr": state.server_address(project, server).to_string(),
            "version": 4,
            "OS-EXT-IPS:type": "fixed",
        }]})
    };
    let mut body = json!({
        "id": server.id,
        "name": server.name,
        "status": server.status.as_str(),
        "tenant_id": project.id,
        "user_id": project.user_id,
        "metadata": server.metadata,
        "security_groups": group_names(state, &project.id, server),
        "addresses": addresses,
        "created": timestamp(server.created),
        "updated": timestamp(server.updated),
        "links": [],
    });
    if let (ServerStatus::Error, Some(why)) = (server.status, &server.fault) {
        body["fault"] = json!({"code": 500, "message": why, "created": timestamp(server.updated)});
    }
    body
}
