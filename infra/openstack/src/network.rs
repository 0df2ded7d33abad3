//! Neutron: security groups and their rules.

use reqwest::{Method, StatusCode};
use serde::Deserialize;
use serde_json::{json, Value};

use super::compute::query_value;
use super::error::existing_rule_id;
use super::{Cloud, CloudError};

/// A security group as Neutron shows it.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct SecurityGroup {
    /// Its id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Its description.
    #[serde(default)]
    pub description: Option<String>,
    /// Its rules.
    #[serde(default)]
    pub security_group_rules: Vec<SecurityGroupRule>,
}

/// A rule of a security group as Neutron shows it.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct SecurityGroupRule {
    /// Its id.
    pub id: String,
    /// The group it belongs to.
    pub security_group_id: String,
    /// `ingress` or `egress`.
    pub direction: String,
    /// `tcp`, `udp`, ...; any protocol when absent.
    #[serde(default)]
    pub protocol: Option<String>,
    /// The lowest port admitted.
    #[serde(default)]
    pub port_range_min: Option<u16>,
    /// The highest port admitted.
    #[serde(default)]
    pub port_range_max: Option<u16>,
    /// The addresses admitted, as a CIDR.
    #[serde(default)]
    pub remote_ip_prefix: Option<String>,
    /// The group whose servers are admitted.
    #[serde(default)]
    pub remote_group_id: Option<String>,
    /// What it is for.
    #[serde(default)]
    pub description: Option<String>,
}

/// An ingress TCP rule to add: the only kind Overture makes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewRule {
    /// The group to add it to.
    pub security_group_id: String,
    /// The port it admits.
    pub port: u16,
    /// Whom it admits.
    pub from: RuleSource,
    /// What it is for, for whoever looks at the group later.
    pub description: Option<String>,
}

/// Whom a rule admits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RuleSource {
    /// The addresses of a CIDR, like `10.1.2.1/32`.
    Cidr(String),
    /// Every server of the group with this id.
    Group(String),
}

#[derive(Deserialize)]
struct OneGroup {
    security_group: SecurityGroup,
}

#[derive(Deserialize)]
struct OneRule {
    security_group_rule: SecurityGroupRule,
}

impl Cloud {
    /// Creates a security group (Neutron gives it its default egress rules).
    pub async fn create_security_group(
        &self,
        name: &str,
        description: &str,
    ) -> Result<SecurityGroup, CloudError> {
        let url = format!("{}/security-groups", self.endpoints.network);
        let body = json!({"security_group": {"name": name, "description": description}});
        let what = format!("creating security group `{name}`");
        let created: OneGroup = self
            .call_json(Method::POST, &url, Some(&body), &what)
            .await?;
        Ok(created.security_group)
    }

    /// The project's security groups named exactly `name`.
    pub async fn security_groups_named(
        &self,
        name: &str,
    ) -> Result<Vec<SecurityGroup>, CloudError> {
        let url = format!(
            "{}/security-groups?name={}",
            self.endpoints.network,
            query_value(name)
        );
        let groups: Vec<SecurityGroup> = self
            .list(
                url,
                "security_groups",
                &format!("listing security groups named `{name}`"),
            )
            .await?;
        Ok(groups.into_iter().filter(|g| g.name == name).collect())
    }

    /// The security group with this id, with its rules.
    pub async fn security_group(&self, id: &str) -> Result<SecurityGroup, CloudError> {
        let url = format!("{}/security-groups/{id}", self.endpoints.network);
        let shown: OneGroup = self
            .call_json(
                Method::GET,
                &url,
                None,
                &format!("showing security group {id}"),
            )
            .await?;
        Ok(shown.security_group)
    }

    /// Deletes a security group; `Conflict` while a server uses it, `NotFound` if it is gone.
    pub async fn delete_security_group(&self, id: &str) -> Result<(), CloudError> {
        let url = format!("{}/security-groups/{id}", self.endpoints.network);
        self.call(
            Method::DELETE,
            &url,
            None,
            &format!("deleting security group {id}"),
        )
        .await
        .map(drop)
    }

    /// Adds an ingress TCP rule and returns its id; when the group already holds an identical
    /// rule (`SecurityGroupRuleExists`), returns that rule's id instead.
    pub async fn create_rule(&self, rule: &NewRule) -> Result<String, CloudError> {
        let mut body = json!({
            "security_group_id": rule.security_group_id,
            "direction": "ingress",
            "protocol": "tcp",
            "port_range_min": rule.port,
            "port_range_max": rule.port,
        });
        let ethertype = match &rule.from {
            RuleSource::Cidr(cidr) => {
                body["remote_ip_prefix"] = Value::String(cidr.clone());
                if cidr.contains(':') {
                    "IPv6"
                } else {
                    "IPv4"
                }
            }
            RuleSource::Group(group) => {
                body["remote_group_id"] = Value::String(group.clone());
                "IPv4"
            }
        };
        body["ethertype"] = Value::String(ethertype.to_owned());
        if let Some(description) = &rule.description {
            body["description"] = Value::String(description.clone());
        }
        let url = format!("{}/security-group-rules", self.endpoints.network);
        let what = format!(
            "adding a rule for port {} to security group {}",
            rule.port, rule.security_group_id
        );
        let body = json!({ "security_group_rule": body });
        let (status, text) = self.send(Method::POST, &url, Some(&body), &what).await?;
        if status.is_success() {
            let created: OneRule = super::decode(&text, &what, &self.token)?;
            return Ok(created.security_group_rule.id);
        }
        if status == StatusCode::CONFLICT {
            if let Some(id) = existing_rule_id(&text) {
                return Ok(id);
            }
        }
        Err(self.refusal(status, &text, &what))
    }

    /// The rules of a security group.
    pub async fn rules(
        &self,
        security_group_id: &str,
    ) -> Result<Vec<SecurityGroupRule>, CloudError> {
        let url = format!(
            "{}/security-group-rules?security_group_id={}",
            self.endpoints.network,
            query_value(security_group_id)
        );
        self.list(
            url,
            "security_group_rules",
            &format!("listing the rules of security group {security_group_id}"),
        )
        .await
    }

    /// Deletes a rule; `NotFound` if it is gone.
    pub async fn delete_rule(&self, id: &str) -> Result<(), CloudError> {
        let url = format!("{}/security-group-rules/{id}", self.endpoints.network);
        self.call(
            Method::DELETE,
            &url,
            None,
            &format!("deleting security group rule {id}"),
        )
        .await
        .map(drop)
    }
}
