//! The submit function over HTTP (a Lambda function URL, through `lambda_http`).
//!
//! [`on_request`] reads a `POST` of a [`SubmitRequest`]'s JSON, hands it to [`submit`], and
//! answers JSON:
//!
//! - `201 {"deployment": ID}`: recorded.
//! - `400 {"error": "invalid", "message", "problems": [{"field", "problem"}]}`: the blueprint,
//!   its parameters, its secrets, the tenant or the token are wrong; `message` is what the
//!   command line prints for the same problems (`SOURCE: FIELD: PROBLEM`, one per line).
//! - `503 {"error": "unavailable", "message"}`: the log, the payload store, the seal or the
//!   identity service failed in a way that asking again later may mend; nothing was recorded.
//! - `500 {"error": "failed", "message"}`: anything else.
//!
//! A secret's value or the token never appears in an answer: the request's own text is never
//! echoed (a malformed body is answered with the place of the fault only, as serde's messages
//! quote the value they stumbled on), and the ports' errors hold none.
//!
//! The cloud account is never taken from the client: a token sent with the request is checked
//! with the cloud's identity service ([`CheckToken`]), which says the account, its project (the
//! tenant) and its user (the requester). Without an identity service configured, a request with
//! a token is refused.

use std::collections::BTreeMap;

use lambda_http::http::{Method, StatusCode};
use lambda_http::{Body, Request, Response};
use overture_domain::blueprint::{BlueprintError, BlueprintProblem};
use overture_domain::secret::{SecretString, SecretValues};
use overture_domain::text::escaped;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::{submit, CheckToken, CloudSession, Submission, SubmitError, SubmitPorts, TokenError};

/// The tenant of a request that names none and brings no token, as on the command line.
const DEFAULT_TENANT: &str = "default";

/// What the endpoint reads: a deployment request as JSON.
///
/// Secret values and the token are read straight into [`SecretString`]s; this type is never
/// printed.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubmitRequest {
    /// Where the blueprint came from (its file name), for messages and the record.
    pub source: String,
    /// The blueprint's YAML text.
    pub blueprint: String,
    /// The tenant deploying; with a token, the token's project is the tenant.
    #[serde(default)]
    pub tenant: Option<String>,
    /// Who asks; with a token, whom the cloud says it was issued to.
    #[serde(default)]
    pub requested_by: Option<String>,
    /// Parameter values, by name.
    #[serde(default)]
    pub params: BTreeMap<String, String>,
    /// Secret values, by name.
    #[serde(default, deserialize_with = "secret_values")]
    pub secrets: SecretValues,
    /// The files the steps take from the blueprint's folder, by path relative to it.
    #[serde(default)]
    pub files: BTreeMap<String, String>,
    /// The user's cloud token, when the blueprint acts in a cloud.
    #[serde(default, deserialize_with = "secret")]
    pub token: Option<SecretString>,
}

fn secret_values<'de, D: serde::Deserializer<'de>>(d: D) -> Result<SecretValues, D::Error> {
    let values = BTreeMap::<String, String>::deserialize(d)?;
    Ok(values
        .into_iter()
        .map(|(name, value)| (name, SecretString::from(value)))
        .collect())
}

fn secret<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<SecretString>, D::Error> {
    Ok(Option::<String>::deserialize(d)?.map(SecretString::from))
}

/// One problem of a refused request, as the answer carries it.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Problem {
    /// Where: a blueprint field, or the request's own field (`tenant`, `token`, ...).
    pub field: String,
    /// What is wrong and how to fix it.
    pub problem: String,
}

/// The ports of the HTTP entry: [`submit`]'s, and the identity service that checks tokens
/// (none: requests with a token are refused).
pub struct HttpPorts<'a> {
    /// What [`submit`] uses.
    pub submit: SubmitPorts<'a>,
    /// Who checks a token sent with a request.
    pub tokens: Option<&'a dyn CheckToken>,
}

/// Answers one HTTP request to the submit endpoint.
pub async fn on_request(request: Request, ports: &HttpPorts<'_>) -> Response<Body> {
    if request.method() != Method::POST {
        return answer(
            StatusCode::METHOD_NOT_ALLOWED,
            &json!({"error": "invalid", "message": "submit a deployment with POST"}),
        );
    }
    let body: &[u8] = match request.body() {
        Body::Empty => b"",
        Body::Text(text) => text.as_bytes(),
        Body::Binary(bytes) => bytes,
        _ => b"",
    };
    let parsed: SubmitRequest = match serde_json::from_slice(body) {
        Ok(parsed) => parsed,
        Err(error) => return malformed(&error),
    };
    let source = parsed.source.clone();
    match submission(parsed, ports.tokens).await {
        Ok(submission) => match submit(submission, &ports.submit).await {
            Ok(deployment) => answer(
                StatusCode::CREATED,
                &json!({"deployment": deployment.to_string()}),
            ),
            Err(SubmitError::Invalid(problems)) => invalid(&source, problems),
            Err(error) => failed(is_retryable(&error), &error),
        },
        Err(Refusal::Invalid(problems)) => invalid(&source, problems),
        Err(Refusal::Token(error)) => failed(error.is_retryable(), &error),
    }
}

/// Why a request did not become a submission.
enum Refusal {
    Invalid(BlueprintError),
    Token(TokenError),
}

fn problem(field: &str, problem: impl Into<String>) -> Refusal {
    Refusal::Invalid(BlueprintError(vec![BlueprintProblem {
        field: field.into(),
        problem: problem.into(),
    }]))
}

/// The submission a request makes, its token checked with the cloud: with a token, the tenant
/// and the requester are whom the cloud says, never what the client says.
async fn submission(
    request: SubmitRequest,
    tokens: Option<&dyn CheckToken>,
) -> Result<Submission, Refusal> {
    let cloud =
        match (request.token, tokens) {
            (None, _) => None,
            (Some(_), None) => return Err(problem(
                "token",
                "this endpoint checks no cloud tokens (it has no identity service configured); \
                 deploy blueprints that act in a cloud from the command line with the embedded \
                 engine",
            )),
            (Some(token), Some(tokens)) => match tokens.account(&token).await {
                Ok(account) => Some(CloudSession { account, token }),
                Err(TokenError::Refused) => {
                    return Err(problem("token", TokenError::Refused.to_string()))
                }
                Err(error) => return Err(Refusal::Token(error)),
            },
        };
    let (tenant, requested_by) = match &cloud {
        Some(session) => {
            if let Some(tenant) = request
                .tenant
                .as_ref()
                .filter(|t| **t != session.account.project)
            {
                return Err(problem(
                    "tenant",
                    format!(
                        "`{}`: the token is for project `{}`, and a deployment's tenant is its \
                         token's project; leave out the tenant",
                        escaped(tenant),
                        escaped(&session.account.project)
                    ),
                ));
            }
            (
                session.account.project.clone(),
                session.account.user.clone(),
            )
        }
        None => {
            let Some(requested_by) = request.requested_by.filter(|r| !r.trim().is_empty()) else {
                return Err(problem(
                    "requested_by",
                    "say who asks for the deployment (or send a cloud token, whose user is the requester)",
                ));
            };
            (
                request.tenant.unwrap_or_else(|| DEFAULT_TENANT.into()),
                requested_by,
            )
        }
    };
    Ok(Submission {
        triggered_by: None,
        source: request.source,
        text: request.blueprint,
        tenant,
        requested_by,
        trigger: "http".into(),
        params: request.params,
        secrets: request.secrets,
        files: request.files,
        cloud,
    })
}

fn is_retryable(error: &SubmitError) -> bool {
    match error {
        SubmitError::Log(error) => error.is_retryable(),
        SubmitError::Payload(error) => error.is_retryable(),
        SubmitError::Seal(error) => error.is_retryable(),
        SubmitError::Invalid(_) | SubmitError::Refused(_) | SubmitError::Key(_) => false,
    }
}

fn invalid(source: &str, problems: BlueprintError) -> Response<Body> {
    let source = escaped(source);
    let message = problems
        .0
        .iter()
        .map(|p| format!("{source}: {p}"))
        .collect::<Vec<_>>()
        .join("\n");
    let problems: Vec<Problem> = problems
        .0
        .into_iter()
        .map(|p| Problem {
            field: p.field,
            problem: p.problem,
        })
        .collect();
    answer(
        StatusCode::BAD_REQUEST,
        &json!({"error": "invalid", "message": message, "problems": problems}),
    )
}

/// A body that is not a request: only where it went wrong is said, never what was found there.
fn malformed(error: &serde_json::Error) -> Response<Body> {
    let what = match error.classify() {
        serde_json::error::Category::Io | serde_json::error::Category::Eof => {
            "the request body ends early"
        }
        serde_json::error::Category::Syntax => "the request body is not JSON",
        serde_json::error::Category::Data => {
            "the request body is not a deployment request (`source` and `blueprint` are \
             required; `params`, `secrets` and `files` map names to text; `tenant`, \
             `requested_by` and `token` are text; nothing else is read)"
        }
    };
    let message = format!("{what}, at line {} column {}", error.line(), error.column());
    answer(
        StatusCode::BAD_REQUEST,
        &json!({"error": "invalid", "message": message, "problems": [{"field": "(request)", "problem": message}]}),
    )
}

fn failed(retryable: bool, error: &dyn std::error::Error) -> Response<Body> {
    let (status, kind) = if retryable {
        (StatusCode::SERVICE_UNAVAILABLE, "unavailable")
    } else {
        (StatusCode::INTERNAL_SERVER_ERROR, "failed")
    };
    answer(
        status,
        &json!({"error": kind, "message": error.to_string()}),
    )
}

fn answer(status: StatusCode, body: &serde_json::Value) -> Response<Body> {
    let mut response = Response::new(Body::Text(body.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        lambda_http::http::header::CONTENT_TYPE,
        lambda_http::http::HeaderValue::from_static("application/json"),
    );
    response
}
