//! Calls to a running cloud: its admin API and its Keystone, on 127.0.0.1.

use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use overture_cloud::{CloudInfo, StateDir};
use serde_json::{json, Value};

use super::project::Named;
use crate::Failure;

/// How long one call to the cloud may take.
const CALL_LIMIT: Duration = Duration::from_secs(30);

/// The cloud serving `dir`, if one runs and answers.
pub(super) async fn live(dir: &Path) -> Result<Option<Client>, Failure> {
    let state = StateDir::new(dir);
    let info = state.read_info().map_err(|e| Failure::Engine(e.into()))?;
    let Some(info) = info.filter(|info| info.process().is_running()) else {
        return Ok(None);
    };
    let admin_token = state
        .read_admin_token()
        .map_err(|e| Failure::Engine(e.into()))?;
    let client = Client::new(info, admin_token)?;
    match client
        .admin(reqwest::Method::GET, "/admin/status", None)
        .await
    {
        Ok((200, _)) => Ok(Some(client)),
        _ => Ok(None),
    }
}

/// The cloud serving `dir`, or a message saying how to start one.
pub(super) async fn connect(dir: &Path) -> Result<Client, Failure> {
    live(dir).await?.ok_or_else(|| {
        Failure::BadInput(format!(
            "no cloud is running in {} (--dir); start one with `overture cloud up --dir {}`",
            dir.display(),
            dir.display()
        ))
    })
}

/// The message of an error answer of the admin API or Keystone.
pub(super) fn message_of(body: &Value) -> String {
    body["error"]["message"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| body.to_string())
}

/// Calls to one running cloud.
pub(super) struct Client {
    /// Where the cloud listens, and what it serves.
    pub(super) info: CloudInfo,
    admin_token: String,
    http: reqwest::Client,
}

impl Client {
    pub(super) fn new(info: CloudInfo, admin_token: String) -> Result<Self, Failure> {
        let http = reqwest::Client::builder()
            .timeout(CALL_LIMIT)
            .no_proxy()
            .build()
            .context("making an HTTP client")?;
        Ok(Self {
            info,
            admin_token,
            http,
        })
    }

    /// Calls the admin API; returns the status and the JSON body (`null` when empty).
    pub(super) async fn admin(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<(u16, Value), Failure> {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.info.url))
            .header("X-Admin-Token", &self.admin_token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request
            .send()
            .await
            .with_context(|| format!("calling the cloud at {}", self.info.url))?;
        let status = response.status().as_u16();
        let bytes = response
            .bytes()
            .await
            .context("reading the cloud's answer")?;
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Ok((status, body))
    }

    /// Keystone password authentication; returns the token.
    pub(super) async fn password_auth(
        &self,
        project: &Named<'_>,
        password: &str,
    ) -> Result<String, Failure> {
        let domain = json!({ "name": project.domain });
        let body = json!({"auth": {
            "identity": {"methods": ["password"], "password": {"user": {
                "name": project.name, "domain": domain, "password": password}}},
            "scope": {"project": {"name": project.name, "domain": domain}},
        }});
        let response = self
            .http
            .post(format!("{}/auth/tokens", self.info.auth_url))
            .json(&body)
            .send()
            .await
            .with_context(|| format!("calling Keystone at {}", self.info.auth_url))?;
        if response.status().as_u16() != 201 {
            return Err(Failure::Engine(anyhow::anyhow!(
                "Keystone refused the project's password ({})",
                response.status()
            )));
        }
        response
            .headers()
            .get("x-subject-token")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
            .ok_or_else(|| Failure::Engine(anyhow::anyhow!("Keystone answered no X-Subject-Token")))
    }
}
