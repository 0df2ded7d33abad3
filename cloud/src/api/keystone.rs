//! Keystone v3: project-scoped password authentication, and validating and revoking tokens.
//! Neither tokens nor passwords ever appear in an answer's message or in the log.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State as Shared;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{reply, unauthorized, Caller};
use crate::cloud::Cloud;
use crate::state::{DomainRef, ProjectScope, State, Token, UserRef};

const SUBJECT: &str = "x-subject-token";

#[derive(Deserialize)]
struct AuthBody {
    auth: Auth,
}

#[derive(Deserialize)]
struct Auth {
    identity: Identity,
    scope: Option<Scope>,
}

#[derive(Deserialize)]
struct Identity {
    methods: Vec<String>,
    password: Option<PasswordMethod>,
}

#[derive(Deserialize)]
struct PasswordMethod {
    user: User,
}

#[derive(Deserialize)]
struct User {
    name: Option<String>,
    id: Option<String>,
    domain: Option<Domain>,
    password: String,
}

#[derive(Deserialize)]
struct Domain {
    id: Option<String>,
    name: Option<String>,
}

#[derive(Deserialize)]
struct Scope {
    project: Option<ProjectRef>,
}

#[derive(Deserialize)]
struct ProjectRef {
    name: Option<String>,
    id: Option<String>,
    domain: Option<Domain>,
}

impl Domain {
    /// The domain as named; an id wins over a name, as in Keystone. Neither: `Default`.
    fn named(self) -> Option<DomainRef> {
        match (self.id, self.name) {
            (Some(id), _) => Some(DomainRef::Id(id)),
            (None, Some(name)) => Some(DomainRef::Name(name)),
            (None, None) => None,
        }
    }
}

fn bad_request(message: &str) -> Response {
    reply(
        StatusCode::BAD_REQUEST,
        json!({"error": {"code": 400, "title": "Bad Request", "message": message}}),
    )
}

fn token_not_found() -> Response {
    reply(
        StatusCode::NOT_FOUND,
        json!({"error": {"code": 404, "title": "Not Found", "message": "Could not find token: the X-Subject-Token is unknown, revoked, expired or of another project."}}),
    )
}

/// `POST /identity/v3/auth/tokens`: password authentication scoped to the user's project.
pub async fn issue(Shared(cloud): Shared<Arc<Cloud>>, body: Bytes) -> Response {
    // serde's messages may quote a value, and this body holds a password: say only what is expected.
    let Ok(AuthBody { auth }) = serde_json::from_slice::<AuthBody>(&body) else {
        return bad_request("Expected {\"auth\":{\"identity\":{\"methods\":[\"password\"],\"password\":{\"user\":{\"name\",\"domain\",\"password\"}}},\"scope\":{\"project\":{\"name\",\"domain\"}}}}");
    };
    let Some(password) = auth
        .identity
        .password
        .filter(|_| auth.identity.methods.iter().any(|m| m == "password"))
    else {
        return bad_request("Only the password method is supported: give identity.methods [\"password\"] and identity.password.");
    };
    let Some(project) = auth.scope.and_then(|s| s.project) else {
        return bad_request("This cloud issues project-scoped tokens only: add scope.project with the project's name (or id) and domain.");
    };
    let user = password.user;
    let scope = match (project.id, project.name) {
        (Some(id), _) => ProjectScope::Id(id),
        (None, Some(name)) => ProjectScope::Name {
            name,
            domain: project.domain.and_then(Domain::named),
        },
        (None, None) => return bad_request("scope.project needs a name or an id."),
    };
    let user_ref = match (user.id, user.name) {
        (Some(id), _) => UserRef::Id(id),
        (None, Some(name)) => UserRef::Name {
            name,
            domain: user.domain.and_then(Domain::named),
        },
        (None, None) => return bad_request("identity.password.user needs a name or an id."),
    };
    let issued = cloud.write(|state| {
        let (value, token) = state
            .password_auth(&user_ref, &user.password, &scope, Cloud::now())
            .ok()?;
        Some((value, token_body(&cloud, state, &token)))
    });
    match issued {
        Some((value, body)) => with_subject(StatusCode::CREATED, &value, body),
        None => unauthorized(),
    }
}

/// `GET /identity/v3/auth/tokens`: a token of the caller's project (possibly the caller's own).
pub async fn validate(
    Shared(cloud): Shared<Arc<Cloud>>,
    caller: Caller,
    headers: HeaderMap,
) -> Response {
    let Some(subject) = headers.get(SUBJECT).and_then(|v| v.to_str().ok()) else {
        return bad_request("Give the token to validate in X-Subject-Token.");
    };
    let body = cloud.read(|state| {
        let token = state.token(subject, Cloud::now()).ok()?;
        (token.project_id == caller.project_id).then(|| token_body(&cloud, state, token))
    });
    match body {
        Some(body) => with_subject(StatusCode::OK, subject, body),
        None => token_not_found(),
    }
}

/// `DELETE /identity/v3/auth/tokens`: revokes a token of the caller's project.
pub async fn revoke(
    Shared(cloud): Shared<Arc<Cloud>>,
    caller: Caller,
    headers: HeaderMap,
) -> Response {
    let Some(subject) = headers.get(SUBJECT).and_then(|v| v.to_str().ok()) else {
        return bad_request("Give the token to revoke in X-Subject-Token.");
    };
    let revoked = cloud.write(|state| {
        let ours = state
            .token(subject, Cloud::now())
            .is_ok_and(|t| t.project_id == caller.project_id);
        ours && state.revoke(subject).is_ok()
    });
    if revoked {
        StatusCode::NO_CONTENT.into_response()
    } else {
        token_not_found()
    }
}

fn with_subject(status: StatusCode, token: &str, body: Value) -> Response {
    let mut response = reply(status, body);
    if let Ok(value) = HeaderValue::from_str(token) {
        response.headers_mut().insert(SUBJECT, value);
    }
    response
}

/// `{"token": TOKEN}` as Keystone shows it, with the catalog of this cloud's three services.
fn token_body(cloud: &Cloud, state: &State, token: &Token) -> Value {
    let (project_name, project_id, domain) = state
        .project(&token.project_id)
        .map(|p| {
            (
                p.name.clone(),
                p.id.clone(),
                json!({"id": p.domain.id, "name": p.domain.name}),
            )
        })
        .unwrap_or_default();
    let time = |t: chrono::DateTime<chrono::Utc>| t.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string();
    let [identity_id, compute_id, network_id] = cloud.endpoint_ids();
    let base = cloud.base_url();
    let service = |kind: &str, name: &str, id: &str, path: &str| {
        json!({"type": kind, "name": name, "id": id, "endpoints": [{
            "id": id, "interface": "public", "region": "RegionOne", "region_id": "RegionOne",
            "url": format!("{base}{path}"),
        }]})
    };
    json!({"token": {
        "expires_at": time(token.expires_at),
        "issued_at": time(token.issued_at),
        "methods": ["password"],
        "user": {"id": token.user_id, "name": project_name, "domain": domain},
        "project": {"id": project_id, "name": project_name, "domain": domain},
        "roles": [{"id": state.role_id(), "name": "member"}],
        "catalog": [
            service("identity", "keystone", identity_id, "/identity/v3"),
            service("compute", "nova", compute_id, "/compute/v2.1"),
            service("network", "neutron", network_id, "/network"),
        ],
    }})
}
