//! `overture --server URL`: the commands through the HTTP API of `overture serve`, as the tenant
//! of the user's cloud token.
//!
//! [`Remote`] is the query port ([`QueryDeployments`]) over the API's read routes, so `status`,
//! `list`, `events`, `logs`, `grants`, `tenants`, `services` and `graph` print with the very code they print
//! with on a data directory. The server answers only for the token's tenant: another tenant's deployment
//! answers 404, which reads here as "no such deployment", as it would locally.
//! [`Remote::act`] posts the commands the API carries out (`cancel`, `redrive`).

use std::time::Duration;

use async_trait::async_trait;
use overture_domain::projection::{DeploymentView, TenantView};
use overture_events::{DeploymentId, Envelope};
use overture_kit::query::{AttemptLog, DeploymentFilter, QueryDeployments, QueryError};
use reqwest::{RequestBuilder, StatusCode, Url};
use secrecy::{ExposeSecret, SecretString};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::commands::cancel::CancelArgs;
use crate::commands::deploy::Deploy;
use crate::commands::redrive::Again;
use crate::commands::trigger::SendArgs;
use crate::input::{parse_id, read_secrets};
use crate::output::print_view;
use crate::Failure;

/// How long connecting to the server may take before the command gives up.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the server's answer could not be had or read.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The connection broke while the answer was read.
    #[error("{url}: the answer could not be read")]
    Interrupted {
        /// What was asked.
        url: Url,
        /// Why.
        #[source]
        source: reqwest::Error,
    },
    /// The server failed on its side.
    #[error("{url}: the server failed ({status}): {message}")]
    Failed {
        /// What was asked.
        url: Url,
        /// The HTTP status.
        status: StatusCode,
        /// What the server said.
        message: String,
    },
    /// The answer is not of the shape the API documents.
    #[error("{url}: the answer is not what the API documents")]
    Unreadable {
        /// What was asked.
        url: Url,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
}

/// The body of the API's error answers (see `overture_api::error::ErrorBody`).
#[derive(Deserialize)]
struct ErrorBody {
    message: String,
}

/// What the server answered to a command it carries out.
#[derive(Debug)]
pub enum Acted {
    /// Recorded: the deployment's status object.
    Recorded(Box<DeploymentView>),
    /// No such deployment for this tenant (404).
    NotFound,
    /// Refused in the deployment's state (409), or the request was wrong (400): the message.
    Refused(String),
}

/// The HTTP API of an `overture serve`, called with one token.
#[derive(Clone)]
pub struct Remote {
    http: reqwest::Client,
    base: Url,
    token: SecretString,
}

impl Remote {
    /// A caller of the server at `base` (such as `http://127.0.0.1:8080`) with `token`.
    pub fn new(base: &str, token: SecretString) -> Result<Self, String> {
        let shown = overture_domain::text::escaped(base);
        let base = Url::parse(base)
            .ok()
            .filter(|url| matches!(url.scheme(), "http" | "https") && url.has_host())
            .ok_or_else(|| {
                format!(
                    "--server `{shown}`: expected the server's URL, such as http://127.0.0.1:8080"
                )
            })?;
        // Every request carries the cloud token, and a redrive the secrets: in clear text only
        // to this machine.
        if base.scheme() == "http" && !is_loopback(&base) {
            return Err(format!(
                "--server `{shown}`: the token and secrets would cross the network unencrypted; \
                 use https:// (a proxy in front of `overture serve` terminates TLS), or a \
                 loopback address"
            ));
        }
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .build()
            .map_err(|e| format!("cannot make an HTTP client: {e}"))?;
        Ok(Self { http, base, token })
    }

    /// The server's URL, as the user gave it.
    fn shown(&self) -> &str {
        self.base.as_str().trim_end_matches('/')
    }

    /// The URL of the API path made of `segments`, each escaped as one segment.
    fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(segments);
        }
        url
    }

    /// Sends a request with the token; the answer when it is a success or a 404, 400 or 409.
    async fn send(
        &self,
        url: &Url,
        request: RequestBuilder,
    ) -> Result<reqwest::Response, QueryError> {
        // Most likely a wrong URL or a server not started: said plainly, as the user's to fix.
        let unreachable = |error: reqwest::Error| {
            let mut cause: &dyn std::error::Error = &error;
            while let Some(source) = cause.source() {
                cause = source;
            }
            QueryError::Refused(format!(
                "--server {}: cannot reach the server: {cause}",
                self.shown()
            ))
        };
        let response = request
            .header("X-Auth-Token", self.token.expose_secret())
            .send()
            .await
            .map_err(unreachable)?;
        let status = response.status();
        if status.is_success()
            || matches!(
                status,
                StatusCode::NOT_FOUND | StatusCode::BAD_REQUEST | StatusCode::CONFLICT
            )
        {
            return Ok(response);
        }
        let message = response
            .json::<ErrorBody>()
            .await
            .map_or_else(|_| status.to_string(), |body| body.message);
        if status.is_client_error() {
            return Err(QueryError::Refused(format!(
                "--server {}: {message}",
                self.shown()
            )));
        }
        Err(QueryError::Unavailable(Box::new(ClientError::Failed {
            url: url.clone(),
            status,
            message,
        })))
    }

    /// GETs a JSON answer; none when the server answers 404.
    async fn get<T: DeserializeOwned>(
        &self,
        segments: &[&str],
        query: &[(&str, String)],
    ) -> Result<Option<T>, QueryError> {
        let url = self.url(segments);
        let response = self
            .send(&url, self.http.get(url.clone()).query(query))
            .await?;
        match response.status() {
            StatusCode::NOT_FOUND => Ok(None),
            status if status.is_success() => read(&url, response).await.map(Some),
            _ => Err(refusal(response).await),
        }
    }

    /// POSTs a command about deployment `id` (`cancel`, `redrive`) with a JSON body.
    pub async fn act(
        &self,
        id: DeploymentId,
        command: &str,
        body: &Value,
    ) -> Result<Acted, QueryError> {
        let id = id.to_string();
        let url = self.url(&["v1", "deployments", &id, command]);
        let response = self
            .send(&url, self.http.post(url.clone()).json(body))
            .await?;
        match response.status() {
            StatusCode::NOT_FOUND => Ok(Acted::NotFound),
            status if status.is_success() => Ok(Acted::Recorded(read(&url, response).await?)),
            _ => match refusal(response).await {
                QueryError::Refused(message) => Ok(Acted::Refused(message)),
                other => Err(other),
            },
        }
    }
}

/// Whether `url`'s host is this machine.
fn is_loopback(url: &Url) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    host.eq_ignore_ascii_case("localhost")
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|address| address.is_loopback())
}

/// Reads a JSON answer.
async fn read<T: DeserializeOwned>(
    url: &Url,
    response: reqwest::Response,
) -> Result<T, QueryError> {
    let bytes = response.bytes().await.map_err(|source| {
        QueryError::Unavailable(Box::new(ClientError::Interrupted {
            url: url.clone(),
            source,
        }))
    })?;
    serde_json::from_slice(&bytes).map_err(|source| unreadable(url, source))
}

fn unreadable(url: &Url, source: serde_json::Error) -> QueryError {
    QueryError::Corrupt(Box::new(ClientError::Unreadable {
        url: url.clone(),
        source,
    }))
}

/// A 400 or 409 answer, as the server's message.
async fn refusal(response: reqwest::Response) -> QueryError {
    let status = response.status();
    QueryError::Refused(
        response
            .json::<ErrorBody>()
            .await
            .map_or_else(|_| status.to_string(), |body| body.message),
    )
}

#[async_trait]
impl QueryDeployments for Remote {
    async fn deployment(&self, id: DeploymentId) -> Result<Option<DeploymentView>, QueryError> {
        self.get(&["v1", "deployments", &id.to_string()], &[]).await
    }

    /// The API takes a name where it takes an id, for the caller's own tenant.
    async fn named(
        &self,
        tenant: Option<&str>,
        name: &str,
    ) -> Result<Vec<DeploymentView>, QueryError> {
        let view: Option<DeploymentView> = self.get(&["v1", "deployments", name], &[]).await?;
        Ok(view
            .filter(|view| tenant.is_none_or(|tenant| tenant == view.tenant))
            .into_iter()
            .collect())
    }

    async fn list(&self, filter: &DeploymentFilter) -> Result<Vec<DeploymentView>, QueryError> {
        let query: Vec<(&str, String)> = filter
            .status
            .map(|status| ("status", status.as_str().to_owned()))
            .into_iter()
            .collect();
        let rows: Vec<Value> = self
            .get(&["v1", "deployments"], &query)
            .await?
            .unwrap_or_default();
        let url = self.url(&["v1", "deployments"]);
        let mut views = Vec::with_capacity(rows.len());
        for mut row in rows {
            // A list's rows leave the steps out, as `list --json` does; no list printer reads them.
            if let Some(object) = row.as_object_mut() {
                object
                    .entry("steps")
                    .or_insert_with(|| Value::Object(serde_json::Map::new()));
            }
            let view: DeploymentView =
                serde_json::from_value(row).map_err(|e| unreadable(&url, e))?;
            // The server answers for the token's tenant only: another tenant's list is empty.
            if filter.admits(&view) {
                views.push(view);
            }
        }
        Ok(views)
    }

    async fn tenants(&self) -> Result<Vec<TenantView>, QueryError> {
        let tenant: Option<TenantView> = self.get(&["v1", "tenant"], &[]).await?;
        Ok(tenant.into_iter().collect())
    }

    async fn service_instances(
        &self,
        tenant: &str,
    ) -> Result<Vec<overture_domain::services::RegisteredInstance>, QueryError> {
        // The server answers with the token's tenant's registry only: another's is empty here,
        // as another tenant's deployment is "no such deployment".
        let own = self.tenants().await?;
        if !own.iter().any(|view| view.tenant == tenant) {
            return Ok(Vec::new());
        }
        let instances: Option<Vec<overture_domain::services::RegisteredInstance>> =
            self.get(&["v1", "services"], &[]).await?;
        Ok(instances.unwrap_or_default())
    }

    async fn events(&self, id: DeploymentId) -> Result<Vec<Envelope>, QueryError> {
        let events: Option<Vec<Envelope>> = self
            .get(&["v1", "deployments", &id.to_string(), "events"], &[])
            .await?;
        Ok(events.unwrap_or_default())
    }

    async fn attempt_log(
        &self,
        id: DeploymentId,
        step: &str,
        log: AttemptLog,
    ) -> Result<Option<Vec<u8>>, QueryError> {
        let query = match log {
            AttemptLog::Attempt(attempt) => ("attempt", attempt.to_string()),
            AttemptLog::Destroy => ("destroy", "true".to_owned()),
        };
        let url = self.url(&["v1", "deployments", &id.to_string(), "logs", step]);
        let response = self
            .send(&url, self.http.get(url.clone()).query(&[query]))
            .await?;
        match response.status() {
            StatusCode::NOT_FOUND => Ok(None),
            status if status.is_success() => {
                let bytes = response.bytes().await.map_err(|source| {
                    QueryError::Unavailable(Box::new(ClientError::Interrupted {
                        url: url.clone(),
                        source,
                    }))
                })?;
                Ok(Some(bytes.to_vec()))
            }
            _ => Err(refusal(response).await),
        }
    }
}

/// `overture --server URL cancel ID`: records the cancel through the API, which carries it out,
/// and prints the status it answers with.
pub async fn cancel(remote: &Remote, id: &str, json: bool) -> Result<(), Failure> {
    let id = parse_id(id)?;
    let view = acted(id, remote.act(id, "cancel", &json!({})).await?)?;
    eprintln!("deployment {id}: cancel recorded; the server abandons its steps");
    print_view(&view, json);
    Ok(())
}

/// `overture --server URL redrive ID`: records the redrive through the API, with the secrets
/// given again and the caller's token; the server drives it. Prints the status it answers with
/// (`overture --server URL events ID` follows it).
pub async fn redrive(
    remote: &Remote,
    id: &str,
    secrets: &[String],
    json: bool,
) -> Result<(), Failure> {
    let id = parse_id(id)?;
    let values: Map<String, Value> = read_secrets(secrets)?
        .iter()
        .map(|(name, value)| {
            (
                name.clone(),
                Value::String(value.expose_secret().to_owned()),
            )
        })
        .collect();
    let body = json!({ "secrets": values });
    let view = acted(id, remote.act(id, "redrive", &body).await?)?;
    eprintln!("redriving deployment {id} on the server");
    print_view(&view, json);
    Ok(())
}

/// The status a command was recorded with, or why it was not, as the embedded command says it.
fn acted(id: DeploymentId, acted: Acted) -> Result<DeploymentView, Failure> {
    match acted {
        Acted::Recorded(view) => Ok(*view),
        Acted::NotFound => Err(missing(id)),
        Acted::Refused(message) => Err(Failure::BadInput(message)),
    }
}

/// The HTTP API of an `overture serve`, called with the user's token.
pub struct Server(pub Remote);

/// No deployment `id` for the caller's tenant; also another tenant's: the server answers as if
/// it did not exist.
pub fn missing(id: DeploymentId) -> Failure {
    Failure::BadInput(format!(
        "no deployment {id} on the server for your tenant (see `overture --server URL list`)"
    ))
}

/// Refuses `overture {command}`, which does not go through the HTTP API.
pub fn refuse(command: &str) -> Result<(), Failure> {
    Err(Failure::BadInput(format!(
        "`overture {command}` does not go through the HTTP API; leave out --server (and \
         unset OVERTURE_SERVER) to run it on this machine's data directory"
    )))
}

#[async_trait::async_trait(?Send)]
impl super::Backend for Server {
    fn missing(&self, id: DeploymentId) -> Failure {
        missing(id)
    }

    fn only_embedded(&self, command: &str) -> Result<(), Failure> {
        refuse(command)
    }

    async fn queries(&self) -> Result<Box<dyn QueryDeployments>, Failure> {
        Ok(Box::new(self.0.clone()))
    }

    async fn deploy(&self, _: Deploy<'_>) -> Result<(), Failure> {
        refuse("deploy")
    }

    async fn cancel(&self, args: &CancelArgs) -> Result<(), Failure> {
        cancel(&self.0, &args.id, args.json).await
    }

    async fn redrive(&self, again: Again<'_>) -> Result<(), Failure> {
        redrive(&self.0, again.id, again.secrets, again.json).await
    }

    async fn redeploy(&self, _: Again<'_>) -> Result<(), Failure> {
        refuse("redeploy")
    }

    async fn check_read_models(&self) -> Result<Vec<String>, Failure> {
        refuse("replay").map(|()| Vec::new())
    }

    async fn verify(&self, _: Option<String>) -> Result<crate::commands::verify::Report, Failure> {
        refuse("verify").map(|()| Default::default())
    }

    async fn send_event(&self, _: SendArgs) -> Result<(), Failure> {
        refuse("trigger send")
    }

    async fn trigger_log(&self, _: bool) -> Result<(), Failure> {
        refuse("triggers log")
    }

    async fn publish_triggers(&self, _: &std::path::Path) -> Result<(), Failure> {
        refuse("triggers log")
    }
}
