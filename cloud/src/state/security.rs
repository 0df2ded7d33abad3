//! Security groups and their rules, checked as Neutron checks them.

use std::net::Ipv6Addr;

use uuid::Uuid;

use super::{State, StateError};
use crate::cidr::Ipv4Net;

/// The name of the group every project starts with (no rules: it admits nothing).
pub const DEFAULT_GROUP: &str = "default";

/// A security group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecurityGroup {
    /// Its id (a UUID).
    pub id: String,
    /// Its name; several groups may share one.
    pub name: String,
    /// Its description.
    pub description: String,
}

impl SecurityGroup {
    /// The `default` group of a new project.
    pub(super) fn default_group() -> Self {
        Self {
            id: Uuid::new_v4().to_string(),
            name: DEFAULT_GROUP.into(),
            description: "Default security group".into(),
        }
    }
}

/// A security group rule, as stored (every field Neutron shows).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Its id (a UUID).
    pub id: String,
    /// The group it belongs to.
    pub group_id: String,
    /// `ingress` or `egress`.
    pub direction: String,
    /// `IPv4` or `IPv6`.
    pub ethertype: String,
    /// The protocol as given (lowercase), or none for every protocol.
    pub protocol: Option<String>,
    /// The lowest port admitted.
    pub port_range_min: Option<u16>,
    /// The highest port admitted.
    pub port_range_max: Option<u16>,
    /// Where connections may come from, normalised; none (and no remote group) means anywhere.
    pub remote_ip_prefix: Option<String>,
    /// Admits every server of this group instead of a prefix.
    pub remote_group_id: Option<String>,
    /// Its description.
    pub description: String,
}

impl Rule {
    /// Whether the rule admits TCP: only those are enforced, the rest are kept and ignored.
    pub fn admits_tcp(&self) -> bool {
        self.direction == "ingress"
            && self.ethertype == "IPv4"
            && matches!(protocol_number(self.protocol.as_deref()), None | Some(6))
    }

    /// What makes two rules the same rule (Neutron refuses a second one).
    fn identity(&self) -> impl PartialEq + '_ {
        (
            &self.group_id,
            &self.direction,
            &self.ethertype,
            protocol_number(self.protocol.as_deref()),
            self.port_range_min,
            self.port_range_max,
            &self.remote_ip_prefix,
            &self.remote_group_id,
        )
    }
}

/// A rule to create, as the request gave it.
#[derive(Debug, Clone, Default)]
pub struct NewRule {
    /// The group it goes in.
    pub group_id: String,
    /// `ingress` or `egress`.
    pub direction: Option<String>,
    /// `IPv4` (the default) or `IPv6`.
    pub ethertype: Option<String>,
    /// A protocol name or number; none or `any` for every protocol.
    pub protocol: Option<String>,
    /// The lowest port.
    pub port_range_min: Option<i64>,
    /// The highest port.
    pub port_range_max: Option<i64>,
    /// A prefix the connections may come from.
    pub remote_ip_prefix: Option<String>,
    /// A group whose servers the connections may come from.
    pub remote_group_id: Option<String>,
    /// A description.
    pub description: Option<String>,
}

/// The IP protocol number a rule's protocol stands for; `None` for every protocol.
fn protocol_number(protocol: Option<&str>) -> Option<u8> {
    match protocol? {
        "any" => None,
        "tcp" => Some(6),
        "udp" => Some(17),
        "icmp" => Some(1),
        "sctp" => Some(132),
        "icmpv6" | "ipv6-icmp" => Some(58),
        other => other.parse().ok(),
    }
}

/// Whether `protocol` is something Neutron accepts.
fn known_protocol(protocol: &str) -> bool {
    matches!(
        protocol,
        "any" | "tcp" | "udp" | "icmp" | "sctp" | "icmpv6" | "ipv6-icmp"
    ) || protocol.parse::<u8>().is_ok()
}

impl State {
    /// Creates a security group in the project.
    pub fn create_group(
        &mut self,
        project_id: &str,
        name: &str,
        description: &str,
    ) -> Result<SecurityGroup, StateError> {
        if name.len() > 255 || description.len() > 255 {
            return Err(StateError::Invalid(
                "security group name and description take at most 255 characters".into(),
            ));
        }
        let project = self.project_mut(project_id)?;
        let group = SecurityGroup {
            id: Uuid::new_v4().to_string(),
            name: name.to_owned(),
            description: description.to_owned(),
        };
        project.groups.push(group.clone());
        Ok(group)
    }

    /// The project's group with that id.
    pub fn group(&self, project_id: &str, id: &str) -> Result<&SecurityGroup, StateError> {
        self.project(project_id)?
            .groups
            .iter()
            .find(|g| g.id == id)
            .ok_or_else(|| StateError::GroupNotFound(id.to_owned()))
    }

    /// The project's groups, oldest first; only those named exactly `name` if given.
    pub fn groups(
        &self,
        project_id: &str,
        name: Option<&str>,
    ) -> Result<Vec<&SecurityGroup>, StateError> {
        Ok(self
            .project(project_id)?
            .groups
            .iter()
            .filter(|g| name.is_none_or(|name| g.name == name))
            .collect())
    }

    /// Deletes a group no server uses, with its rules and every rule naming it as remote group.
    pub fn delete_group(&mut self, project_id: &str, id: &str) -> Result<(), StateError> {
        let project = self.project_mut(project_id)?;
        let at = project
            .groups
            .iter()
            .position(|g| g.id == id)
            .ok_or_else(|| StateError::GroupNotFound(id.to_owned()))?;
        if at == 0 {
            return Err(StateError::DefaultGroup);
        }
        if project
            .servers
            .iter()
            .any(|s| s.groups.iter().any(|g| g == id))
        {
            return Err(StateError::GroupInUse(id.to_owned()));
        }
        project.groups.remove(at);
        project
            .rules
            .retain(|r| r.group_id != id && r.remote_group_id.as_deref() != Some(id));
        Ok(())
    }

    /// Creates a rule after checking it as Neutron does.
    pub fn create_rule(&mut self, project_id: &str, new: NewRule) -> Result<Rule, StateError> {
        let project = self.project(project_id)?;
        if !project.groups.iter().any(|g| g.id == new.group_id) {
            return Err(StateError::GroupNotFound(new.group_id));
        }
        let invalid = |message: &str| Err(StateError::Invalid(message.to_owned()));
        let direction = match new.direction.as_deref() {
            Some(d @ ("ingress" | "egress")) => d.to_owned(),
            _ => return invalid("direction: give `ingress` or `egress`"),
        };
        let ethertype = match new.ethertype.as_deref() {
            None | Some("IPv4") => "IPv4".to_owned(),
            Some("IPv6") => "IPv6".to_owned(),
            Some(_) => return invalid("ethertype: give `IPv4` or `IPv6`"),
        };
        let protocol = new.protocol.map(|p| p.to_ascii_lowercase());
        if let Some(protocol) = &protocol {
            if !known_protocol(protocol) {
                return Err(StateError::Invalid(format!(
                    "protocol `{protocol}`: give tcp, udp, icmp, any or a number from 0 to 255"
                )));
            }
        }
        let (port_range_min, port_range_max) = check_ports(
            protocol_number(protocol.as_deref()),
            new.port_range_min,
            new.port_range_max,
        )?;
        if new.remote_ip_prefix.is_some() && new.remote_group_id.is_some() {
            return invalid("Only remote_ip_prefix or remote_group_id may be provided.");
        }
        let remote_ip_prefix = match new.remote_ip_prefix {
            Some(prefix) => Some(check_prefix(&prefix, &ethertype)?),
            None => None,
        };
        if let Some(remote) = &new.remote_group_id {
            if !project.groups.iter().any(|g| g.id == *remote) {
                return Err(StateError::GroupNotFound(remote.clone()));
            }
        }
        let rule = Rule {
            id: Uuid::new_v4().to_string(),
            group_id: new.group_id,
            direction,
            ethertype,
            protocol,
            port_range_min,
            port_range_max,
            remote_ip_prefix,
            remote_group_id: new.remote_group_id,
            description: new.description.unwrap_or_default(),
        };
        if let Some(existing) = project
            .rules
            .iter()
            .find(|r| r.identity() == rule.identity())
        {
            return Err(StateError::RuleExists(existing.id.clone()));
        }
        self.project_mut(project_id)?.rules.push(rule.clone());
        Ok(rule)
    }

    /// The project's rule with that id.
    pub fn rule(&self, project_id: &str, id: &str) -> Result<&Rule, StateError> {
        self.project(project_id)?
            .rules
            .iter()
            .find(|r| r.id == id)
            .ok_or_else(|| StateError::RuleNotFound(id.to_owned()))
    }

    /// The project's rules, oldest first; only those of group `group_id` if given.
    pub fn rules(
        &self,
        project_id: &str,
        group_id: Option<&str>,
    ) -> Result<Vec<&Rule>, StateError> {
        Ok(self
            .project(project_id)?
            .rules
            .iter()
            .filter(|r| group_id.is_none_or(|g| r.group_id == g))
            .collect())
    }

    /// Deletes a rule.
    pub fn delete_rule(&mut self, project_id: &str, id: &str) -> Result<Rule, StateError> {
        let project = self.project_mut(project_id)?;
        let at = project
            .rules
            .iter()
            .position(|r| r.id == id)
            .ok_or_else(|| StateError::RuleNotFound(id.to_owned()))?;
        Ok(project.rules.remove(at))
    }
}

/// Checks a rule's port range: for TCP, UDP and SCTP both ends or neither, 1 ≤ min ≤ max ≤ 65535.
fn check_ports(
    protocol: Option<u8>,
    min: Option<i64>,
    max: Option<i64>,
) -> Result<(Option<u16>, Option<u16>), StateError> {
    let invalid = |message: String| Err(StateError::Invalid(message));
    match (protocol, min, max) {
        (_, None, None) => Ok((None, None)),
        (None, _, _) => invalid("Must also specify protocol if port range is given.".into()),
        (Some(6 | 17 | 132), Some(min), Some(max)) if 1 <= min && min <= max && max <= 65535 => {
            Ok((u16::try_from(min).ok(), u16::try_from(max).ok()))
        }
        (Some(6 | 17 | 132), Some(_), Some(_)) => invalid(
            "port_range_min and port_range_max: give 1 ≤ port_range_min ≤ port_range_max ≤ 65535"
                .into(),
        ),
        (Some(6 | 17 | 132), _, _) => invalid(
            "give both port_range_min and port_range_max (the same port twice for one port)".into(),
        ),
        // For ICMP the "ports" are the type and the code.
        (Some(1 | 58), min, max)
            if min.is_none_or(|v| (0..=255).contains(&v))
                && max.is_none_or(|v| (0..=255).contains(&v)) =>
        {
            Ok((
                min.and_then(|v| u16::try_from(v).ok()),
                max.and_then(|v| u16::try_from(v).ok()),
            ))
        }
        (Some(protocol), _, _) => {
            invalid(format!("a port range is not valid for protocol {protocol}"))
        }
    }
}

/// Checks a `remote_ip_prefix` against the rule's ethertype; IPv4 prefixes are normalised.
fn check_prefix(prefix: &str, ethertype: &str) -> Result<String, StateError> {
    if ethertype == "IPv4" {
        return prefix
            .parse::<Ipv4Net>()
            .map(|net| net.to_string())
            .map_err(|_| {
                StateError::Invalid(format!(
                    "remote_ip_prefix `{prefix}`: give an IPv4 prefix such as 10.1.2.1/32 (the ethertype is IPv4)"
                ))
            });
    }
    let (address, len) = prefix.split_once('/').unwrap_or((prefix, "128"));
    match (address.parse::<Ipv6Addr>(), len.parse::<u8>()) {
        (Ok(_), Ok(len)) if len <= 128 => Ok(prefix.to_owned()),
        _ => Err(StateError::Invalid(format!(
            "remote_ip_prefix `{prefix}`: give an IPv6 prefix (the ethertype is IPv6)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{t0, two_projects};
    use super::super::NewServer;
    use super::*;

    fn ssh_from(group: &str, prefix: &str) -> NewRule {
        NewRule {
            group_id: group.into(),
            direction: Some("ingress".into()),
            protocol: Some("tcp".into()),
            port_range_min: Some(22),
            port_range_max: Some(22),
            remote_ip_prefix: Some(prefix.into()),
            ..NewRule::default()
        }
    }

    #[test]
    fn an_identical_rule_is_refused_with_the_existing_rules_id() {
        let (mut state, a, _) = two_projects();
        let Ok(group) = state.create_group(&a, "web", "") else {
            panic!("refused")
        };
        let Ok(rule) = state.create_rule(&a, ssh_from(&group.id, "10.1.2.1/32")) else {
            panic!("refused")
        };
        assert_eq!(rule.ethertype, "IPv4");
        assert_eq!(
            state.create_rule(&a, ssh_from(&group.id, "10.1.2.1")),
            Err(StateError::RuleExists(rule.id.clone()))
        );
        let mut by_number = ssh_from(&group.id, "10.1.2.1/32");
        by_number.protocol = Some("6".into());
        assert_eq!(
            state.create_rule(&a, by_number),
            Err(StateError::RuleExists(rule.id))
        );
        assert!(state
            .create_rule(&a, ssh_from(&group.id, "10.1.2.0/24"))
            .is_ok());
    }

    #[test]
    fn rules_are_checked() {
        let (mut state, a, b) = two_projects();
        let Ok(group) = state.create_group(&a, "web", "") else {
            panic!("refused")
        };
        let b_group = state
            .project(&b)
            .map(|p| p.groups[0].id.clone())
            .unwrap_or_default();
        assert_eq!(
            state.create_rule(&a, ssh_from(&b_group, "10.0.0.1/32")),
            Err(StateError::GroupNotFound(b_group.clone()))
        );
        let mut remote_elsewhere = ssh_from(&group.id, "10.0.0.1/32");
        remote_elsewhere.remote_ip_prefix = None;
        remote_elsewhere.remote_group_id = Some(b_group.clone());
        assert_eq!(
            state.create_rule(&a, remote_elsewhere),
            Err(StateError::GroupNotFound(b_group))
        );
        let cases = [
            NewRule {
                direction: Some("sideways".into()),
                ..ssh_from(&group.id, "10.0.0.1")
            },
            NewRule {
                port_range_min: Some(30),
                ..ssh_from(&group.id, "10.0.0.1")
            },
            NewRule {
                port_range_max: None,
                ..ssh_from(&group.id, "10.0.0.1")
            },
            NewRule {
                protocol: None,
                ..ssh_from(&group.id, "10.0.0.1")
            },
            NewRule {
                remote_ip_prefix: Some("10.0.0/8".into()),
                ..ssh_from(&group.id, "")
            },
            NewRule {
                ethertype: Some("IPv6".into()),
                ..ssh_from(&group.id, "10.0.0.1")
            },
            NewRule {
                remote_group_id: Some(group.id.clone()),
                ..ssh_from(&group.id, "10.0.0.1")
            },
        ];
        for case in cases {
            assert!(
                matches!(
                    state.create_rule(&a, case.clone()),
                    Err(StateError::Invalid(_))
                ),
                "{case:?}"
            );
        }
    }

    #[test]
    fn a_group_in_use_or_the_default_group_is_kept() {
        let (mut state, a, _) = two_projects();
        let Ok(web) = state.create_group(&a, "web", "") else {
            panic!("refused")
        };
        let Ok(bastion) = state.create_group(&a, "bastion", "") else {
            panic!("refused")
        };
        let from_bastion = NewRule {
            remote_ip_prefix: None,
            remote_group_id: Some(bastion.id.clone()),
            ..ssh_from(&web.id, "")
        };
        assert!(state.create_rule(&a, from_bastion).is_ok());
        let server = NewServer {
            name: "web-1".into(),
            groups: vec!["web".into()],
            ..NewServer::default()
        };
        let Ok(server) = state.create_server(&a, server, t0()) else {
            panic!("refused")
        };
        assert_eq!(
            state.delete_group(&a, &web.id),
            Err(StateError::GroupInUse(web.id.clone()))
        );
        let default = state
            .groups(&a, Some("default"))
            .map(|g| g[0].id.clone())
            .unwrap_or_default();
        assert_eq!(
            state.delete_group(&a, &default),
            Err(StateError::DefaultGroup)
        );
        // Deleting a remote group takes the rules naming it along, as Neutron does.
        assert_eq!(state.delete_group(&a, &bastion.id), Ok(()));
        assert_eq!(state.rules(&a, None).map(|r| r.len()), Ok(0));
        assert!(state.remove_server(&a, server.id).is_ok());
        assert_eq!(state.delete_group(&a, &web.id), Ok(()));
    }
}
