//! `POST /v1/events` in the CloudEvents HTTP binding's three modes, driven through the axum
//! router on a fake trigger file that notes each event it is handed (in the JSON format) and
//! answers as the embedded one does. What a sender sees: which requests are events, the event
//! the triggers are given, each batch event answered on its own, and every refusal's status and
//! words.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use overture_api::events::{Decided, Delivered, Verdict};
use overture_api::{Api, DeliverError, DeliverEvents, RunDeployments, RunError};
use overture_domain::projection::{DeploymentView, TenantView};
use overture_domain::secret::SecretString;
use overture_domain::DeploymentError;
use overture_events::{CloudAccount, DeploymentId, Envelope};
use overture_kit::query::{AttemptLog, DeploymentFilter, QueryDeployments, QueryError};
use overture_submit::again::Redrive;
use overture_submit::{CheckToken, Submission, TokenError};
use serde_json::{json, Value};
use tower::ServiceExt;

const TOKEN: &str = "token-of-acme";

/// The identity service: knows one token, of project `acme`.
struct Identity;

#[async_trait]
impl CheckToken for Identity {
    async fn account(&self, token: &SecretString) -> Result<CloudAccount, TokenError> {
        use secrecy::ExposeSecret;
        if token.expose_secret() != TOKEN {
            return Err(TokenError::Refused);
        }
        Ok(CloudAccount {
            auth_url: "http://keystone.test/identity/v3".into(),
            project_id: "acme-id".into(),
            project: "acme".into(),
            domain: "Default".into(),
            user: "acme-user".into(),
            endpoints: vec![],
        })
    }
}

/// The trigger file: notes each event and the tenant; an event whose id is `unavailable`
/// fails for now, one without a source is not an event, every other deploys once per id.
#[derive(Default)]
struct Triggers {
    given: Mutex<Vec<(Value, String)>>,
}

#[async_trait]
impl DeliverEvents for Triggers {
    async fn deliver(&self, event: &str, tenant: &str) -> Result<Delivered, DeliverError> {
        let event: Value = serde_json::from_str(event).expect("the route hands over JSON");
        let mut given = self.given.lock().expect("lock");
        let text = |name: &str| event[name].as_str().unwrap_or_default().to_owned();
        if text("id") == "unavailable" {
            return Err(DeliverError::Unavailable("the ledger is away".into()));
        }
        if text("source").is_empty() {
            return Err(DeliverError::NotAnEvent(
                "the event: `source` is missing".into(),
            ));
        }
        let seen = given.iter().any(|(e, _)| e["id"] == event["id"]);
        given.push((event.clone(), tenant.to_owned()));
        Ok(Delivered {
            source: text("source"),
            id: text("id"),
            deployments: if seen {
                vec![]
            } else {
                vec![format!("d-{}", text("id"))]
            },
            decisions: vec![Decided {
                at: "2024-05-01T10:00:00.000Z".into(),
                source: text("source"),
                event_id: text("id"),
                trigger: "deploy-on-release".into(),
                decision: if seen {
                    Verdict::Duplicate
                } else {
                    Verdict::Deployed
                },
                deployment: (!seen).then(|| format!("d-{}", text("id"))),
                reason: "a fake".into(),
            }],
            queued: None,
        })
    }
}

/// Nothing else is asked of the engine or the read models here.
struct Nothing;

#[async_trait]
impl RunDeployments for Nothing {
    async fn start(&self, _: Submission) -> Result<DeploymentId, RunError> {
        Err(RunError::Engine("not in these tests".into()))
    }
    async fn redrive(&self, _: Redrive) -> Result<(), RunError> {
        Err(RunError::Engine("not in these tests".into()))
    }
    async fn cancel(
        &self,
        _: DeploymentId,
        _: &str,
        _: &str,
    ) -> Result<Result<(), DeploymentError>, RunError> {
        Err(RunError::Engine("not in these tests".into()))
    }
    async fn changed(&self) {}
    async fn caller_seen(&self, _: &overture_api::auth::Caller) {}
}

#[async_trait]
impl QueryDeployments for Nothing {
    async fn deployment(&self, _: DeploymentId) -> Result<Option<DeploymentView>, QueryError> {
        Ok(None)
    }
    async fn list(&self, _: &DeploymentFilter) -> Result<Vec<DeploymentView>, QueryError> {
        Ok(vec![])
    }
    async fn tenants(&self) -> Result<Vec<TenantView>, QueryError> {
        Ok(vec![])
    }
    async fn events(&self, _: DeploymentId) -> Result<Vec<Envelope>, QueryError> {
        Ok(vec![])
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

fn app(triggers: Option<Arc<Triggers>>) -> Router {
    overture_api::router(Api {
        queries: Arc::new(Nothing),
        identity: Arc::new(Identity),
        deployments: Arc::new(Nothing),
        triggers: triggers.map(|t| t as Arc<dyn DeliverEvents>),
    })
}

/// Posts `body` with `headers` (and the token); the status and the answer as JSON.
async fn post(app: &Router, headers: &[(&str, &str)], body: &[u8]) -> (StatusCode, Value) {
    let mut request = Request::post("/v1/events").header("X-Auth-Token", TOKEN);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request.body(Body::from(body.to_vec())).expect("a request");
    let response = app.clone().oneshot(request).await.expect("an answer");
    let status = response.status();
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("a body")
        .to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

const BINARY: [(&str, &str); 5] = [
    ("ce-specversion", "1.0"),
    ("ce-id", "release%202.0%20%E2%82%AC"),
    ("ce-source", "artifacts"),
    ("ce-type", "release.published"),
    ("ce-subject", "stable"),
];

#[tokio::test]
async fn a_binary_event_reaches_the_triggers_as_the_json_format_writes_it() {
    let triggers = Arc::new(Triggers::default());
    let app = app(Some(triggers.clone()));
    let mut headers = BINARY.to_vec();
    headers.push(("content-type", "application/json"));

    let (status, answer) = post(&app, &headers, br#"{"channel": "stable"}"#).await;

    assert_eq!(status, StatusCode::ACCEPTED, "{answer}");
    assert_eq!(answer["id"], "release 2.0 €");
    assert_eq!(answer["deployments"], json!(["d-release 2.0 €"]));
    assert_eq!(answer["decisions"][0]["decision"], "deployed");
    let given = triggers.given.lock().expect("lock").clone();
    assert_eq!(
        given,
        vec![(
            json!({"specversion": "1.0", "id": "release 2.0 €", "source": "artifacts",
                   "type": "release.published", "subject": "stable",
                   "datacontenttype": "application/json", "data": {"channel": "stable"}}),
            "acme-id".to_owned()
        )]
    );
}

#[tokio::test]
async fn the_same_event_in_binary_then_structured_mode_is_one_event() {
    let triggers = Arc::new(Triggers::default());
    let app = app(Some(triggers.clone()));
    let (first, _) = post(&app, &BINARY, b"").await;
    let structured = json!({"specversion": "1.0", "id": "release 2.0 €", "source": "artifacts",
                            "type": "release.published"});

    let (status, again) = post(
        &app,
        &[(
            "content-type",
            "application/cloudevents+json; charset=utf-8",
        )],
        structured.to_string().as_bytes(),
    )
    .await;

    assert_eq!(first, StatusCode::ACCEPTED);
    assert_eq!(status, StatusCode::ACCEPTED);
    assert_eq!(again["decisions"][0]["decision"], "duplicate");
    assert_eq!(again["deployments"], json!([]));
}

#[tokio::test]
async fn structured_and_plain_json_events_are_handed_over_as_sent() {
    let triggers = Arc::new(Triggers::default());
    let app = app(Some(triggers.clone()));
    let event = json!({"specversion": "1.0", "id": "s-1", "source": "artifacts",
                       "type": "release.published", "data": {"version": "2.0"}});
    let bridge = json!({"id": "b-1", "source": "aws.s3", "detail-type": "Object Created",
                        "detail": {"bucket": "x"}});

    let (structured, _) = post(
        &app,
        &[("content-type", "application/cloudevents+json")],
        event.to_string().as_bytes(),
    )
    .await;
    let (plain, _) = post(
        &app,
        &[("content-type", "application/json")],
        bridge.to_string().as_bytes(),
    )
    .await;

    assert_eq!(
        (structured, plain),
        (StatusCode::ACCEPTED, StatusCode::ACCEPTED)
    );
    let given: Vec<Value> = triggers
        .given
        .lock()
        .expect("lock")
        .iter()
        .map(|(e, _)| e.clone())
        .collect();
    assert_eq!(given, vec![event, bridge]);
}

#[tokio::test]
async fn a_batch_answers_each_event_on_its_own_in_order() {
    let triggers = Arc::new(Triggers::default());
    let app = app(Some(triggers.clone()));
    let event = |id: &str| json!({"specversion": "1.0", "id": id, "source": "artifacts", "type": "release.published"});
    let batch = json!([
        event("b-1"),
        {"specversion": "1.0", "id": "no-source", "type": "release.published"},
        {"id": "b-2", "source": "artifacts", "detail-type": "x"},
        event("unavailable"),
        event("b-1"),
        event("b-3"),
    ]);

    let (status, answer) = post(
        &app,
        &[("content-type", "application/cloudevents-batch+json")],
        batch.to_string().as_bytes(),
    )
    .await;

    assert_eq!(status, StatusCode::OK, "{answer}");
    let results = answer["results"].as_array().expect("results");
    let summary: Vec<(u64, &str, &str)> = results
        .iter()
        .map(|r| {
            (
                r["status"].as_u64().unwrap_or_default(),
                r["id"].as_str().unwrap_or_default(),
                r["delivered"]["decisions"][0]["decision"]
                    .as_str()
                    .or_else(|| r["error"]["code"].as_str())
                    .unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            (202, "b-1", "deployed"),
            (400, "no-source", "bad_request"),
            (400, "b-2", "bad_request"),
            (503, "unavailable", "unavailable"),
            (202, "b-1", "duplicate"),
            (202, "b-3", "deployed"),
        ]
    );
    assert!(results[1]["error"]["message"]
        .as_str()
        .is_some_and(|m| m.contains("`source`")));
    assert!(results[2]["error"]["message"]
        .as_str()
        .is_some_and(|m| m.contains("`specversion`")));

    let (empty, answer) = post(
        &app,
        &[("content-type", "application/cloudevents-batch+json")],
        b"[]",
    )
    .await;
    assert_eq!((empty, answer), (StatusCode::OK, json!({"results": []})));
}

#[tokio::test]
async fn every_refusal_says_what_to_send_instead() {
    let app = app(Some(Arc::new(Triggers::default())));
    let message = |answer: &Value| answer["message"].as_str().unwrap_or_default().to_owned();

    let (status, answer) = post(&app, &[("content-type", "text/plain")], b"hello").await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert_eq!(answer["code"], "unsupported");
    assert!(message(&answer).contains("ce-specversion"), "{answer}");

    let (status, answer) = post(
        &app,
        &[("content-type", "application/cloudevents+avro")],
        b"x",
    )
    .await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert!(
        message(&answer).contains("application/cloudevents+json"),
        "{answer}"
    );

    let without_source: Vec<_> = BINARY
        .iter()
        .copied()
        .filter(|(n, _)| *n != "ce-source")
        .collect();
    let (status, answer) = post(&app, &without_source, b"").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(message(&answer).contains("`ce-source`"), "{answer}");

    let mut bad = BINARY.to_vec();
    bad.push(("ce-subject", "100%"));
    let (status, answer) = post(&app, &bad, b"").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(message(&answer).contains("`ce-subject`"), "{answer}");

    let (status, answer) = post(&app, &BINARY, b"{\"not\": json").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(message(&answer).contains("Content-Type"), "{answer}");

    let (status, answer) = post(
        &app,
        &[("content-type", "application/cloudevents-batch+json")],
        br#"{"specversion": "1.0"}"#,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(message(&answer).contains("JSON array"), "{answer}");

    let many = format!("[{}]", vec!["{}"; 101].join(","));
    let (status, answer) = post(
        &app,
        &[("content-type", "application/cloudevents-batch+json")],
        many.as_bytes(),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(message(&answer).contains("at most 100"), "{answer}");

    let mut text = BINARY.to_vec();
    text.push(("content-type", "text/plain"));
    let (status, _) = post(&app, &text, b"plain words are data too").await;
    assert_eq!(
        status,
        StatusCode::ACCEPTED,
        "text data is accepted as a string"
    );
}

#[tokio::test]
async fn without_a_trigger_file_every_mode_is_404() {
    let app = app(None);
    let (status, answer) = post(&app, &BINARY, b"").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(answer["message"]
        .as_str()
        .is_some_and(|m| m.contains("--triggers")));
}

#[test]
fn the_document_names_each_mode_and_types_each_answer() {
    let operation = &overture_api::document()["paths"]["/v1/events"]["post"];
    let body = &operation["requestBody"];
    for media in [
        "application/cloudevents+json",
        "application/cloudevents-batch+json",
        "application/json",
    ] {
        assert!(body["content"][media].is_object(), "{media}: {body}");
    }
    let headers: Vec<&str> = operation["parameters"]
        .as_array()
        .expect("parameters")
        .iter()
        .filter(|p| p["in"] == "header")
        .filter_map(|p| p["name"].as_str())
        .collect();
    for header in ["ce-specversion", "ce-id", "ce-source", "ce-type"] {
        assert!(headers.contains(&header), "{header} in {headers:?}");
    }
    let schema = |status: &str| {
        operation["responses"][status]["content"]["application/json"]["schema"]["$ref"].clone()
    };
    assert_eq!(schema("200"), "#/components/schemas/BatchAnswer");
    assert_eq!(schema("202"), "#/components/schemas/Delivered");
    assert_eq!(schema("415"), "#/components/schemas/ErrorBody");
}
