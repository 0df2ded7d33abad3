//! The API's errors: JSON `{"code", "message"}` with a stable code per kind of failure.
//!
//! A message never quotes what the client sent (serde's messages quote the value they stumbled
//! on, which may be a secret), only where it went wrong.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;

/// The largest request body accepted.
pub const MAX_BODY: usize = 1024 * 1024;

/// Why a request was not answered with what it asked for.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// No token, or one the cloud refused.
    #[error("{0}")]
    Unauthorized(String),
    /// No such deployment for this tenant (another tenant's answers the same).
    #[error("{0}")]
    NotFound(String),
    /// The request is malformed or wrong; nothing was recorded.
    #[error("{0}")]
    BadRequest(String),
    /// The blueprint, its parameters or its secrets are wrong; nothing was recorded.
    #[error("{message}")]
    Invalid {
        /// What the command line prints for the same problems.
        message: String,
        /// Each problem.
        problems: Vec<Problem>,
    },
    /// The deployment is not in a state that allows this (cancelling one that has ended).
    #[error("{0}")]
    Conflict(String),
    /// The body is larger than [`MAX_BODY`].
    #[error("the request body is larger than {MAX_BODY} bytes")]
    PayloadTooLarge,
    /// The body stalled for longer than the server's body timeout.
    #[error("the request body stopped arriving for longer than the server waits (its body timeout); send it whole")]
    RequestTimeout,
    /// The body is not JSON.
    #[error("send the body as JSON, with Content-Type: application/json")]
    UnsupportedMediaType,
    /// The body's type is not one this route reads; the message names those it reads.
    #[error("{0}")]
    UnsupportedContent(String),
    /// This method is not allowed on this route.
    #[error("this method is not allowed here")]
    MethodNotAllowed,
    /// A store or the identity service failed in a way that asking again later may mend.
    #[error("{0}")]
    Unavailable(String),
    /// The server failed.
    #[error("{0}")]
    Internal(String),
}

/// One problem of a refused deployment request.
#[derive(Debug, Serialize, ToSchema)]
pub struct Problem {
    /// Where: a blueprint field, or the request's own (`params`, `secrets`, ...).
    pub field: String,
    /// What is wrong and how to fix it.
    pub problem: String,
}

/// The body of every error answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    /// Stable: `unauthorized`, `not_found`, `bad_request`, `invalid`, `conflict`,
    /// `payload_too_large`, `request_timeout`, `unsupported`, `method_not_allowed`, `unavailable`,
    /// `internal`.
    pub code: &'static str,
    /// What went wrong, for people.
    pub message: String,
    /// For `invalid`: each problem.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<Problem>,
}

impl ApiError {
    /// The HTTP status and the stable code.
    pub const fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            ApiError::Unauthorized(_) => (StatusCode::UNAUTHORIZED, "unauthorized"),
            ApiError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            ApiError::BadRequest(_) => (StatusCode::BAD_REQUEST, "bad_request"),
            ApiError::Invalid { .. } => (StatusCode::BAD_REQUEST, "invalid"),
            ApiError::Conflict(_) => (StatusCode::CONFLICT, "conflict"),
            ApiError::PayloadTooLarge => (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
            ApiError::RequestTimeout => (StatusCode::REQUEST_TIMEOUT, "request_timeout"),
            ApiError::UnsupportedMediaType => (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported"),
            ApiError::UnsupportedContent(_) => (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported"),
            ApiError::MethodNotAllowed => (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
            ApiError::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
            ApiError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        }
    }

    /// The answer for a deployment this tenant has no access to, or that does not exist.
    pub fn no_deployment(id: &str) -> Self {
        ApiError::NotFound(format!(
            "no deployment {}",
            overture_domain::text::escaped(id)
        ))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        // A route this backend does not serve yet is the client's news, not the server's fault.
        if status.is_server_error() && status != StatusCode::NOT_IMPLEMENTED {
            tracing::warn!(code, error = %self, "request failed");
        }
        let message = self.to_string();
        let problems = match self {
            ApiError::Invalid { problems, .. } => problems,
            _ => Vec::new(),
        };
        (
            status,
            Json(ErrorBody {
                code,
                message,
                problems,
            }),
        )
            .into_response()
    }
}

impl From<overture_kit::query::QueryError> for ApiError {
    fn from(error: overture_kit::query::QueryError) -> Self {
        if error.is_retryable() {
            ApiError::Unavailable(error.to_string())
        } else {
            ApiError::Internal(error.to_string())
        }
    }
}

/// A body that is not a request: only where it went wrong is said, never what was found there.
pub fn malformed(error: &serde_json::Error) -> ApiError {
    use serde_json::error::Category;
    let what = match error.classify() {
        Category::Io | Category::Eof => "the body ends before the JSON does",
        Category::Syntax => "the body is not JSON",
        Category::Data => {
            "the JSON does not have the request's shape (a field is unknown, \
                           missing or of the wrong type)"
        }
    };
    ApiError::BadRequest(format!(
        "{what} (line {}, column {}); see /openapi.json",
        error.line(),
        error.column()
    ))
}
