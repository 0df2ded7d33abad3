//! The submit function over HTTP, called with request values on in-memory ports: what each
//! kind of request is answered, whose account a token acts for, that only a request AWS verified
//! the signer of is read, that no request chooses its tenant or requester, and that no secret's
//! value or token ever comes back.

mod support;

use std::collections::BTreeMap;
use std::sync::Mutex;

use async_trait::async_trait;
use lambda_http::http::StatusCode;
use lambda_http::request::RequestContext;
use lambda_http::{Body, Request, RequestExt, Response};
use overture_domain::secret::{SecretString, SecretValues};
use overture_events::{CloudAccount, DeploymentEvent, DeploymentId, Timestamp};
use overture_kit::memory::{FixedClock, MemoryLog};
use overture_kit::payload::{MemoryPayloads, PayloadError, StorePayloads};
use overture_kit::DeploymentLog;
use overture_submit::http::{on_request, HttpPorts};
use overture_submit::{CheckToken, SealError, SealSecrets, SubmitPorts, TokenError};
use secrecy::ExposeSecret;
use serde_json::{json, Value};
use support::DownLog;

const SECRET: &str = "s3cr3t-value-never-shown";
const TOKEN: &str = "gAAAA-token-never-shown";

const HELLO: &str = "name: hello\nsecrets: [api_token]\nsteps:\n  greet:\n    run: script\n    with: { command: 'echo hello {{ secrets.api_token }}' }\n";
const BROKEN: &str = "name: hello\nsteps:\n  greet:\n    run: script\n    needs: [missing]\n    with: { command: 'echo hello' }\n";
const IN_A_CLOUD: &str = "name: web\nsteps:\n  servers:\n    run: servers\n    with:\n      security_groups: { web: [] }\n      servers: { web-1: { security_groups: [web] } }\n";
/// A secret and a step that takes files: every port is asked.
const WITH_FILES: &str = "name: hello\nsecrets: [api_token]\nsteps:\n  infra: { run: terraform, with: { dir: infra } }\n  greet:\n    run: script\n    with: { command: 'echo hello {{ secrets.api_token }}' }\n";

/// How the fake seal behaves.
#[derive(Clone, Copy)]
enum Sealing {
    Works,
    Unavailable,
    Refused,
}

/// A seal that keeps what it was given in memory, or fails as told; its errors never quote the
/// values (as the real ones do not).
struct FakeSeal {
    sealing: Sealing,
    sealed: Mutex<Vec<(String, Option<String>)>>,
}

impl FakeSeal {
    fn new(sealing: Sealing) -> Self {
        Self {
            sealing,
            sealed: Mutex::default(),
        }
    }
}

#[async_trait]
impl SealSecrets for FakeSeal {
    async fn seal(
        &self,
        _: DeploymentId,
        tenant: &str,
        secrets: &SecretValues,
        token: Option<&SecretString>,
    ) -> Result<String, SealError> {
        match self.sealing {
            Sealing::Works => {
                assert!(secrets.contains_key("api_token") || token.is_some());
                self.sealed.lock().expect("lock").push((
                    tenant.to_owned(),
                    token.map(|t| t.expose_secret().to_owned()),
                ));
                Ok("seal-1".into())
            }
            Sealing::Unavailable => Err(SealError::Unavailable("KMS throttled the call".into())),
            Sealing::Refused => Err(SealError::Failed("KMS: no such key".into())),
        }
    }
}

/// A payload store that cannot be reached.
struct DownPayloads;

#[async_trait]
impl StorePayloads for DownPayloads {
    async fn put(&self, _: &[u8]) -> Result<String, PayloadError> {
        Err(PayloadError::Unavailable(
            "the bucket is unreachable".into(),
        ))
    }

    async fn get(&self, _: &str) -> Result<Vec<u8>, PayloadError> {
        Err(PayloadError::Unavailable(
            "the bucket is unreachable".into(),
        ))
    }
}

/// An identity service that knows one token, or is down.
struct FakeIdentity {
    up: bool,
}

#[async_trait]
impl CheckToken for FakeIdentity {
    async fn account(&self, token: &SecretString) -> Result<CloudAccount, TokenError> {
        if !self.up {
            return Err(TokenError::Unavailable(
                "keystone: connection refused".into(),
            ));
        }
        if token.expose_secret() != TOKEN {
            return Err(TokenError::Refused);
        }
        Ok(CloudAccount {
            auth_url: "http://127.0.0.1:5000/v3".into(),
            project_id: "p-1".into(),
            project: "acme".into(),
            domain: "Default".into(),
            user: "grace".into(),
            endpoints: vec![],
        })
    }
}

/// The account and the ARN of the signer AWS verified, as the function URL's `AWS_IAM` auth
/// hands them to the function.
const ACCOUNT: &str = "123456789012";
const SIGNER: &str = "arn:aws:iam::123456789012:user/ada";

/// The request context of a function URL with `AWS_IAM` auth, as Lambda sends it (its JSON).
fn signed_context() -> RequestContext {
    serde_json::from_value(json!({
        "accountId": "anonymous",
        "apiId": "abcdefgh",
        "domainName": "abcdefgh.lambda-url.eu-west-1.on.aws",
        "domainPrefix": "abcdefgh",
        "http": { "method": "POST", "path": "/deployments", "protocol": "HTTP/1.1",
                  "sourceIp": "192.0.2.1", "userAgent": "overture" },
        "requestId": "r-1",
        "routeKey": "$default",
        "stage": "$default",
        "time": "01/Jan/2030:00:00:00 +0000",
        "timeEpoch": 1_893_456_000_000_u64,
        "authorizer": { "iam": {
            "accessKey": "AKIAEXAMPLE", "accountId": ACCOUNT, "callerId": "AIDAEXAMPLE",
            "cognitoIdentity": null, "principalOrgId": null,
            "userArn": SIGNER, "userId": "AIDAEXAMPLE"
        } }
    }))
    .expect("a function URL's request context")
}

/// A POST of `body` without a verified signer: what `cargo lambda watch` hands the function, or
/// a function URL whose auth type is NONE.
fn unsigned(body: &Value) -> Request {
    lambda_http::http::Request::builder()
        .method("POST")
        .uri("/deployments")
        .body(Body::from(body.to_string()))
        .expect("a request")
}

/// A POST of `body` signed by [`SIGNER`], as the function URL hands it on.
fn post(body: &Value) -> Request {
    unsigned(body).with_request_context(signed_context())
}

fn request(blueprint: &str) -> Value {
    json!({
        "source": "examples/hello/blueprint.yaml",
        "blueprint": blueprint,
        "params": {},
        "secrets": { "api_token": SECRET },
        "files": {},
    })
}

/// The answer's status and JSON body, checked to hold neither the secret nor the token.
fn read(response: &Response<Body>) -> (StatusCode, Value) {
    let text = match response.body() {
        Body::Text(text) => text.clone(),
        other => panic!("a text body: {other:?}"),
    };
    assert!(
        !text.contains(SECRET) && !text.contains(TOKEN),
        "a secret in the answer: {text}"
    );
    (
        response.status(),
        serde_json::from_str(&text).expect("JSON"),
    )
}

async fn answer_on(
    body: &Value,
    log: &dyn DeploymentLog,
    seal: &FakeSeal,
    payloads: &dyn StorePayloads,
    tokens: Option<&dyn CheckToken>,
) -> (StatusCode, Value) {
    let ports = HttpPorts {
        submit: SubmitPorts {
            log,
            seals: seal,
            payloads,
            clock: &FixedClock(Timestamp::UNIX_EPOCH),
        },
        tokens,
    };
    read(&on_request(post(body), &ports).await)
}

async fn answer(body: &Value) -> (StatusCode, Value, MemoryLog) {
    let log = MemoryLog::new(Timestamp::UNIX_EPOCH);
    let (status, json) = answer_on(
        body,
        &log,
        &FakeSeal::new(Sealing::Works),
        &MemoryPayloads::default(),
        None,
    )
    .await;
    (status, json, log)
}

#[tokio::test]
async fn a_valid_request_is_recorded_and_answered_201_with_the_deployment_id() {
    let (status, body, log) = answer(&request(HELLO)).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let id: DeploymentId = body["deployment"]
        .as_str()
        .expect("the id")
        .parse()
        .expect("a deployment id");
    let events = log.events(id);
    let Some(DeploymentEvent::DeploymentRequested {
        tenant,
        requested_by,
        trigger,
        source,
        ..
    }) = events.first()
    else {
        panic!("DeploymentRequested first: {events:?}");
    };
    assert_eq!(
        (tenant.as_str(), requested_by.as_str(), trigger.as_str()),
        (ACCOUNT, SIGNER, "http")
    );
    assert_eq!(source, "examples/hello/blueprint.yaml");
    let recorded =
        serde_json::to_string(&events.iter().map(|e| e.data()).collect::<Vec<_>>()).expect("json");
    assert!(!recorded.contains(SECRET), "no secret in the events");
}

#[tokio::test]
async fn a_broken_blueprint_is_answered_400_naming_the_field_as_the_command_line_does() {
    let (status, body, _) = answer(&request(BROKEN)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["error"], "invalid");
    let problems = body["problems"].as_array().expect("problems");
    assert!(
        problems
            .iter()
            .any(|p| p["field"] == "steps.greet.needs" && p["problem"].as_str().is_some()),
        "{body}"
    );
    let message = body["message"].as_str().expect("message");
    assert!(
        message.starts_with("examples/hello/blueprint.yaml: steps.greet.needs: "),
        "{message}"
    );
}

#[tokio::test]
async fn a_missing_secret_and_an_undeclared_one_are_named() {
    let mut body = request(HELLO);
    body["secrets"] = json!({ "other": SECRET });
    let (status, body, _) = answer(&body).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let fields: Vec<&str> = body["problems"]
        .as_array()
        .expect("problems")
        .iter()
        .filter_map(|p| p["field"].as_str())
        .collect();
    assert_eq!(fields, ["secrets.api_token", "--secret other"], "{body}");
}

#[tokio::test]
async fn a_malformed_body_is_answered_400_without_quoting_it() {
    for body in [
        json!({ "source": "b.yaml", "blueprint": HELLO, "secrets": SECRET }),
        json!({ "source": "b.yaml", "blueprint": HELLO, "token": { "t": TOKEN } }),
        json!({ "source": "b.yaml", "blueprint": HELLO, "secrets": { "api_token": [SECRET] } }),
        json!({ "source": "b.yaml", "blueprint": HELLO, "extra": SECRET }),
        json!(SECRET),
    ] {
        let (status, answer, _) = answer(&body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
        assert!(
            answer["message"]
                .as_str()
                .is_some_and(|m| m.contains("line 1 column")),
            "{answer}"
        );
    }
    let not_json = lambda_http::http::Request::builder()
        .method("POST")
        .body(Body::from(format!("{{\"secrets\": {SECRET}")))
        .expect("request")
        .with_request_context(signed_context());
    let (status, body, ..) = answer_request_on(not_json, None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
}

#[tokio::test]
async fn only_post_submits() {
    let get = lambda_http::http::Request::builder()
        .method("GET")
        .body(Body::Empty)
        .expect("request")
        .with_request_context(signed_context());
    let (status, ..) = answer_request_on(get, None).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
}

#[tokio::test]
async fn a_failure_that_may_pass_is_503_and_one_that_will_not_is_500() {
    let log = MemoryLog::new(Timestamp::UNIX_EPOCH);
    let memory = MemoryPayloads::default();
    let cases: [(
        &str,
        &dyn DeploymentLog,
        FakeSeal,
        &dyn StorePayloads,
        StatusCode,
    ); 4] = [
        (
            "seal unavailable",
            &log,
            FakeSeal::new(Sealing::Unavailable),
            &memory,
            StatusCode::SERVICE_UNAVAILABLE,
        ),
        (
            "seal refused",
            &log,
            FakeSeal::new(Sealing::Refused),
            &memory,
            StatusCode::INTERNAL_SERVER_ERROR,
        ),
        (
            "log unavailable",
            &DownLog,
            FakeSeal::new(Sealing::Works),
            &memory,
            StatusCode::SERVICE_UNAVAILABLE,
        ),
        (
            "payloads unavailable",
            &log,
            FakeSeal::new(Sealing::Works),
            &DownPayloads,
            StatusCode::SERVICE_UNAVAILABLE,
        ),
    ];
    for (case, log, seal, payloads, expected) in cases {
        let mut body = request(WITH_FILES);
        body["files"] = json!({ "infra/main.tf": "resource \"terraform_data\" \"x\" {}\n" });
        let (status, answer) = answer_on(&body, log, &seal, payloads, None).await;
        assert_eq!(status, expected, "{case}: {answer}");
        assert!(answer["message"].as_str().is_some(), "{case}: {answer}");
    }
}

#[tokio::test]
async fn with_a_token_the_cloud_says_the_tenant_and_the_requester() {
    let log = MemoryLog::new(Timestamp::UNIX_EPOCH);
    let seal = FakeSeal::new(Sealing::Works);
    let identity = FakeIdentity { up: true };
    let mut body = request(IN_A_CLOUD);
    body["secrets"] = json!({});
    body["token"] = json!(TOKEN);
    let (status, answer) = answer_on(
        &body,
        &log,
        &seal,
        &MemoryPayloads::default(),
        Some(&identity),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    let id: DeploymentId = answer["deployment"]
        .as_str()
        .expect("id")
        .parse()
        .expect("id");
    let Some(DeploymentEvent::DeploymentRequested {
        tenant,
        requested_by,
        cloud,
        ..
    }) = log.events(id).first().cloned()
    else {
        panic!("requested");
    };
    // The tenant is the project's id, not its name: names repeat across domains.
    assert_eq!((tenant.as_str(), requested_by.as_str()), ("p-1", "grace"));
    assert_eq!(cloud.expect("the account").project_id, "p-1");
    assert_eq!(
        seal.sealed.lock().expect("lock").as_slice(),
        [("p-1".to_owned(), Some(TOKEN.to_owned()))],
        "the token is sealed for the token's project"
    );
    let recorded = serde_json::to_string(
        &log.events(id)
            .iter()
            .map(DeploymentEvent::data)
            .collect::<Vec<_>>(),
    )
    .expect("json");
    assert!(!recorded.contains(TOKEN), "no token in the events");
}

/// A case, the request, the identity service, the answer's status and the field it names.
type TokenCase<'a> = (
    &'a str,
    &'a Value,
    Option<&'a dyn CheckToken>,
    StatusCode,
    &'a str,
);

#[tokio::test]
async fn a_token_is_refused_unless_the_cloud_vouches_for_it() {
    let mut with_token = request(IN_A_CLOUD);
    with_token["secrets"] = json!({});
    with_token["token"] = json!(TOKEN);
    let mut other_tenant = with_token.clone();
    other_tenant["tenant"] = json!("globex");
    let mut unknown = with_token.clone();
    unknown["token"] = json!(format!("{TOKEN}-expired"));
    let mut no_token = with_token.clone();
    no_token["token"] = Value::Null;

    let up = FakeIdentity { up: true };
    let down = FakeIdentity { up: false };
    let cases: [TokenCase<'_>; 5] = [
        (
            "no identity service",
            &with_token,
            None,
            StatusCode::BAD_REQUEST,
            "token",
        ),
        (
            "another tenant",
            &other_tenant,
            Some(&up),
            StatusCode::BAD_REQUEST,
            "tenant",
        ),
        (
            "an unknown token",
            &unknown,
            Some(&up),
            StatusCode::BAD_REQUEST,
            "token",
        ),
        (
            "no token for a cloud",
            &no_token,
            Some(&up),
            StatusCode::BAD_REQUEST,
            "--token-file",
        ),
        (
            "identity down",
            &with_token,
            Some(&down),
            StatusCode::SERVICE_UNAVAILABLE,
            "",
        ),
    ];
    for (case, body, tokens, expected, field) in cases {
        let log = MemoryLog::new(Timestamp::UNIX_EPOCH);
        let seal = FakeSeal::new(Sealing::Works);
        let (status, answer) =
            answer_on(body, &log, &seal, &MemoryPayloads::default(), tokens).await;
        assert_eq!(status, expected, "{case}: {answer}");
        if !field.is_empty() {
            assert_eq!(answer["problems"][0]["field"], field, "{case}: {answer}");
        }
        assert!(
            seal.sealed.lock().expect("lock").is_empty(),
            "{case}: nothing sealed"
        );
    }
}

#[test]
fn the_request_type_never_needs_printing() {
    // Secret values live in SecretStrings, whose Debug says nothing of them.
    let values: BTreeMap<String, SecretString> =
        [("api_token".to_owned(), SecretString::from(SECRET))].into();
    assert!(!format!("{values:?}").contains(SECRET));
}

/// Answers `request` on a working seal, an empty log and an identity service that is up; the
/// log and the seal, to look at.
async fn answer_request(request: Request) -> (StatusCode, Value, MemoryLog, FakeSeal) {
    answer_request_on(request, Some(&FakeIdentity { up: true })).await
}

/// Answers `request` on a working seal, an empty log and these tokens' checker; the log and
/// the seal, to look at.
async fn answer_request_on(
    request: Request,
    tokens: Option<&dyn CheckToken>,
) -> (StatusCode, Value, MemoryLog, FakeSeal) {
    let log = MemoryLog::new(Timestamp::UNIX_EPOCH);
    let seal = FakeSeal::new(Sealing::Works);
    let payloads = MemoryPayloads::default();
    let ports = HttpPorts {
        submit: SubmitPorts {
            log: &log,
            seals: &seal,
            payloads: &payloads,
            clock: &FixedClock(Timestamp::UNIX_EPOCH),
        },
        tokens,
    };
    let (status, body) = read(&on_request(request, &ports).await);
    (status, body, log, seal)
}

/// Asserts the answer left nothing recorded and nothing sealed.
#[track_caller]
fn assert_nothing_recorded_or_sealed(case: &str, log: &MemoryLog, seal: &FakeSeal) {
    assert_eq!(log.appends(), 0, "{case}: nothing recorded");
    assert!(
        seal.sealed.lock().expect("lock").is_empty(),
        "{case}: nothing sealed"
    );
}

#[tokio::test]
async fn a_request_without_a_verified_signer_is_refused_403_and_nothing_is_recorded() {
    let mut with_token = request(IN_A_CLOUD);
    with_token["secrets"] = json!({});
    with_token["token"] = json!(TOKEN);
    let mut no_arn = signed_context();
    if let RequestContext::ApiGatewayV2(context) = &mut no_arn {
        if let Some(iam) = context
            .authorizer
            .as_mut()
            .and_then(|authorizer| authorizer.iam.as_mut())
        {
            iam.user_arn = Some(String::new());
        }
    }
    let get = lambda_http::http::Request::builder()
        .method("GET")
        .body(Body::Empty)
        .expect("request");
    let cases = [
        ("a valid request", unsigned(&request(HELLO))),
        // A token vouches for a cloud account, not for the caller of this door.
        ("a valid cloud token", unsigned(&with_token)),
        ("a malformed body", unsigned(&json!("nonsense"))),
        ("another method", get),
        (
            "a signer without an ARN",
            unsigned(&request(HELLO)).with_request_context(no_arn),
        ),
    ];
    for (case, request) in cases {
        let (status, body, log, seal) = answer_request(request).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{case}: {body}");
        assert_eq!(body["error"], "forbidden", "{case}: {body}");
        assert!(
            body["message"]
                .as_str()
                .is_some_and(|m| m.contains("AWS_IAM") && m.contains("SigV4")),
            "{case}: the answer says how to be let in: {body}"
        );
        assert_nothing_recorded_or_sealed(case, &log, &seal);
    }
}

#[tokio::test]
async fn a_body_cannot_choose_its_tenant_or_its_requester() {
    let mut with_token = request(IN_A_CLOUD);
    with_token["secrets"] = json!({});
    with_token["token"] = json!(TOKEN);
    let cases = [
        ("a tenant", request(HELLO), "tenant", json!("globex")),
        (
            "a requester",
            request(HELLO),
            "requested_by",
            json!("mallory"),
        ),
        // Even the tenant the signer would get, or another type: naming it is refused.
        ("its own tenant", request(HELLO), "tenant", json!(ACCOUNT)),
        (
            "a tenant of another type",
            request(HELLO),
            "tenant",
            json!(7),
        ),
        (
            "a requester beside a token",
            with_token.clone(),
            "requested_by",
            json!("mallory"),
        ),
        (
            "a tenant beside a token",
            with_token,
            "tenant",
            json!("acme"),
        ),
    ];
    for (case, mut body, field, value) in cases {
        body[field] = value;
        let (status, answer, log, seal) = answer_request(post(&body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{case}: {answer}");
        assert_eq!(answer["problems"][0]["field"], field, "{case}: {answer}");
        assert!(
            answer["problems"][0]["problem"]
                .as_str()
                .is_some_and(|p| p.contains(&format!("leave `{field}` out"))),
            "{case}: the fix is named: {answer}"
        );
        assert_nothing_recorded_or_sealed(case, &log, &seal);
    }
}

/// Issue 27: the function URL is a door like the others, and takes the same rules from the
/// domain: a file path outside the blueprint's folder, a NUL byte or a duration past 30 days is
/// answered 400 naming the field, and nothing is recorded or sealed.
#[tokio::test]
async fn what_the_engine_could_not_run_is_answered_400_and_nothing_is_recorded() {
    let main_tf = "resource \"terraform_data\" \"x\" {}\n";
    let with = |key: &str, value: Value| {
        let mut body = request(WITH_FILES);
        body["files"] = json!({ "infra/main.tf": main_tf });
        body[key] = value;
        body
    };
    let cases = [
        (with("files", json!({ "infra/main.tf": main_tf, "infra/../../x.tf": main_tf })), "files"),
        (with("files", json!({ "infra//main.tf": main_tf })), "files"),
        (with("secrets", json!({ "api_token": format!("{SECRET}\u{0}") })), "secrets.api_token"),
        (
            request("name: w\nsteps:\n  a: { run: noop, retry: { step-failed: { times: 1, wait: 9223372036854775808ms } } }\n"),
            "steps.a.retry.step-failed.wait",
        ),
    ];
    for (body, field) in cases {
        let log = MemoryLog::new(Timestamp::UNIX_EPOCH);
        let seal = FakeSeal::new(Sealing::Works);
        let (status, answer) =
            answer_on(&body, &log, &seal, &MemoryPayloads::default(), None).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
        let fields: Vec<&str> = answer["problems"]
            .as_array()
            .expect("problems")
            .iter()
            .filter_map(|p| p["field"].as_str())
            .collect();
        assert!(fields.contains(&field), "{field}: {answer}");
        assert_nothing_recorded_or_sealed(field, &log, &seal);
    }
}
