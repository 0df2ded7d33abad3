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
//! - `403 {"error": "forbidden", "message"}`: the request carries no caller identity that AWS
//!   verified; nothing was read or recorded.
//!
//! Nobody is taken at their word. The function URL takes `AWS_IAM` auth: AWS checks the
//! request's SigV4 signature and hands the function the signer in the request context
//! (`requestContext.authorizer.iam`); a request without that identity is refused with 403 before
//! its body is read, so the function refuses it even where the door in front does not check
//! (`cargo lambda watch`). The tenant and the requester come from that identity (the signer's
//! account and ARN), or, when the request brings a cloud token, from the cloud's identity service
//! ([`CheckToken`]), which says the account, its project (the tenant) and its user (the
//! requester). A body that names a `tenant` or a `requested_by` is refused (400): no request
//! chooses whom it acts as. Without an identity service configured, a request with a token is
//! refused.

use std::collections::BTreeMap;

use lambda_http::http::{Method, StatusCode};
use lambda_http::request::RequestContext;
use lambda_http::{Body, Request, RequestExt, Response};
use overture_domain::blueprint::{BlueprintError, BlueprintProblem};
use overture_domain::secret::{SecretString, SecretValues};
use overture_domain::text::escaped;
use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::{submit, CheckToken, CloudSession, Submission, SubmitError, SubmitPorts, TokenError};

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
    /// Refused when present: the tenant is the signer's account or the token's project id.
    #[serde(default)]
    pub tenant: Option<IgnoredAny>,
    /// Refused when present: the requester is the signer or the token's user.
    #[serde(default)]
    pub requested_by: Option<IgnoredAny>,
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

/// What a request without a verified caller is told.
const UNSIGNED: &str = "the submit function takes only requests signed with AWS credentials \
     (its function URL's auth type is AWS_IAM): sign the request with SigV4 for the `lambda` \
     service, as `overture --backend aws deploy` does";

/// Who signed a request, as AWS verified it: the function URL's `AWS_IAM` auth puts the signer
/// in the request context, where the client cannot write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The signer's AWS account: the tenant of a request that brings no cloud token.
    pub account: String,
    /// The signer's ARN: the requester of a request that brings no cloud token.
    pub arn: String,
}

impl Caller {
    /// The verified signer of `request`, if the request context holds one with both an account
    /// and an ARN; an empty field counts as none.
    pub fn of(request: &Request) -> Option<Self> {
        let RequestContext::ApiGatewayV2(context) = request.request_context_ref()? else {
            return None;
        };
        let iam = context.authorizer.as_ref()?.iam.as_ref()?;
        let present = |text: &Option<String>| text.clone().filter(|t| !t.trim().is_empty());
        Some(Self {
            account: present(&iam.account_id)?,
            arn: present(&iam.user_arn)?,
        })
    }
}

/// Answers one HTTP request to the submit endpoint.
pub async fn on_request(request: Request, ports: &HttpPorts<'_>) -> Response<Body> {
    // Before anything else: an unsigned caller learns nothing, not even the method to use.
    let Some(caller) = Caller::of(&request) else {
        return answer(
            StatusCode::FORBIDDEN,
            &json!({"error": "forbidden", "message": UNSIGNED}),
        );
    };
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
    match submission(parsed, &caller, ports.tokens).await {
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

/// The submission a request makes, its token checked with the cloud: the tenant and the
/// requester are whom the cloud says the token is for or, without a token, who signed the
/// request; never what the client says.
async fn submission(
    request: SubmitRequest,
    caller: &Caller,
    tokens: Option<&dyn CheckToken>,
) -> Result<Submission, Refusal> {
    if request.tenant.is_some() {
        return Err(problem(
            "tenant",
            "a request cannot choose its tenant: it is the account that signed the request, or \
             the cloud token's project; leave `tenant` out",
        ));
    }
    if request.requested_by.is_some() {
        return Err(problem(
            "requested_by",
            "a request cannot choose who asks: it is whoever signed the request, or the cloud \
             token's user; leave `requested_by` out",
        ));
    }
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
        // The project's id: names repeat across Keystone domains (docs/security/tenant-ids.md).
        Some(session) => (
            session.account.project_id.clone(),
            session.account.user.clone(),
        ),
        None => (caller.account.clone(), caller.arn.clone()),
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
        name: None,
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
             required; `params`, `secrets` and `files` map names to text; `token` is text; \
             nothing else is read)"
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
