//! Keystone v3: what a token says about its holder ([`TokenInfo`]) and where the services are
//! (its service catalog).

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};
use overture_events::CloudAccount;
use serde::Deserialize;

use super::error::CloudError;

/// Who a token was issued to and until when, as Keystone says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenInfo {
    /// The identity endpoint the token was validated against (`OS_AUTH_URL`).
    pub auth_url: String,
    /// The project the token is scoped to: its id, the tenant.
    pub project_id: String,
    /// The project's name, for people (unique only within its domain).
    pub project: String,
    /// The name of the project's domain, for people (empty when Keystone did not say).
    pub domain: String,
    /// The user the token was issued to.
    pub user: String,
    /// When the token stops working.
    pub expires_at: DateTime<Utc>,
    /// The `host:port` of every public endpoint in the token's catalog, sorted, each once.
    pub endpoints: Vec<String>,
}

impl TokenInfo {
    /// The cloud account a deployment made with this token acts for (never the token itself).
    pub fn account(&self) -> CloudAccount {
        CloudAccount {
            auth_url: self.auth_url.clone(),
            project_id: self.project_id.clone(),
            project: self.project.clone(),
            domain: self.domain.clone(),
            user: self.user.clone(),
            endpoints: self.endpoints.clone(),
        }
    }
}

/// The base URLs of the services a client uses, from a token's catalog.
#[derive(Clone, Debug)]
pub(super) struct Endpoints {
    /// Nova, as the catalog has it (`.../v2.1` or `.../v2.1/<project id>`).
    pub(super) compute: String,
    /// Neutron with its API version (`.../v2.0`).
    pub(super) network: String,
}

/// `{"token": ...}`, the body of `GET /auth/tokens`.
#[derive(Deserialize)]
pub(super) struct TokenBody {
    token: Token,
}

#[derive(Deserialize)]
struct Token {
    expires_at: DateTime<Utc>,
    user: Named,
    /// Absent for an unscoped token, which cannot act in any project.
    project: Option<Project>,
    #[serde(default)]
    catalog: Vec<Service>,
}

#[derive(Deserialize)]
struct Named {
    name: String,
}

#[derive(Deserialize)]
struct Project {
    id: String,
    name: String,
    /// Keystone always names it; a cloud that does not leaves the domain unshown.
    #[serde(default)]
    domain: Option<Domain>,
}

#[derive(Deserialize)]
struct Domain {
    #[serde(default)]
    name: String,
}

#[derive(Deserialize)]
struct Service {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    endpoints: Vec<Endpoint>,
}

#[derive(Deserialize)]
struct Endpoint {
    interface: String,
    url: String,
}

impl TokenBody {
    /// The token's holder and its services' public endpoints.
    pub(super) fn read(self, auth_url: &str) -> Result<(TokenInfo, Endpoints), CloudError> {
        let token = self.token;
        let project = token.project.ok_or_else(|| {
            CloudError::Invalid(
                "the token is not scoped to a project; issue one for the tenant's project \
                 (`openstack token issue` with OS_PROJECT_NAME set)"
                    .to_owned(),
            )
        })?;
        let public = |kind: &str| {
            token
                .catalog
                .iter()
                .filter(|service| service.kind == kind)
                .flat_map(|service| &service.endpoints)
                .find(|endpoint| endpoint.interface == "public")
                .map(|endpoint| endpoint.url.trim_end_matches('/').to_owned())
                .ok_or_else(|| {
                    CloudError::Invalid(format!(
                        "the token's service catalog has no public `{kind}` endpoint"
                    ))
                })
        };
        let endpoints = Endpoints {
            compute: public("compute")?,
            network: network_base(&public("network")?),
        };
        let info = TokenInfo {
            auth_url: auth_url.to_owned(),
            project_id: project.id,
            project: project.name,
            domain: project.domain.map(|d| d.name).unwrap_or_default(),
            user: token.user.name,
            expires_at: token.expires_at,
            endpoints: public_host_ports(&token.catalog),
        };
        Ok((info, endpoints))
    }
}

/// The `host:port` of every public endpoint of `catalog`: where the engine's client, and a step
/// acting with the token (Terraform's provider picks the public interface too), connect. An
/// endpoint whose URL cannot be read is left out, as a client could not reach it either.
fn public_host_ports(catalog: &[Service]) -> Vec<String> {
    let found: BTreeSet<String> = catalog
        .iter()
        .flat_map(|service| &service.endpoints)
        .filter(|endpoint| endpoint.interface == "public")
        .filter_map(|endpoint| {
            let url = reqwest::Url::parse(&endpoint.url).ok()?;
            let host = url.host_str()?;
            Some(format!("{host}:{}", url.port_or_known_default()?))
        })
        .collect();
    found.into_iter().collect()
}

/// Neutron's catalog entry is usually the service's root (`http://host:9696`), without the API
/// version its paths start with.
fn network_base(url: &str) -> String {
    if url.ends_with("/v2.0") {
        url.to_owned()
    } else {
        format!("{url}/v2.0")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(catalog: &str, project: &str) -> TokenBody {
        let text = format!(
            r#"{{"token":{{"expires_at":"2026-11-22T12:00:00.000000Z","issued_at":"2026-11-22T11:00:00.000000Z",
            "methods":["password"],"user":{{"id":"u1","name":"tenant-a","domain":{{"id":"default","name":"Default"}}}},
            {project}"roles":[{{"id":"r","name":"member"}}],"catalog":{catalog}}}}}"#
        );
        serde_json::from_str(&text).expect("a token body")
    }

    const PROJECT: &str =
        r#""project":{"id":"p1","name":"tenant-a","domain":{"id":"default","name":"Default"}},"#;

    #[test]
    fn the_catalog_gives_the_public_endpoints() {
        let catalog = r#"[
          {"type":"identity","name":"keystone","endpoints":[{"id":"1","interface":"public","region":"R","region_id":"R","url":"http://h/identity/v3"}]},
          {"type":"compute","name":"nova","endpoints":[
             {"id":"2","interface":"internal","region":"R","region_id":"R","url":"http://internal/compute/v2.1"},
             {"id":"3","interface":"public","region":"R","region_id":"R","url":"http://h/compute/v2.1/"}]},
          {"type":"network","name":"neutron","endpoints":[{"id":"4","interface":"public","region":"R","region_id":"R","url":"http://h:9696"}]}]"#;
        let (info, endpoints) = body(catalog, PROJECT)
            .read("http://h/identity/v3")
            .expect("readable");
        assert_eq!(endpoints.compute, "http://h/compute/v2.1");
        assert_eq!(endpoints.network, "http://h:9696/v2.0");
        assert_eq!(
            info.account(),
            CloudAccount {
                auth_url: "http://h/identity/v3".into(),
                project_id: "p1".into(),
                project: "tenant-a".into(),
                domain: "Default".into(),
                user: "tenant-a".into(),
                endpoints: vec!["h:80".into(), "h:9696".into()],
            }
        );
        assert_eq!(info.expires_at.to_rfc3339(), "2026-11-22T12:00:00+00:00");
    }

    #[test]
    fn the_account_keeps_every_public_endpoint_of_the_catalog_by_host_and_port() {
        let catalog = r#"[
          {"type":"identity","endpoints":[
             {"interface":"public","url":"https://keystone.example.com/v3"},
             {"interface":"admin","url":"http://10.0.0.9:35357/v3"}]},
          {"type":"compute","endpoints":[
             {"interface":"public","url":"https://nova.example.com:8774/v2.1/p1"},
             {"interface":"internal","url":"http://10.0.0.5:8774/v2.1"}]},
          {"type":"network","endpoints":[{"interface":"public","url":"http://192.0.2.7:9696"}]},
          {"type":"image","endpoints":[{"interface":"public","url":"https://nova.example.com:8774/image"}]},
          {"type":"volumev3","endpoints":[{"interface":"public","url":"not a url"}]}]"#;
        let (info, _) = body(catalog, PROJECT)
            .read("https://keystone.example.com/v3")
            .expect("readable");
        assert_eq!(
            info.account().endpoints,
            [
                "192.0.2.7:9696",
                "keystone.example.com:443",
                "nova.example.com:8774",
            ],
            "public ones only, each once; internal and admin ones are not the client's"
        );
    }

    #[test]
    fn a_missing_service_or_project_is_named() {
        let error = body("[]", PROJECT).read("a").expect_err("no compute");
        assert!(error.to_string().contains("`compute`"), "{error}");
        let error = body("[]", "").read("a").expect_err("unscoped");
        assert!(error.to_string().contains("not scoped"), "{error}");
    }
}
