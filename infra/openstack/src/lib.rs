//! The OpenStack client: the calls Overture makes in a tenant's cloud, with the user's own token.
//!
//! - This file: [`Cloud`], a client for one token. [`Cloud::connect`] validates the token with
//!   Keystone (`GET {auth_url}/auth/tokens`, the token checking itself) and takes the services'
//!   public endpoints from its catalog; the auth URL is the only address given from outside, so
//!   the same client works against the local cloud (`cloud/API.md`) and a real OpenStack.
//!   [`validate_token`] is the check `overture deploy` makes before recording anything, and
//!   [`Keystone`] the same check as the submit function's port.
//! - `identity`: what a token says ([`TokenInfo`]) and its catalog.
//! - `compute`: Nova servers ([`NewServer`], [`Server`]).
//! - `console`: [`host_keys`], the SSH host keys of the servers a plan made, read from their
//!   console output through the [`ReadConsole`] port.
//! - `network`: Neutron security groups and their rules ([`SecurityGroup`], [`NewRule`]).
//! - `provision`: [`provision`], which carries out a `servers` step's plan (run by the hidden
//!   `overture provision` inside the step's sandbox).
//! - `access`: [`CloudAccess`], the engine's ports that open and close a bastion for itself.
//! - `error`: [`CloudError`], classified the way callers act on it: a refused token, a backend
//!   worth trying again, a missing resource, a conflict, another refusal.
//!
//! The ports a function defines are implemented only with that function's feature (`submit`:
//! [`Keystone`]'s token check; `runner`: opening a bastion, the host keys, provisioning;
//! `orchestrator`: closing a bastion), so a Lambda links only the function it runs
//! (docs/decisions/0006).
//!
//! The token lives in a [`SecretString`]: it goes only into the `X-Auth-Token` header (marked
//! sensitive), and every message taken from the cloud has it masked out.

#[cfg(any(feature = "runner", feature = "orchestrator"))]
mod access;
mod compute;
#[cfg(feature = "runner")]
mod console;
mod error;
mod identity;
mod network;
#[cfg(feature = "runner")]
mod provision;

use std::fmt;
use std::time::Duration;

use reqwest::header::{HeaderName, HeaderValue};
use reqwest::{Method, StatusCode};
use secrecy::{ExposeSecret, SecretString};
use serde::de::DeserializeOwned;
use serde_json::Value;

#[cfg(any(feature = "runner", feature = "orchestrator"))]
pub use access::CloudAccess;
pub use compute::{NewServer, Server};
#[cfg(feature = "runner")]
pub use console::{host_keys, host_keys_at, MadeServer, ReadConsole, CONSOLE_WAIT};
pub use error::{CloudError, UNREACHABLE_TEXT};
pub use identity::TokenInfo;
pub use network::{NewRule, RuleSource, SecurityGroup, SecurityGroupRule};
#[cfg(feature = "runner")]
pub use provision::{provision, ProvisionError};

use identity::{Endpoints, TokenBody};

/// How long connecting to an API may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one call may take, answer included.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// The most pages a listing follows; far more than any project holds of what Overture lists.
const MAX_PAGES: usize = 1_000;

/// Validates a token against Keystone at `auth_url` and says whom it was issued to.
///
/// `Unauthorized` means the token is unknown, revoked or expired; `Backend` that the cloud
/// could not be reached.
pub async fn validate_token(auth_url: &str, token: &SecretString) -> Result<TokenInfo, CloudError> {
    Ok(Cloud::connect(auth_url, token.clone()).await?.info)
}

/// The cloud's identity service at one auth URL, which the operator configures: the submit
/// function asks it whom a token sent over HTTP belongs to ([`overture_submit::CheckToken`]).
#[cfg(feature = "submit")]
#[derive(Clone, Debug)]
pub struct Keystone {
    auth_url: String,
}

#[cfg(feature = "submit")]
impl Keystone {
    /// Keystone v3 at `auth_url`.
    pub fn new(auth_url: impl Into<String>) -> Self {
        Self {
            auth_url: auth_url.into(),
        }
    }
}

#[cfg(feature = "submit")]
#[async_trait::async_trait]
impl overture_submit::CheckToken for Keystone {
    async fn account(
        &self,
        token: &SecretString,
    ) -> Result<overture_events::CloudAccount, overture_submit::TokenError> {
        use overture_submit::TokenError;
        match validate_token(&self.auth_url, token).await {
            Ok(info) => Ok(info.account()),
            Err(CloudError::Unauthorized(_)) => Err(TokenError::Refused),
            Err(error) if error.is_backend() => Err(TokenError::Unavailable(Box::new(error))),
            Err(error) => Err(TokenError::Failed(Box::new(error))),
        }
    }
}

/// A client acting in one project with one user's token.
pub struct Cloud {
    http: reqwest::Client,
    token: SecretString,
    info: TokenInfo,
    endpoints: Endpoints,
}

// By hand, so the token cannot show even if `SecretString`'s own Debug ever changed.
impl fmt::Debug for Cloud {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cloud")
            .field("info", &self.info)
            .field("endpoints", &self.endpoints)
            .finish_non_exhaustive()
    }
}

impl Cloud {
    /// Validates `token` against Keystone at `auth_url` (e.g. `http://127.0.0.1:5000/v3`) and
    /// keeps the public endpoints of its catalog for the calls that follow.
    pub async fn connect(auth_url: &str, token: SecretString) -> Result<Self, CloudError> {
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(REQUEST_TIMEOUT)
            .build()
            .map_err(|e| CloudError::Invalid(format!("cannot make an HTTP client: {e}")))?;
        let auth_url = auth_url.trim_end_matches('/');
        if !(auth_url.starts_with("http://") || auth_url.starts_with("https://")) {
            return Err(CloudError::Invalid(format!(
                "`{auth_url}` is not an identity URL; give the Keystone v3 endpoint, like https://cloud.example.com:5000/v3"
            )));
        }
        let url = format!("{auth_url}/auth/tokens");
        let subject = sensitive(&token)?;
        let request = http
            .get(&url)
            .header(HeaderName::from_static("x-auth-token"), subject.clone())
            .header(HeaderName::from_static("x-subject-token"), subject);
        let what = "validating the token";
        let answer = request
            .send()
            .await
            .map_err(|e| error::from_transport(&e, what, &token))?;
        let status = answer.status();
        let body = answer
            .text()
            .await
            .map_err(|e| error::from_transport(&e, what, &token))?;
        if status == StatusCode::NOT_FOUND && !about_a_token(&body) {
            // Not Keystone answering about the token: the URL does not lead to Keystone.
            return Err(CloudError::NotFound(format!(
                "{what}: {url} answered 404; is `{auth_url}` the cloud's identity (Keystone v3) URL, \
                 usually ending in /v3?"
            )));
        }
        if status == StatusCode::NOT_FOUND {
            // Keystone's way of saying the subject token is unknown, revoked or expired.
            let message = error::message_of(&body).unwrap_or_else(|| "404 Not Found".into());
            return Err(CloudError::Unauthorized(error::scrub(
                &format!("{what}: {message}"),
                &token,
            )));
        }
        if !status.is_success() {
            return Err(error::from_answer(status, &body, what, &token));
        }
        let (info, endpoints) = decode::<TokenBody>(&body, what, &token)?.read(auth_url)?;
        Ok(Self {
            http,
            token,
            info,
            endpoints,
        })
    }

    /// Whom the token was issued to.
    pub fn info(&self) -> &TokenInfo {
        &self.info
    }

    /// Makes one call and returns the answer's status and body, whatever the status; `what`
    /// names the call in errors.
    async fn send(
        &self,
        method: Method,
        url: &str,
        body: Option<&Value>,
        what: &str,
    ) -> Result<(StatusCode, String), CloudError> {
        let mut request = self
            .http
            .request(method, url)
            .header(
                HeaderName::from_static("x-auth-token"),
                sensitive(&self.token)?,
            )
            .header(reqwest::header::ACCEPT, "application/json");
        if url.starts_with(&self.endpoints.compute) {
            // 2.37 is the first version that lets Nova pick the project's network (`"auto"`);
            // without it a real cloud with several networks refuses to create a server.
            request = request
                .header("OpenStack-API-Version", compute::VERSION_HEADER)
                .header("X-OpenStack-Nova-API-Version", compute::MICROVERSION);
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        let answer = request
            .send()
            .await
            .map_err(|e| error::from_transport(&e, what, &self.token))?;
        let status = answer.status();
        let text = answer
            .text()
            .await
            .map_err(|e| error::from_transport(&e, what, &self.token))?;
        Ok((status, text))
    }

    /// Makes one call and returns the body of a successful answer.
    async fn call(
        &self,
        method: Method,
        url: &str,
        body: Option<&Value>,
        what: &str,
    ) -> Result<String, CloudError> {
        let (status, text) = self.send(method, url, body, what).await?;
        if status.is_success() {
            Ok(text)
        } else {
            Err(self.refusal(status, &text, what))
        }
    }

    /// The error an answer that is not a success stands for.
    fn refusal(&self, status: StatusCode, body: &str, what: &str) -> CloudError {
        error::from_answer(status, body, what, &self.token)
    }

    /// [`call`](Self::call), with a successful answer read as JSON of type `T`.
    async fn call_json<T: DeserializeOwned>(
        &self,
        method: Method,
        url: &str,
        body: Option<&Value>,
        what: &str,
    ) -> Result<T, CloudError> {
        let text = self.call(method, url, body, what).await?;
        decode(&text, what, &self.token)
    }

    /// Every item under `key` of a listing, following its `<key>_links` `next` pages.
    async fn list<T: DeserializeOwned>(
        &self,
        url: String,
        key: &str,
        what: &str,
    ) -> Result<Vec<T>, CloudError> {
        let mut items = Vec::new();
        let mut next = Some(url);
        for _ in 0..MAX_PAGES {
            let Some(url) = next.take() else {
                return Ok(items);
            };
            let mut page: Value = self.call_json(Method::GET, &url, None, what).await?;
            let listed = page
                .get_mut(key)
                .map(Value::take)
                .ok_or_else(|| CloudError::Invalid(format!("{what}: the answer has no `{key}`")))?;
            let listed: Vec<T> = serde_json::from_value(listed).map_err(|e| {
                CloudError::Invalid(error::scrub(
                    &format!("{what}: the answer is not as documented: {e}"),
                    &self.token,
                ))
            })?;
            // An empty page ends the listing even if a link says otherwise.
            if listed.is_empty() {
                return Ok(items);
            }
            items.extend(listed);
            next = page
                .get(format!("{key}_links"))
                .and_then(Value::as_array)
                .and_then(|links| {
                    links
                        .iter()
                        .find(|link| link.get("rel").and_then(Value::as_str) == Some("next"))
                })
                .and_then(|link| link.get("href").and_then(Value::as_str))
                .map(str::to_owned);
        }
        Err(CloudError::Invalid(format!(
            "{what}: the listing has more than {MAX_PAGES} pages"
        )))
    }
}

/// Whether a 404 is Keystone saying the subject token is unknown ("Could not find token: ...")
/// rather than a server saying it has no such path: a wrong auth URL must not read as an expired
/// token.
fn about_a_token(body: &str) -> bool {
    error::message_of(body).is_some_and(|message| message.to_ascii_lowercase().contains("token"))
}

/// The token as a header value that HTTP libraries keep out of their debug output.
fn sensitive(token: &SecretString) -> Result<HeaderValue, CloudError> {
    let mut value = HeaderValue::from_str(token.expose_secret()).map_err(|_| {
        CloudError::Invalid(
            "the token holds characters an HTTP header cannot carry; check the token file".into(),
        )
    })?;
    value.set_sensitive(true);
    Ok(value)
}

fn decode<T: DeserializeOwned>(
    text: &str,
    what: &str,
    token: &SecretString,
) -> Result<T, CloudError> {
    serde_json::from_str(text).map_err(|e| {
        CloudError::Invalid(error::scrub(
            &format!("{what}: the answer is not as documented: {e}"),
            token,
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_never_shows_its_token() {
        let token = "f00dfeedf00dfeedf00dfeedf00dfeed";
        let cloud = Cloud {
            http: reqwest::Client::new(),
            token: SecretString::from(token),
            info: TokenInfo {
                auth_url: "http://h/identity/v3".into(),
                project_id: "p".into(),
                project: "tenant-a".into(),
                domain: "Default".into(),
                user: "tenant-a".into(),
                expires_at: chrono::DateTime::UNIX_EPOCH,
                endpoints: vec![],
            },
            endpoints: Endpoints {
                compute: "http://h/compute/v2.1".into(),
                network: "http://h/network/v2.0".into(),
            },
        };
        let shown = format!("{cloud:?} {cloud:#?}");
        assert!(!shown.contains(token), "{shown}");
        assert!(shown.contains("tenant-a"), "{shown}");
        let header = sensitive(&cloud.token).expect("a header value");
        assert!(!format!("{header:?}").contains(token));
    }
}
