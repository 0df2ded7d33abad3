//! The routes, driven through the axum router (`tower::ServiceExt::oneshot`) on fakes of the
//! API's ports: an identity service that knows two tokens of two tenants, the engine that
//! records ([`Recorded`]) on a log in memory, and queries that fold that log. What a client sees:
//! status codes, the JSON of a few routes, the refusals of the token check, and that one tenant
//! never sees another's deployment.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use overture_api::recorded::Recorded;
use overture_api::{Api, RunDeployments, RunError};
use overture_domain::projection::{project, DeploymentView, TenantView};
use overture_domain::secret::{SecretString, SecretValues};
use overture_domain::DeploymentError;
use overture_events::{CloudAccount, DeploymentId, Envelope, Timestamp};
use overture_kit::memory::MemoryLog;
use overture_kit::payload::MemoryPayloads;
use overture_kit::query::{AttemptLog, DeploymentFilter, QueryDeployments, QueryError};
use overture_kit::ReadStream;
use overture_submit::again::Redrive;
use overture_submit::{CheckToken, SealError, SealSecrets, Submission, TokenError};
use serde_json::{json, Value};
use tower::ServiceExt;

const HELLO: &str =
    "name: hello\nsteps:\n  greet:\n    run: script\n    with: { command: 'echo hello' }\n";

/// Two tenants, each with its own token: projects `acme` and `globex`, by id.
const ACME: &str = "token-of-acme";
const GLOBEX: &str = "token-of-globex";

/// The identity service: knows the two tokens, refuses every other.
struct Identity;

#[async_trait]
impl CheckToken for Identity {
    async fn account(&self, token: &SecretString) -> Result<CloudAccount, TokenError> {
        use secrecy::ExposeSecret;
        let project = match token.expose_secret() {
            ACME => "acme",
            GLOBEX => "globex",
            _ => return Err(TokenError::Refused),
        };
        Ok(CloudAccount {
            auth_url: "http://keystone.test/identity/v3".into(),
            project_id: format!("{project}-id"),
            project: project.into(),
            domain: "Default".into(),
            user: format!("{project}-user"),
            endpoints: vec![],
        })
    }
}

/// A seal that seals nothing: the blueprint here has no secrets.
#[derive(Clone)]
struct NoSeal;

#[async_trait]
impl SealSecrets for NoSeal {
    async fn seal(
        &self,
        deployment: DeploymentId,
        _: &str,
        _: &SecretValues,
        _: Option<&SecretString>,
    ) -> Result<String, SealError> {
        Ok(format!("memory:{deployment}"))
    }
}

/// The deployments started so far, shared by the engine (which adds) and the queries (which
/// list them).
type Started = Arc<Mutex<Vec<DeploymentId>>>;

/// The engine of the serverless form (recording is all it does), noting what it started.
struct Engine {
    recorded: Recorded<MemoryLog, NoSeal, MemoryPayloads>,
    started: Started,
}

#[async_trait]
impl RunDeployments for Engine {
    async fn start(&self, submission: Submission) -> Result<DeploymentId, RunError> {
        let id = self.recorded.start(submission).await?;
        self.started.lock().expect("lock").push(id);
        Ok(id)
    }

    async fn redrive(&self, request: Redrive) -> Result<(), RunError> {
        self.recorded.redrive(request).await
    }

    async fn cancel(
        &self,
        id: DeploymentId,
        requested_by: &str,
        reason: &str,
    ) -> Result<Result<(), DeploymentError>, RunError> {
        self.recorded.cancel(id, requested_by, reason).await
    }

    async fn changed(&self) {}

    async fn caller_seen(&self, _: &overture_api::auth::Caller) {}
}

/// What the read models would say: every view folded from the log, as the projector folds it.
struct Queries {
    log: MemoryLog,
    started: Started,
}

impl Queries {
    async fn records(&self, id: DeploymentId) -> Vec<Envelope> {
        self.log.read_stream(id, 0).await.expect("the log reads")
    }
}

#[async_trait]
impl QueryDeployments for Queries {
    async fn deployment(&self, id: DeploymentId) -> Result<Option<DeploymentView>, QueryError> {
        let records = self.records(id).await;
        Ok(project(None, &records).expect("the log folds").view)
    }

    async fn list(&self, filter: &DeploymentFilter) -> Result<Vec<DeploymentView>, QueryError> {
        let ids = self.started.lock().expect("lock").clone();
        let mut views = Vec::new();
        for id in ids.into_iter().rev() {
            if let Some(view) = self.deployment(id).await? {
                views.extend(filter.admits(&view).then_some(view));
            }
        }
        Ok(views)
    }

    async fn tenants(&self) -> Result<Vec<TenantView>, QueryError> {
        Ok(Vec::new())
    }

    async fn events(&self, id: DeploymentId) -> Result<Vec<Envelope>, QueryError> {
        Ok(self.records(id).await)
    }

    async fn attempt_log(
        &self,
        _: DeploymentId,
        _: &str,
        _: AttemptLog,
    ) -> Result<Option<Vec<u8>>, QueryError> {
        Ok(None)
    }
}

/// The application over the fakes, with no trigger file.
fn app() -> Router {
    let log = MemoryLog::new(Timestamp::UNIX_EPOCH);
    let started = Started::default();
    let recorded = Recorded::new(
        log.clone(),
        NoSeal,
        MemoryPayloads::default(),
        Duration::ZERO,
    );
    overture_api::router(Api {
        queries: Arc::new(Queries {
            log,
            started: started.clone(),
        }),
        identity: Arc::new(Identity),
        deployments: Arc::new(Engine { recorded, started }),
        triggers: None,
    })
}

/// What the application answered: the status, the `Location` header and the body as JSON
/// (`Null` when it is not JSON).
struct Answer {
    status: StatusCode,
    location: Option<String>,
    body: Value,
}

async fn send(
    app: &Router,
    method: Method,
    uri: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> Answer {
    let mut request = Request::builder().method(method).uri(uri);
    if let Some(token) = token {
        request = request.header("X-Auth-Token", token);
    }
    let request = match body {
        Some(body) => request
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body.to_string())),
        None => request.body(Body::empty()),
    }
    .expect("a request");
    let response = app.clone().oneshot(request).await.expect("an answer");
    let status = response.status();
    let location = response
        .headers()
        .get(header::LOCATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("a body")
        .to_bytes();
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    Answer {
        status,
        location,
        body,
    }
}

async fn get(app: &Router, uri: &str, token: &str) -> Answer {
    send(app, Method::GET, uri, Some(token), None).await
}

/// Starts the hello blueprint as the tenant of `token`; its id.
async fn start(app: &Router, token: &str) -> String {
    let answer = send(
        app,
        Method::POST,
        "/v1/deployments",
        Some(token),
        Some(json!({ "blueprint": HELLO })),
    )
    .await;
    assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.body);
    answer.body["id"].as_str().expect("an id").to_owned()
}

#[tokio::test]
async fn the_open_routes_answer_without_a_token() {
    let app = app();
    let health = send(&app, Method::GET, "/healthz", None, None).await;
    assert_eq!(health.status, StatusCode::OK);
    assert_eq!(health.body, json!({"status": "ok"}));

    let document = send(&app, Method::GET, "/openapi.json", None, None).await;
    assert_eq!(document.status, StatusCode::OK);
    let paths = document.body["paths"].as_object().expect("paths");
    for path in [
        "/v1/deployments",
        "/v1/deployments/{id}",
        "/v1/tenant",
        "/healthz",
    ] {
        assert!(paths.contains_key(path), "{path} in {:?}", paths.keys());
    }

    let nowhere = send(&app, Method::GET, "/v2/nowhere", None, None).await;
    assert_eq!(nowhere.status, StatusCode::NOT_FOUND);
    assert_eq!(nowhere.body["code"], "not_found");
}

#[tokio::test]
async fn a_tenant_route_without_a_token_the_cloud_accepts_is_refused_401() {
    let app = app();
    let missing = send(&app, Method::GET, "/v1/deployments", None, None).await;
    assert_eq!(missing.status, StatusCode::UNAUTHORIZED);
    assert_eq!(missing.body["code"], "unauthorized");
    let message = missing.body["message"].as_str().expect("a message");
    assert!(message.contains("X-Auth-Token"), "{message}");

    let refused = get(&app, "/v1/deployments", "a-token-nobody-issued").await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
    let message = refused.body["message"].as_str().expect("a message");
    assert!(message.contains("refused the token"), "{message}");

    let blank = get(&app, "/v1/tenant", " ").await;
    assert_eq!(blank.status, StatusCode::UNAUTHORIZED);

    let write = send(
        &app,
        Method::POST,
        "/v1/deployments",
        None,
        Some(json!({ "blueprint": HELLO })),
    )
    .await;
    assert_eq!(
        write.status,
        StatusCode::UNAUTHORIZED,
        "nothing is recorded"
    );
    let listed = get(&app, "/v1/deployments", ACME).await;
    assert_eq!(listed.body, json!([]));
}

#[tokio::test]
async fn a_started_deployment_answers_201_with_its_location_and_status_object() {
    let app = app();
    let answer = send(
        &app,
        Method::POST,
        "/v1/deployments",
        Some(ACME),
        Some(json!({ "blueprint": HELLO })),
    )
    .await;
    assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.body);
    let id = answer.body["id"].as_str().expect("an id");
    assert_eq!(
        answer.location.as_deref(),
        Some(&*format!("/v1/deployments/{id}"))
    );
    assert_eq!(answer.body["blueprint"], "hello");
    assert_eq!(
        answer.body["tenant"], "acme-id",
        "the tenant is the token's project id"
    );
    assert_eq!(answer.body["status"], "running");
    assert!(answer.body["steps"]["greet"].is_object(), "{}", answer.body);

    let read = get(&app, &format!("/v1/deployments/{id}"), ACME).await;
    assert_eq!(read.status, StatusCode::OK);
    assert_eq!(read.body["id"], id);

    let listed = get(&app, "/v1/deployments", ACME).await;
    assert_eq!(listed.status, StatusCode::OK);
    let rows = listed.body.as_array().expect("a list");
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["id"], id);
    assert!(
        rows[0].get("steps").is_none(),
        "a list leaves the steps out"
    );

    let events = get(&app, &format!("/v1/deployments/{id}/events"), ACME).await;
    assert_eq!(events.status, StatusCode::OK);
    assert_eq!(events.body[0]["type"], "DeploymentRequested");
}

#[tokio::test]
async fn a_request_the_api_cannot_take_is_refused_and_nothing_is_recorded() {
    let app = app();
    let invalid = send(
        &app,
        Method::POST,
        "/v1/deployments",
        Some(ACME),
        Some(json!({ "blueprint": "name: broken\nsteps: {}\n" })),
    )
    .await;
    assert_eq!(invalid.status, StatusCode::BAD_REQUEST);
    assert_eq!(invalid.body["code"], "invalid");
    assert!(
        invalid.body["problems"]
            .as_array()
            .is_some_and(|p| !p.is_empty()),
        "{}",
        invalid.body
    );

    let unknown_field = send(
        &app,
        Method::POST,
        "/v1/deployments",
        Some(ACME),
        Some(json!({ "blueprint": HELLO, "tenant": "someone-else" })),
    )
    .await;
    assert_eq!(
        unknown_field.status,
        StatusCode::BAD_REQUEST,
        "nothing the client says picks the tenant"
    );

    let request = Request::post("/v1/deployments")
        .header("X-Auth-Token", ACME)
        .header(header::CONTENT_TYPE, "text/plain")
        .body(Body::from(HELLO))
        .expect("a request");
    let not_json = app.clone().oneshot(request).await.expect("an answer");
    assert_eq!(not_json.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);

    let status = get(&app, "/v1/deployments?status=sleeping", ACME).await;
    assert_eq!(status.status, StatusCode::BAD_REQUEST);
    assert!(status.body["message"]
        .as_str()
        .is_some_and(|m| m.contains("expected running")));

    assert_eq!(get(&app, "/v1/deployments", ACME).await.body, json!([]));
}

#[tokio::test]
async fn one_tenant_never_sees_or_acts_on_another_tenants_deployment() {
    let app = app();
    let id = start(&app, ACME).await;
    let theirs = format!("/v1/deployments/{id}");

    for uri in [
        theirs.clone(),
        format!("{theirs}/events"),
        format!("{theirs}/logs/greet"),
    ] {
        let answer = get(&app, &uri, GLOBEX).await;
        assert_eq!(
            answer.status,
            StatusCode::NOT_FOUND,
            "{uri}: {}",
            answer.body
        );
        assert_eq!(
            answer.body["message"],
            format!("no deployment {id}"),
            "{uri}: as if it did not exist"
        );
    }
    for uri in [format!("{theirs}/cancel"), format!("{theirs}/redrive")] {
        let answer = send(&app, Method::POST, &uri, Some(GLOBEX), None).await;
        assert_eq!(
            answer.status,
            StatusCode::NOT_FOUND,
            "{uri}: {}",
            answer.body
        );
    }
    assert_eq!(get(&app, "/v1/deployments", GLOBEX).await.body, json!([]));
    assert_eq!(get(&app, "/v1/grants", GLOBEX).await.body, json!([]));
    let tenant = get(&app, "/v1/tenant", GLOBEX).await;
    assert_eq!(tenant.status, StatusCode::OK);
    assert_eq!(tenant.body["tenant"], "globex-id");

    let own = get(&app, &theirs, ACME).await;
    assert_eq!(own.status, StatusCode::OK);
    assert_eq!(
        own.body["status"], "running",
        "the other tenant's cancel recorded nothing"
    );
}

#[tokio::test]
async fn cancel_answers_202_and_a_step_without_an_attempt_has_no_output() {
    let app = app();
    let id = start(&app, ACME).await;

    let log = get(&app, &format!("/v1/deployments/{id}/logs/greet"), ACME).await;
    assert_eq!(log.status, StatusCode::NOT_FOUND);
    assert!(
        log.body["message"]
            .as_str()
            .is_some_and(|m| m.contains("no attempt has run")),
        "{}",
        log.body
    );
    let no_step = get(&app, &format!("/v1/deployments/{id}/logs/nope"), ACME).await;
    assert_eq!(no_step.status, StatusCode::NOT_FOUND);
    assert_eq!(
        no_step.body["message"],
        format!("deployment {id} has no step `nope`")
    );

    let cancelled = send(
        &app,
        Method::POST,
        &format!("/v1/deployments/{id}/cancel"),
        Some(ACME),
        None,
    )
    .await;
    assert_eq!(cancelled.status, StatusCode::ACCEPTED, "{}", cancelled.body);
    assert_eq!(cancelled.body["id"], id);
    let events = get(&app, &format!("/v1/deployments/{id}/events"), ACME).await;
    let types: Vec<&str> = events
        .body
        .as_array()
        .expect("events")
        .iter()
        .filter_map(|e| e["type"].as_str())
        .collect();
    assert!(types.contains(&"CancellationRequested"), "{types:?}");

    let redrive = send(
        &app,
        Method::POST,
        &format!("/v1/deployments/{id}/redrive"),
        Some(ACME),
        None,
    )
    .await;
    assert_eq!(redrive.status, StatusCode::CONFLICT, "{}", redrive.body);
    assert_eq!(redrive.body["code"], "conflict");
}

#[tokio::test]
async fn a_method_a_route_does_not_take_answers_405_in_json() {
    let app = app();
    let answer = send(&app, Method::DELETE, "/v1/deployments", Some(ACME), None).await;
    assert_eq!(answer.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(answer.body["code"], "method_not_allowed");
}

#[tokio::test]
async fn a_deployment_is_found_by_its_name_by_its_own_tenant_only() {
    let app = app();
    let started = send(
        &app,
        Method::POST,
        "/v1/deployments",
        Some(ACME),
        Some(json!({ "blueprint": HELLO, "name": "prod-web" })),
    )
    .await;
    assert_eq!(started.status, StatusCode::CREATED, "{}", started.body);
    assert_eq!(started.body["name"], "prod-web");
    let id = started.body["id"].as_str().expect("an id").to_owned();

    let own = get(&app, "/v1/deployments/prod-web", ACME).await;
    assert_eq!(own.status, StatusCode::OK, "{}", own.body);
    assert_eq!(own.body["id"], id);
    let events = get(&app, "/v1/deployments/prod-web/events", ACME).await;
    assert_eq!(events.status, StatusCode::OK, "{}", events.body);
    let listed = get(&app, "/v1/deployments", ACME).await;
    assert_eq!(listed.body[0]["name"], "prod-web", "{}", listed.body);

    // Another tenant's name is as unknown as another tenant's id.
    for uri in [
        "/v1/deployments/prod-web",
        "/v1/deployments/prod-web/events",
    ] {
        let answer = get(&app, uri, GLOBEX).await;
        assert_eq!(
            answer.status,
            StatusCode::NOT_FOUND,
            "{uri}: {}",
            answer.body
        );
        assert_eq!(answer.body["message"], "no deployment prod-web");
    }
    let theirs = send(
        &app,
        Method::POST,
        "/v1/deployments/prod-web/cancel",
        Some(GLOBEX),
        None,
    )
    .await;
    assert_eq!(theirs.status, StatusCode::NOT_FOUND, "{}", theirs.body);

    let cancelled = send(
        &app,
        Method::POST,
        "/v1/deployments/prod-web/cancel",
        Some(ACME),
        None,
    )
    .await;
    assert_eq!(cancelled.status, StatusCode::ACCEPTED, "{}", cancelled.body);
    assert_eq!(cancelled.body["id"], id);

    // A name against the rule is refused, naming the field; nothing is recorded.
    let bad = send(
        &app,
        Method::POST,
        "/v1/deployments",
        Some(ACME),
        Some(json!({ "blueprint": HELLO, "name": "Prod Web" })),
    )
    .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST, "{}", bad.body);
    assert_eq!(bad.body["problems"][0]["field"], "name", "{}", bad.body);
    assert_eq!(
        get(&app, "/v1/deployments", ACME)
            .await
            .body
            .as_array()
            .map(Vec::len),
        Some(1)
    );
}
