//! The door of the function URLs whose auth type is `AWS_IAM` (the submit function's), as Lambda
//! keeps it: `cargo lambda watch` serves function URLs with no auth at all, so on this machine
//! this door stands in front of it. It checks each request's SigV4 signature against the local
//! credentials ([`overture_aws::signing::verify`]) and answers 403 to anything else, as Lambda
//! does; a request it lets in goes to the function through the invoke API, with the signer in
//! the request context (`requestContext.authorizer.iam`), where the function reads who asks.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_credential_types::Credentials;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use serde_json::{json, Value};

use crate::LocalError;

/// The largest request Lambda takes through a function URL (6 MB).
const LARGEST_REQUEST: usize = 6 * 1024 * 1024;

/// What the door knows: the functions behind it, where they are invoked, and whom it lets in.
pub struct Door {
    /// `cargo lambda watch`'s invoke API.
    pub invoke: String,
    /// The functions whose URLs take `AWS_IAM` auth (by binary name).
    pub functions: Vec<String>,
    /// The region requests must be signed for.
    pub region: String,
    /// The account the known credentials belong to.
    pub account: String,
    /// The credentials it accepts, each with the ARN of whom it belongs to.
    pub known: Vec<(Credentials, String)>,
    /// How long a function may take to answer.
    pub timeout: Duration,
}

struct Shared {
    door: Door,
    http: reqwest::Client,
    requests: AtomicU64,
}

/// Serves the door on `listener` until the process ends.
pub async fn serve(door: Door, listener: tokio::net::TcpListener) -> Result<(), LocalError> {
    let http = reqwest::Client::builder()
        .timeout(door.timeout)
        .build()
        .map_err(|e| LocalError::call("building the door's HTTP client", e))?;
    let shared = Arc::new(Shared {
        door,
        http,
        requests: AtomicU64::new(0),
    });
    let app = axum::Router::new().fallback(at_the_door).with_state(shared);
    axum::serve(listener, app)
        .await
        .map_err(|e| LocalError::call("serving the function URLs' door", e))
}

async fn at_the_door(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let Some((function, path)) = function_and_path(parts.uri.path()) else {
        return answer(
            StatusCode::NOT_FOUND,
            "no function URL here: /lambda-url/FUNCTION/...",
        );
    };
    if !shared.door.functions.iter().any(|f| *f == function) {
        return answer(
            StatusCode::NOT_FOUND,
            "this door keeps only the function URLs with AWS_IAM auth",
        );
    }
    let Ok(body) = axum::body::to_bytes(body, LARGEST_REQUEST).await else {
        return answer(
            StatusCode::PAYLOAD_TOO_LARGE,
            "Request must be smaller than 6 MB",
        );
    };
    let headers: Vec<(&str, &str)> = parts
        .headers
        .iter()
        .filter_map(|(name, value)| Some((name.as_str(), value.to_str().ok()?)))
        .collect();
    let host = parts
        .headers
        .get("host")
        .and_then(|h| h.to_str().ok())
        .unwrap_or_default();
    let path_and_query = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let url = format!("http://{host}{path_and_query}");
    let credentials: Vec<Credentials> = shared.door.known.iter().map(|(c, _)| c.clone()).collect();
    let signer = match overture_aws::signing::verify(
        parts.method.as_str(),
        &url,
        &headers,
        &body,
        &credentials,
        &shared.door.region,
        SystemTime::now(),
    ) {
        Ok(signer) => signer,
        Err(refused) => {
            tracing::info!(function, %refused, "refused at the door");
            // Lambda's own answer, which says no more than this.
            return (
                StatusCode::FORBIDDEN,
                axum::Json(json!({"Message": "Forbidden"})),
            )
                .into_response();
        }
    };
    let arn = shared
        .door
        .known
        .iter()
        .find(|(c, _)| c.access_key_id() == signer.access_key)
        .map(|(_, arn)| arn.clone())
        .unwrap_or_default();
    let number = shared.requests.fetch_add(1, Ordering::Relaxed);
    let event = function_url_event(&FunctionUrlRequest {
        function,
        path,
        query: parts.uri.query(),
        method: parts.method.as_str(),
        headers: &headers,
        body: &body,
        request_id: &format!("local-door-{number}"),
        iam: json!({
            "accessKey": signer.access_key,
            "accountId": shared.door.account,
            "callerId": signer.access_key,
            "cognitoIdentity": null,
            "principalOrgId": null,
            "userArn": arn,
            "userId": signer.access_key,
        }),
    });
    let invoked = shared
        .http
        .post(format!(
            "{}/2015-03-31/functions/{function}/invocations",
            shared.door.invoke.trim_end_matches('/')
        ))
        .json(&event)
        .send()
        .await;
    match invoked {
        Ok(reply) if reply.status().is_success() => match reply.json::<Value>().await {
            Ok(reply) => function_answer(&reply),
            Err(error) => answer(
                StatusCode::BAD_GATEWAY,
                &format!("the function's answer: {error}"),
            ),
        },
        Ok(reply) => answer(
            StatusCode::BAD_GATEWAY,
            &format!("the function failed ({})", reply.status()),
        ),
        Err(error) => answer(
            StatusCode::BAD_GATEWAY,
            &format!("the function could not be invoked: {error}"),
        ),
    }
}

/// `/lambda-url/FUNCTION/REST`: the function and the path it is given (`/REST`).
fn function_and_path(path: &str) -> Option<(&str, String)> {
    let rest = path.strip_prefix("/lambda-url/")?;
    let (function, rest) = rest.split_once('/').unwrap_or((rest, ""));
    (!function.is_empty()).then(|| (function, format!("/{rest}")))
}

/// One request through a function URL, as the door saw it.
pub struct FunctionUrlRequest<'a> {
    /// The function's name.
    pub function: &'a str,
    /// The path the function is given.
    pub path: String,
    /// The query string, if any.
    pub query: Option<&'a str>,
    /// The HTTP method.
    pub method: &'a str,
    /// The headers received.
    pub headers: &'a [(&'a str, &'a str)],
    /// The body received.
    pub body: &'a [u8],
    /// The request's id.
    pub request_id: &'a str,
    /// The signer, as `requestContext.authorizer.iam`.
    pub iam: Value,
}

/// The event Lambda hands a function for a request through its URL (payload format 2.0). The
/// signature and the session token stay at the door: the function needs only who signed.
pub fn function_url_event(request: &FunctionUrlRequest<'_>) -> Value {
    let mut headers = serde_json::Map::new();
    for (name, value) in request.headers {
        let name = name.to_ascii_lowercase();
        if name == "authorization" || name == "x-amz-security-token" {
            continue;
        }
        match headers.get_mut(&name) {
            Some(Value::String(joined)) => {
                joined.push(',');
                joined.push_str(value);
            }
            _ => {
                headers.insert(name, Value::String((*value).to_owned()));
            }
        }
    }
    let (body, encoded) = match std::str::from_utf8(request.body) {
        Ok(text) => (text.to_owned(), false),
        Err(_) => (
            base64::engine::general_purpose::STANDARD.encode(request.body),
            true,
        ),
    };
    let now = chrono::Utc::now();
    json!({
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": request.path,
        "rawQueryString": request.query.unwrap_or_default(),
        "headers": headers,
        "requestContext": {
            "accountId": "anonymous",
            "apiId": request.function,
            "domainName": "localhost",
            "domainPrefix": request.function,
            "http": {
                "method": request.method,
                "path": request.path,
                "protocol": "HTTP/1.1",
                "sourceIp": "127.0.0.1",
                "userAgent": headers.get("user-agent").cloned().unwrap_or(Value::Null),
            },
            "requestId": request.request_id,
            "routeKey": "$default",
            "stage": "$default",
            "time": now.format("%d/%b/%Y:%T %z").to_string(),
            "timeEpoch": now.timestamp_millis(),
            "authorizer": { "iam": request.iam },
        },
        "body": body,
        "isBase64Encoded": encoded,
    })
}

/// The function's answer (`statusCode`, `headers`, `body`, `isBase64Encoded`) as HTTP.
fn function_answer(reply: &Value) -> Response {
    let status = reply["statusCode"]
        .as_u64()
        .and_then(|s| u16::try_from(s).ok())
        .and_then(|s| StatusCode::from_u16(s).ok())
        .unwrap_or(StatusCode::OK);
    let text = reply["body"].as_str().unwrap_or_default();
    let body = if reply["isBase64Encoded"].as_bool() == Some(true) {
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .unwrap_or_default()
    } else {
        text.as_bytes().to_vec()
    };
    let mut headers = HeaderMap::new();
    if let Some(given) = reply["headers"].as_object() {
        for (name, value) in given {
            if let (Ok(name), Some(Ok(value))) = (
                HeaderName::from_bytes(name.as_bytes()),
                value.as_str().map(HeaderValue::from_str),
            ) {
                headers.insert(name, value);
            }
        }
    }
    (status, headers, Body::from(body)).into_response()
}

fn answer(status: StatusCode, message: &str) -> Response {
    (status, axum::Json(json!({"Message": message}))).into_response()
}

#[cfg(test)]
mod tests {
    use super::function_and_path;

    #[test]
    fn the_function_and_its_path_are_read_from_the_url() {
        assert_eq!(
            function_and_path("/lambda-url/submit/deployments"),
            Some(("submit", "/deployments".to_owned()))
        );
        assert_eq!(
            function_and_path("/lambda-url/submit"),
            Some(("submit", "/".to_owned()))
        );
        assert_eq!(function_and_path("/lambda-url/"), None);
        assert_eq!(function_and_path("/other"), None);
    }
}
