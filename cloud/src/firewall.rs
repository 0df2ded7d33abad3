//! Security groups as nftables: what one server admits, decided from the project's state, and
//! the nft script that replaces the server's table in one transaction.
//!
//! Each server's namespace has its own table `inet overture` whose input chain drops incoming TCP
//! except on loopback, for established connections, and for what the server's groups admit.
//! Other protocols pass: only TCP rules are enforced. An `unreachable` fault turns the chain into
//! "reject everything", ahead of the established-connections rule so open connections break too.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::net::Ipv4Addr;

use crate::cidr::Ipv4Net;
use crate::state::{Project, Server, State};

/// The name of the table the cloud owns in each server's namespace.
pub const TABLE: &str = "overture";

/// What a server's firewall lets in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Firewall {
    /// An unreachable fault: refuse every packet, open connections included.
    pub refuse_all: bool,
    /// The TCP connections admitted; everything else TCP is dropped.
    pub admit: Vec<Admission>,
}

/// One admitted kind of TCP connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admission {
    /// Where it may come from.
    pub from: Sources,
    /// Which ports it may reach (inclusive); none: every port.
    pub ports: Option<(u16, u16)>,
}

/// The sources of an admitted connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sources {
    /// Any address.
    Anywhere,
    /// A prefix.
    Prefix(Ipv4Net),
    /// The addresses of a group's servers.
    Addresses(BTreeSet<Ipv4Addr>),
}

/// What `server` admits under its project's groups and rules (and faults).
pub fn decide(state: &State, project: &Project, server: &Server) -> Firewall {
    if server.unreachable {
        return Firewall {
            refuse_all: true,
            admit: Vec::new(),
        };
    }
    let admit = project
        .rules
        .iter()
        .filter(|rule| server.groups.contains(&rule.group_id) && rule.admits_tcp())
        .filter_map(|rule| {
            let from = match (&rule.remote_group_id, &rule.remote_ip_prefix) {
                (Some(group), _) => {
                    let members: BTreeSet<Ipv4Addr> = project
                        .servers
                        .iter()
                        .filter(|s| s.groups.contains(group))
                        .map(|s| state.server_address(project, s))
                        .collect();
                    // An empty group admits no one; nft has no empty anonymous sets.
                    if members.is_empty() {
                        return None;
                    }
                    Sources::Addresses(members)
                }
                (None, Some(prefix)) => match prefix.parse::<Ipv4Net>() {
                    Ok(net) if net.len() == 0 => Sources::Anywhere,
                    Ok(net) => Sources::Prefix(net),
                    // Stored prefixes were checked; one that does not parse admits no one.
                    Err(_) => return None,
                },
                (None, None) => Sources::Anywhere,
            };
            let ports = match (rule.port_range_min, rule.port_range_max) {
                (Some(min), Some(max)) => Some((min, max)),
                _ => None,
            };
            Some(Admission { from, ports })
        })
        .collect();
    Firewall {
        refuse_all: false,
        admit,
    }
}

/// The nft script that atomically replaces the server's table with `firewall`.
pub fn render(firewall: &Firewall) -> String {
    // Declaring the table first makes the delete succeed on the first run too; nft applies the
    // whole script as one transaction, so no packet ever sees an empty or half-built table.
    let mut script = format!(
        "table inet {TABLE}\ndelete table inet {TABLE}\ntable inet {TABLE} {{\n\tchain input {{\n\t\ttype filter hook input priority filter; policy accept;\n\t\tiif \"lo\" accept\n"
    );
    if firewall.refuse_all {
        script.push_str("\t\tmeta l4proto tcp reject with tcp reset\n");
        script.push_str("\t\treject with icmpx host-unreachable\n");
    } else {
        script.push_str("\t\tct state established,related accept\n");
        for admission in &firewall.admit {
            script.push_str("\t\t");
            match &admission.from {
                Sources::Anywhere => {}
                Sources::Prefix(net) => {
                    let _ = write!(script, "ip saddr {net} ");
                }
                Sources::Addresses(addresses) => {
                    let list = addresses
                        .iter()
                        .map(Ipv4Addr::to_string)
                        .collect::<Vec<_>>()
                        .join(", ");
                    let _ = write!(script, "ip saddr {{ {list} }} ");
                }
            }
            match admission.ports {
                Some((min, max)) if min == max => {
                    let _ = write!(script, "tcp dport {min} ");
                }
                Some((min, max)) => {
                    let _ = write!(script, "tcp dport {min}-{max} ");
                }
                None => script.push_str("meta l4proto tcp "),
            }
            script.push_str("accept\n");
        }
        script.push_str("\t\tmeta l4proto tcp drop\n");
    }
    script.push_str("\t}\n}\n");
    script
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::test_support::{t0, two_projects};
    use crate::state::{NewRule, NewServer};

    fn rule(
        group: &str,
        prefix: Option<&str>,
        remote: Option<&str>,
        ports: Option<(i64, i64)>,
    ) -> NewRule {
        NewRule {
            group_id: group.into(),
            direction: Some("ingress".into()),
            protocol: Some("tcp".into()),
            port_range_min: ports.map(|p| p.0),
            port_range_max: ports.map(|p| p.1),
            remote_ip_prefix: prefix.map(Into::into),
            remote_group_id: remote.map(Into::into),
            ..NewRule::default()
        }
    }

    #[test]
    fn a_server_admits_what_its_groups_rules_say_from_the_groups_members() {
        let (mut state, a, _) = two_projects();
        let (Ok(bastion), Ok(web)) = (
            state.create_group(&a, "bastion", ""),
            state.create_group(&a, "web", ""),
        ) else {
            panic!("refused")
        };
        let rules = [
            rule(&bastion.id, Some("10.77.1.1/32"), None, Some((22, 22))),
            rule(&web.id, None, Some(&bastion.id), Some((22, 22))),
            rule(&web.id, None, None, Some((8000, 8080))),
            NewRule {
                direction: Some("egress".into()),
                ..rule(&web.id, Some("10.0.0.0/8"), None, None)
            },
            NewRule {
                protocol: Some("udp".into()),
                ..rule(&web.id, Some("10.0.0.0/8"), None, Some((53, 53)))
            },
        ];
        for new in rules {
            assert!(state.create_rule(&a, new).is_ok());
        }
        let server = |name: &str, group: &str| NewServer {
            name: name.into(),
            groups: vec![group.into()],
            ..NewServer::default()
        };
        let (Ok(b), Ok(w)) = (
            state.create_server(&a, server("bastion", "bastion"), t0()),
            state.create_server(&a, server("web", "web"), t0()),
        ) else {
            panic!("refused")
        };
        let Ok(project) = state.project(&a) else {
            panic!("no project")
        };
        assert_eq!(
            render(&decide(&state, project, &b)),
            "table inet overture\ndelete table inet overture\ntable inet overture {\n\tchain input {\n\t\ttype filter hook input priority filter; policy accept;\n\t\tiif \"lo\" accept\n\t\tct state established,related accept\n\t\tip saddr 10.77.1.1/32 tcp dport 22 accept\n\t\tmeta l4proto tcp drop\n\t}\n}\n"
        );
        let web_rules = render(&decide(&state, project, &w));
        assert!(
            web_rules.contains("\t\tip saddr { 10.77.1.2 } tcp dport 22 accept\n"),
            "{web_rules}"
        );
        assert!(
            web_rules.contains("\t\ttcp dport 8000-8080 accept\n"),
            "{web_rules}"
        );
        assert_eq!(web_rules.matches("accept\n").count(), 4, "{web_rules}");
    }

    #[test]
    fn an_unreachable_server_rejects_everything_even_open_connections() {
        let (mut state, a, _) = two_projects();
        let new = NewServer {
            name: "x".into(),
            ..NewServer::default()
        };
        assert!(state.create_server(&a, new, t0()).is_ok());
        assert!(state.make_unreachable(&a, "x").is_ok());
        let Ok(project) = state.project(&a) else {
            panic!("no project")
        };
        let script = render(&decide(&state, project, &project.servers[0]));
        assert!(script.contains("iif \"lo\" accept\n\t\tmeta l4proto tcp reject with tcp reset\n\t\treject with icmpx host-unreachable\n\t}"), "{script}");
        assert!(!script.contains("established"));
    }
}
