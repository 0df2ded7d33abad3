//! [`CloudError`]: how a call to the cloud failed, classified the way callers act on it, and the
//! reading of OpenStack's error bodies into it.

use reqwest::StatusCode;
use secrecy::{ExposeSecret, SecretString};
use serde_json::Value;

/// What an API gateway in front of an OpenStack service says when the service behind it is down.
pub const UNREACHABLE_TEXT: &str = "The backend server is unreachable";

/// How much of a cloud's message an error keeps: enough for an API's explanation, never a whole
/// HTML error page.
const MESSAGE_LIMIT: usize = 300;

/// A call to the cloud failed.
///
/// No variant ever holds the token: every message taken from the cloud has it masked out first
/// (a real Keystone names the token it could not find).
#[derive(Debug, thiserror::Error)]
pub enum CloudError {
    /// The token is unknown, revoked or expired (401, or 404 when it is validated).
    #[error(
        "the cloud refused the token: {0}; get a new one (for example `openstack token issue`)"
    )]
    Unauthorized(String),
    /// The API could not be reached or answered that its backend is down (502, 503, 504, a
    /// connection refused or timed out): worth trying again later.
    #[error("the cloud API is unreachable: {0}")]
    Backend(String),
    /// What was asked for does not exist (404).
    #[error("not found: {0}")]
    NotFound(String),
    /// The request conflicts with the resource's state (409), such as deleting a security group
    /// a server still uses.
    #[error("conflict: {0}")]
    Conflict(String),
    /// The cloud refused the request for another reason.
    #[error("the cloud answered {status}: {message}")]
    Rejected {
        /// The HTTP status.
        status: u16,
        /// The cloud's message.
        message: String,
    },
    /// The request could not be made, or the answer is not what the API documents (a catalog
    /// without the service, a body of another shape).
    #[error("{0}")]
    Invalid(String),
}

impl CloudError {
    /// Whether trying the same call again later may succeed.
    pub fn is_backend(&self) -> bool {
        matches!(self, CloudError::Backend(_))
    }
}

/// Classifies an answer that is not a success: `what` names the call for the message.
pub(super) fn from_answer(
    status: StatusCode,
    body: &str,
    what: &str,
    token: &SecretString,
) -> CloudError {
    let message = message_of(body).unwrap_or_else(|| status_text(status));
    let message = scrub(&format!("{what}: {message}"), token);
    if body.contains(UNREACHABLE_TEXT) {
        return CloudError::Backend(message);
    }
    match status {
        StatusCode::BAD_GATEWAY | StatusCode::SERVICE_UNAVAILABLE | StatusCode::GATEWAY_TIMEOUT => {
            CloudError::Backend(message)
        }
        StatusCode::UNAUTHORIZED => CloudError::Unauthorized(message),
        StatusCode::NOT_FOUND => CloudError::NotFound(message),
        StatusCode::CONFLICT => CloudError::Conflict(message),
        other => CloudError::Rejected {
            status: other.as_u16(),
            message,
        },
    }
}

/// Classifies a request that got no answer: no connection, a timeout, a broken stream are all
/// worth trying again; a request that could not even be built is not.
pub(super) fn from_transport(
    error: &reqwest::Error,
    what: &str,
    token: &SecretString,
) -> CloudError {
    // reqwest's message names the URL, never a header, but masking costs nothing.
    let message = scrub(&format!("{what}: {}", describe(error)), token);
    if error.is_builder() || error.is_decode() {
        CloudError::Invalid(message)
    } else {
        CloudError::Backend(message)
    }
}

/// reqwest's message with its causes ("error sending request" alone says nothing).
fn describe(error: &reqwest::Error) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The message of an OpenStack error body: `{"error": {"message"}}` (Keystone),
/// `{"itemNotFound": {"message"}}` and the like (Nova), `{"NeutronError": {"message"}}`
/// (Neutron), or a bare `{"message"}`; otherwise the start of the body if it is text.
pub(super) fn message_of(body: &str) -> Option<String> {
    let from_json = serde_json::from_str::<Value>(body).ok().and_then(|value| {
        let object = value.as_object()?;
        if let Some(message) = object.get("message").and_then(Value::as_str) {
            return Some(message.to_owned());
        }
        object
            .values()
            .find_map(|inner| inner.get("message").and_then(Value::as_str))
            .map(str::to_owned)
    });
    let text = from_json.or_else(|| {
        let trimmed = body.trim();
        (!trimmed.is_empty()).then(|| trimmed.to_owned())
    })?;
    Some(shorten(&text))
}

/// The id in Neutron's `SecurityGroupRuleExists` message: "Security group rule already exists.
/// Rule id is <id>."
pub(super) fn existing_rule_id(body: &str) -> Option<String> {
    let message = message_of(body)?;
    let (_, rest) = message.split_once("Rule id is ")?;
    let id: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
        .collect();
    (!id.is_empty()).then_some(id)
}

fn status_text(status: StatusCode) -> String {
    match status.canonical_reason() {
        Some(reason) => format!("{} {reason}", status.as_u16()),
        None => status.as_u16().to_string(),
    }
}

fn shorten(text: &str) -> String {
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match one_line.char_indices().nth(MESSAGE_LIMIT) {
        Some((cut, _)) => format!("{}...", &one_line[..cut]),
        None => one_line,
    }
}

/// The text with every occurrence of the token replaced by `***`.
pub(super) fn scrub(text: &str, token: &SecretString) -> String {
    let secret = token.expose_secret();
    if secret.is_empty() {
        text.to_owned()
    } else {
        text.replace(secret, overture_domain::secret::MASK)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "0123456789abcdef0123456789abcdef";

    fn token() -> SecretString {
        SecretString::from(TOKEN)
    }

    #[test]
    fn answers_are_classified_by_status_and_by_the_gateway_text() {
        let cases = [
            (502, "", "Backend"),
            (503, r#"{"error":{"code":503,"message":"busy"}}"#, "Backend"),
            (
                500,
                r#"{"error":{"code":500,"message":"The backend server is unreachable"}}"#,
                "Backend",
            ),
            (
                401,
                r#"{"error":{"code":401,"message":"no"}}"#,
                "Unauthorized",
            ),
            (
                404,
                r#"{"itemNotFound":{"code":404,"message":"Instance x could not be found."}}"#,
                "NotFound",
            ),
            (
                409,
                r#"{"NeutronError":{"type":"InUse","message":"in use","detail":""}}"#,
                "Conflict",
            ),
            (
                400,
                r#"{"badRequest":{"code":400,"message":"bad"}}"#,
                "Rejected",
            ),
            (403, "forbidden", "Rejected"),
        ];
        for (status, body, wanted) in cases {
            let status = StatusCode::from_u16(status).expect("a status");
            let error = from_answer(status, body, "call", &token());
            let debug = format!("{error:?}");
            assert!(debug.starts_with(wanted), "{status} {body}: {debug}");
        }
    }

    #[test]
    fn messages_come_from_every_openstack_error_shape() {
        assert_eq!(
            message_of(r#"{"NeutronError":{"type":"T","message":"m1","detail":""}}"#),
            Some("m1".into())
        );
        assert_eq!(
            message_of(r#"{"itemNotFound":{"code":404,"message":"m2"}}"#),
            Some("m2".into())
        );
        assert_eq!(message_of(r#"{"message":"m3"}"#), Some("m3".into()));
        assert_eq!(message_of("  plain\n text "), Some("plain text".into()));
        assert_eq!(message_of(""), None);
        assert!(message_of(&"x".repeat(5000)).is_some_and(|m| m.len() < 400));
    }

    #[test]
    fn the_existing_rule_id_is_read_from_the_conflict() {
        let body = r#"{"NeutronError":{"type":"SecurityGroupRuleExists","message":"Security group rule already exists. Rule id is 5c9e4e2a-1b7f-4c3e-9a4e-0d1f2e3a4b5c.","detail":""}}"#;
        assert_eq!(
            existing_rule_id(body),
            Some("5c9e4e2a-1b7f-4c3e-9a4e-0d1f2e3a4b5c".into())
        );
        assert_eq!(
            existing_rule_id(r#"{"NeutronError":{"message":"in use"}}"#),
            None
        );
    }

    #[test]
    fn the_token_never_shows_in_an_error() {
        // A real Keystone names the token it could not find.
        let body = format!(
            r#"{{"error":{{"code":404,"title":"Not Found","message":"Could not find token: {TOKEN}."}}}}"#
        );
        for status in [401, 404, 409, 500, 503] {
            let status = StatusCode::from_u16(status).expect("a status");
            let error = from_answer(status, &body, &format!("GET /x?t={TOKEN}"), &token());
            for shown in [
                error.to_string(),
                format!("{error:?}"),
                format!("{error:#?}"),
            ] {
                assert!(!shown.contains(TOKEN), "{shown}");
            }
            assert!(
                error.to_string().contains("Could not find token: ***"),
                "{error}"
            );
        }
    }
}
