//! Nova: servers made, found by name, looked at and deleted.

use std::collections::BTreeMap;

use base64::Engine as _;
use reqwest::Method;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{Cloud, CloudError};

/// The Nova microversion Overture asks for (see `Cloud::send`).
pub(super) const MICROVERSION: &str = "2.37";
/// [`MICROVERSION`] in the `OpenStack-API-Version` header's form.
pub(super) const VERSION_HEADER: &str = "compute 2.37";

/// A server to create.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NewServer {
    /// Its name (Nova does not require names to be unique; Overture makes them so).
    pub name: String,
    /// The image's id; the cloud's default when absent (the local cloud has one image).
    pub image: Option<String>,
    /// The flavor's id; the cloud's default when absent.
    pub flavor: Option<String>,
    /// Its user data (a cloud-config), as text: the client encodes it.
    pub user_data: String,
    /// Its metadata.
    pub metadata: BTreeMap<String, String>,
    /// Its security groups, by name or id.
    pub security_groups: Vec<String>,
}

/// A server as Nova shows it.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Server {
    /// Its id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// `BUILD`, `ACTIVE`, `ERROR`, ... (absent from a short listing).
    #[serde(default)]
    pub status: String,
    /// Its metadata.
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
    /// Its addresses, by network.
    #[serde(default)]
    addresses: BTreeMap<String, Vec<Address>>,
    /// Why it is in `ERROR`, when Nova says.
    #[serde(default)]
    fault: Option<Fault>,
}

#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
struct Address {
    addr: String,
    #[serde(default)]
    version: u8,
    #[serde(rename = "OS-EXT-IPS:type", default)]
    kind: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
struct Fault {
    #[serde(default)]
    message: String,
}

impl Server {
    /// Whether it is up.
    pub fn is_active(&self) -> bool {
        self.status == "ACTIVE"
    }

    /// Whether it failed to build (and never will).
    pub fn is_error(&self) -> bool {
        self.status == "ERROR"
    }

    /// Why it is in `ERROR`, if Nova said.
    pub fn fault(&self) -> Option<&str> {
        self.fault
            .as_ref()
            .map(|fault| fault.message.as_str())
            .filter(|message| !message.is_empty())
    }

    /// The address to reach it at: its first fixed IPv4 address, else its first address of any
    /// kind.
    pub fn address(&self) -> Option<&str> {
        let all = || self.addresses.values().flatten();
        all()
            .find(|a| a.version == 4 && a.kind.as_deref().is_none_or(|kind| kind == "fixed"))
            .or_else(|| all().next())
            .map(|a| a.addr.as_str())
    }
}

#[derive(Deserialize)]
struct Created {
    server: CreatedServer,
}

#[derive(Deserialize)]
struct CreatedServer {
    id: String,
}

#[derive(Deserialize)]
struct Shown {
    server: Server,
}

impl Cloud {
    /// Creates a server and returns its id; it starts in `BUILD`.
    pub async fn create_server(&self, server: &NewServer) -> Result<String, CloudError> {
        let mut body = json!({
            "name": server.name,
            // Nova picks the project's network (microversion 2.37).
            "networks": "auto",
            "user_data": base64::engine::general_purpose::STANDARD.encode(&server.user_data),
            "metadata": server.metadata,
            "security_groups": server
                .security_groups
                .iter()
                .map(|name| json!({ "name": name }))
                .collect::<Vec<_>>(),
        });
        for (key, value) in [("imageRef", &server.image), ("flavorRef", &server.flavor)] {
            if let Some(value) = value {
                body[key] = Value::String(value.clone());
            }
        }
        let url = format!("{}/servers", self.endpoints.compute);
        let what = format!("creating server `{}`", server.name);
        let created: Created = self
            .call_json(Method::POST, &url, Some(&json!({ "server": body })), &what)
            .await?;
        Ok(created.server.id)
    }

    /// The server with this id.
    pub async fn server(&self, id: &str) -> Result<Server, CloudError> {
        let url = format!("{}/servers/{id}", self.endpoints.compute);
        let shown: Shown = self
            .call_json(Method::GET, &url, None, &format!("showing server {id}"))
            .await?;
        Ok(shown.server)
    }

    /// The project's servers named exactly `name`, in full.
    pub async fn servers_named(&self, name: &str) -> Result<Vec<Server>, CloudError> {
        let url = format!(
            "{}/servers/detail?name={}",
            self.endpoints.compute,
            query_value(name)
        );
        let servers: Vec<Server> = self
            .list(url, "servers", &format!("listing servers named `{name}`"))
            .await?;
        // Nova reads `name` as a regular expression: `web-1` also finds `web-10`.
        Ok(servers.into_iter().filter(|s| s.name == name).collect())
    }

    /// Deletes a server; `NotFound` if there is none with this id.
    pub async fn delete_server(&self, id: &str) -> Result<(), CloudError> {
        let url = format!("{}/servers/{id}", self.endpoints.compute);
        self.call(Method::DELETE, &url, None, &format!("deleting server {id}"))
            .await
            .map(drop)
    }
}

/// A value for a URL's query string, percent-encoded.
pub(super) fn query_value(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                char::from(b).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_servers_address_is_its_fixed_ipv4_one() {
        let server: Server = serde_json::from_value(json!({
            "id": "1", "name": "web-1", "status": "ACTIVE",
            "addresses": {"private": [
                {"addr": "fd00::5", "version": 6, "OS-EXT-IPS:type": "fixed"},
                {"addr": "203.0.113.5", "version": 4, "OS-EXT-IPS:type": "floating"},
                {"addr": "10.0.0.5", "version": 4, "OS-EXT-IPS:type": "fixed"}
            ]}
        }))
        .expect("a server");
        assert_eq!(server.address(), Some("10.0.0.5"));
        assert!(server.is_active() && !server.is_error());
        let building: Server = serde_json::from_value(
            json!({"id": "2", "name": "b", "status": "BUILD", "addresses": {}}),
        )
        .expect("a server");
        assert_eq!(building.address(), None);
    }

    #[test]
    fn query_values_are_percent_encoded() {
        assert_eq!(query_value("d1a2-web-1"), "d1a2-web-1");
        assert_eq!(query_value("a b&c=d"), "a%20b%26c%3Dd");
    }
}
