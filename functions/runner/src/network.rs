//! A networked step attempt's network policy: the only destinations its sandbox may reach.
//!
//! - the cloud endpoints of the deployment's token: the identity URL it was checked against and
//!   the public endpoints of its service catalog (Nova, Neutron, ... wherever the cloud serves
//!   them; the local cloud serves all at the identity URL's address),
//! - the deployment's own servers (the addresses its `servers` steps made) and its bastion,
//! - the step's own targets (its hosts, its URL),
//! - what the blueprint declares under `egress:`.
//!
//! Everything else, the host's loopback and link-local addresses among it, is refused inside
//! the step's network namespace (see the sandbox). Of the host's loopback, only what the
//! engine's operator allows enters the policy ([`LoopbackEgress`]). Host names are resolved
//! here, by the engine, when the attempt starts. [`refused_target`] finds a target of the step
//! that the policy leaves out, so the attempt fails at once, before its sandbox runs.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};

use overture_domain::egress::{Destination, EgressRefusal, LoopbackEgress, Origin};
use overture_domain::kind::{self, Kind, StepKind};

use crate::step::StepInput;

/// The port a URL names, or its scheme's.
fn url_host_port(url: &str) -> Option<(String, u16)> {
    let (scheme, rest) = url.split_once("://")?;
    let default = match scheme.to_ascii_lowercase().as_str() {
        "http" => 80,
        "https" => 443,
        _ => return None,
    };
    let authority = rest.split(['/', '?', '#']).next()?;
    // Leave out any `user:password@`.
    let authority = authority.rsplit('@').next()?;
    if authority.starts_with('[') {
        // IPv6: the policy allows IPv4 only.
        return None;
    }
    match authority.rsplit_once(':') {
        Some((host, port)) => Some((host.to_owned(), port.parse().ok()?)),
        None => Some((authority.to_owned(), default)),
    }
}

/// The host and port of a catalog endpoint recorded as `host:port`; none for an IPv6 one
/// (`[::1]:5000`), as the policy allows IPv4 only.
fn host_port(endpoint: &str) -> Option<(String, u16)> {
    let (host, port) = endpoint.rsplit_once(':')?;
    if host.is_empty() || host.starts_with('[') {
        return None;
    }
    Some((host.to_owned(), port.parse().ok()?))
}

/// Where the attempt of `input` may connect, resolved and sorted, with as much of the host's
/// loopback as `loopback` allows. A target that cannot be resolved is left out: connecting to
/// it would fail anyway, and the step says so.
pub async fn policy(input: &StepInput<'_>, loopback: LoopbackEgress) -> Vec<Destination> {
    let mut wanted: Vec<(String, Option<u16>, Origin)> = Vec::new();
    if let Some(cloud) = &input.state.cloud {
        if let Some((host, port)) = url_host_port(&cloud.auth_url) {
            wanted.push((host, Some(port), Origin::Cloud));
        }
        // Recorded as `host:port` when the token was checked.
        wanted.extend(
            cloud
                .endpoints
                .iter()
                .filter_map(|endpoint| host_port(endpoint))
                .map(|(host, port)| (host, Some(port), Origin::Cloud)),
        );
    }
    let jump = input.bastion().ok().flatten();
    if let Some(jump) = &jump {
        wanted.push((
            jump.address.host.clone(),
            Some(jump.address.port),
            Origin::Target,
        ));
    }
    // The check of a service the step provides connects to each host's service port, unless
    // it goes through the bastion.
    if let (Some(provides), None) = (&input.spec.provides, &jump) {
        if let Ok(hosts) = input.ssh_addresses() {
            wanted.extend(
                hosts
                    .into_iter()
                    .map(|host| (host.host, Some(provides.port), Origin::Target)),
            );
        }
    }
    wanted.extend(
        own_targets(input)
            .into_iter()
            .map(|(host, port)| (host, Some(port), Origin::Target)),
    );
    let mut allowed: BTreeSet<Destination> = BTreeSet::new();
    for (host, port, origin) in wanted {
        for address in resolve(&host).await {
            let destination = match port {
                Some(port) => Destination::tcp(address, port),
                None => Destination {
                    address,
                    prefix: 32,
                    port: None,
                },
            };
            if loopback.admits(&destination, origin) {
                allowed.insert(destination);
            }
        }
    }
    allowed.extend(
        own_servers(input)
            .into_iter()
            .filter(|destination| loopback.admits(destination, Origin::Target)),
    );
    if let Some(blueprint) = &input.state.blueprint {
        // Checked when the blueprint was read.
        allowed.extend(
            blueprint
                .egress
                .iter()
                .filter_map(|entry| entry.parse::<Destination>().ok())
                .filter(|destination| loopback.admits(destination, Origin::Declared)),
        );
    }
    allowed.into_iter().collect()
}

/// The step's own targets as `(host, port)`: its hosts (wait-ssh, ansible) and its `url`
/// (http). A kind without any has none.
fn own_targets(input: &StepInput<'_>) -> Vec<(String, u16)> {
    let mut targets: Vec<(String, u16)> = input
        .ssh_addresses()
        .map(|hosts| {
            hosts
                .into_iter()
                .map(|host| (host.host, host.port))
                .collect()
        })
        .unwrap_or_default();
    if let Some(url) = http_url(input) {
        if let Some(target) = input.render(&url).ok().as_deref().and_then(url_host_port) {
            targets.push(target);
        }
    }
    targets
}

/// The URL an `http` step calls, as written.
fn http_url(input: &StepInput<'_>) -> Option<String> {
    match input.kind() {
        Ok(StepKind::Http(settings)) => Some(settings.url),
        _ => None,
    }
}

/// The first target the step itself connects to that `allowed` leaves out, and why: a step
/// that names one would otherwise meet the namespace's firewall, and read as an unreachable
/// backend. Targets reached through the bastion are the bastion's to connect, not the
/// sandbox's, so a step that goes through one is checked for nothing here. A target whose
/// name does not resolve is left to the step, which says so.
pub async fn refused_target(
    input: &StepInput<'_>,
    allowed: &[Destination],
    loopback: LoopbackEgress,
) -> Option<EgressRefusal> {
    if input.bastion().ok().flatten().is_some() {
        return None;
    }
    if let Some(url) = http_url(input) {
        if let Some(host) = input.render(&url).ok().as_deref().and_then(ipv6_url_host) {
            return Some(EgressRefusal::Ipv6 {
                target: format!("the URL's host {host}"),
            });
        }
    }
    for (host, port) in own_targets(input) {
        for address in resolve(&host).await {
            let target = if host == address.to_string() {
                format!("{host}:{port}")
            } else {
                format!("{host}:{port} ({address})")
            };
            if let Some(refusal) = loopback.refusal(&target, address, port, allowed) {
                return Some(refusal);
            }
        }
    }
    None
}

/// The bracketed IPv6 host of an `http(s)://` URL (`[::1]`), if it has one.
fn ipv6_url_host(url: &str) -> Option<&str> {
    let (_, rest) = url.split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority.rsplit('@').next()?;
    let end = authority.find(']')?;
    authority.starts_with('[').then(|| &authority[..=end])
}

/// The addresses the deployment's own `servers` steps reported: made by the engine in the
/// tenant's cloud, so no step can name another tenant's server here.
fn own_servers(input: &StepInput<'_>) -> Vec<Destination> {
    let Some(blueprint) = &input.state.blueprint else {
        return vec![];
    };
    blueprint
        .steps
        .iter()
        .filter(|step| kind::is(step, Kind::Servers))
        .filter_map(|step| input.state.steps.get(&step.name))
        .flat_map(|state| state.outputs.values())
        .filter_map(|value| value.parse::<Ipv4Addr>().ok())
        .map(|address| Destination {
            address,
            prefix: 32,
            port: None,
        })
        .filter(|destination| destination.check().is_ok())
        .collect()
}

/// The IPv4 addresses of `host`: itself if it is one, the loopback for `localhost`, otherwise
/// what the resolver says.
async fn resolve(host: &str) -> Vec<Ipv4Addr> {
    if let Ok(address) = host.parse::<Ipv4Addr>() {
        return vec![address];
    }
    if host.eq_ignore_ascii_case("localhost") {
        return vec![Ipv4Addr::LOCALHOST];
    }
    match tokio::net::lookup_host((host, 0)).await {
        Ok(addresses) => addresses
            .filter_map(|address| match address.ip() {
                IpAddr::V4(v4) => Some(v4),
                IpAddr::V6(_) => None,
            })
            .collect(),
        Err(_) => vec![],
    }
}

#[cfg(test)]
mod tests {
    use overture_domain::blueprint::parse;
    use overture_domain::Deployment;
    use overture_events::CloudAccount;

    use super::*;
    use crate::testing::{input, key_secrets, requested, succeeded};

    const BLUEPRINT: &str = r#"
name: cluster
bastion:
  host: "{{ steps.servers.outputs.bastion }}"
  security_group: sg-1
egress: ["10.20.0.0/16", "127.0.0.1:8500"]
hosts:
  web: ["{{ steps.servers.outputs.web-1 }}"]
steps:
  servers:
    run: servers
    with:
      security_groups: { bastion: [] }
      servers: { bastion: { security_groups: [bastion], role: bastion }, web-1: { security_groups: [bastion] } }
  wait:
    run: wait-ssh
    needs: [servers]
    with: { hosts: web }
  check:
    run: http
    with: { url: "http://127.0.0.1:9100/health" }
  build:
    run: script
    with: { command: "true" }
"#;

    /// The blueprint requested on tenant-b's cloud (Keystone on the loopback), whose token's
    /// catalog lists `endpoints`.
    fn on_tenant_b_cloud(
        blueprint: &str,
        endpoints: Vec<String>,
    ) -> overture_domain::DeploymentState {
        let blueprint = parse(blueprint).expect("valid").snapshot;
        let mut state = requested(&blueprint, &[]);
        state.cloud = Some(CloudAccount {
            auth_url: "http://127.0.0.1:5000/identity/v3".into(),
            project_id: "p1".into(),
            project: "tenant-b".into(),
            domain: "Default".into(),
            user: "tenant-b".into(),
            endpoints,
        });
        state
    }

    fn shown(destinations: &[Destination]) -> Vec<String> {
        destinations.iter().map(ToString::to_string).collect()
    }

    #[tokio::test]
    async fn a_step_may_reach_its_cloud_servers_bastion_targets_and_declared_egress() {
        let state = on_tenant_b_cloud(BLUEPRINT, vec![]);
        let state = Deployment::apply(
            state,
            succeeded(
                "servers",
                &[
                    ("bastion", "10.9.0.3"),
                    ("web-1", "10.9.0.4"),
                    ("security-group-bastion", "sg-1"),
                ],
            ),
        );
        let secrets = key_secrets();

        let wait = policy(&input(&state, "wait", &secrets), LoopbackEgress::Operator).await;
        assert_eq!(
            shown(&wait),
            [
                "10.9.0.3",
                "10.9.0.3:22",
                "10.9.0.4",
                "10.9.0.4:22",
                "10.20.0.0/16",
                "127.0.0.1:5000",
                "127.0.0.1:8500",
            ]
        );
        let check = policy(&input(&state, "check", &secrets), LoopbackEgress::Operator).await;
        assert!(
            shown(&check).contains(&"127.0.0.1:9100".to_owned()),
            "{check:?}"
        );
        // Nothing else of the host's loopback, and never the metadata service.
        assert!(check
            .iter()
            .all(|d| !d.is_loopback() || [5000, 8500, 9100].contains(&d.port.unwrap_or(0))));
        assert!(check.iter().all(|d| d.address.octets()[..2] != [169, 254]));
    }

    #[tokio::test]
    async fn a_step_may_reach_every_endpoint_of_its_tokens_catalog_and_no_other_port() {
        // Keystone on the loopback, Nova on another port of it, Neutron on its own host.
        let state = on_tenant_b_cloud(
            BLUEPRINT,
            vec![
                "127.0.0.1:5000".into(),
                "127.0.0.1:8774".into(),
                "192.0.2.7:9696".into(),
                "localhost:9292".into(),
                "[::1]:8776".into(),
            ],
        );
        let secrets = key_secrets();

        let build = policy(&input(&state, "build", &secrets), LoopbackEgress::Operator).await;
        assert_eq!(
            shown(&build),
            [
                "10.20.0.0/16",
                "127.0.0.1:5000",
                "127.0.0.1:8500",
                "127.0.0.1:8774",
                "127.0.0.1:9292",
                "192.0.2.7:9696",
            ],
            "the catalog's endpoints, by port; an IPv6 one is left out"
        );
    }

    /// The blueprint's state with a cloud on the loopback, as the local cloud serves it.
    fn with_cloud_on_loopback(blueprint: &str) -> overture_domain::DeploymentState {
        on_tenant_b_cloud(blueprint, vec!["127.0.0.1:8774".into()])
    }

    #[tokio::test]
    async fn of_the_hosts_loopback_a_step_reaches_its_clouds_endpoints_and_what_the_operator_allows(
    ) {
        let state = with_cloud_on_loopback(BLUEPRINT);
        let secrets = key_secrets();
        let check = input(&state, "check", &secrets);
        let loopback = |policy: Vec<Destination>| -> Vec<String> {
            shown(&policy)
                .into_iter()
                .filter(|d| d.starts_with("127."))
                .collect()
        };

        assert_eq!(
            loopback(policy(&check, LoopbackEgress::Refused).await),
            ["127.0.0.1:5000", "127.0.0.1:8774"],
            "an API tenant: the cloud's endpoints only"
        );
        assert_eq!(
            loopback(policy(&check, LoopbackEgress::Declared).await),
            ["127.0.0.1:5000", "127.0.0.1:8500", "127.0.0.1:8774"],
            "allowed by the operator: what the blueprint declares, not the step's own URL"
        );
        assert_eq!(
            loopback(policy(&check, LoopbackEgress::Operator).await),
            [
                "127.0.0.1:5000",
                "127.0.0.1:8500",
                "127.0.0.1:8774",
                "127.0.0.1:9100"
            ],
            "the operator's own run: its URL too"
        );
    }

    #[tokio::test]
    async fn a_target_outside_the_policy_is_named_with_why_before_anything_runs() {
        let state = with_cloud_on_loopback(
            r#"
name: probes
egress: ["127.0.0.1:8500"]
steps:
  host-service: { run: http, with: { url: "http://localhost:9100/" } }
  declared: { run: http, with: { url: "http://127.0.0.1:8500/v1/kv" } }
  metadata: { run: http, with: { url: "http://169.254.169.254/latest/meta-data/" } }
  cloud: { run: http, with: { url: "http://127.0.0.1:5000/identity/v3" } }
  other-loopback: { run: http, with: { url: "http://127.0.0.2:8500/" } }
  ipv6: { run: http, with: { url: "http://[::1]:9100/" } }
  ssh: { run: wait-ssh, with: { hosts: ["127.0.0.1:2222"] } }
"#,
        );
        let secrets = key_secrets();
        let refusal = |step: &'static str, loopback: LoopbackEgress| {
            let state = &state;
            let secrets = &secrets;
            async move {
                let input = input(state, step, secrets);
                let allowed = policy(&input, loopback).await;
                refused_target(&input, &allowed, loopback).await
            }
        };

        assert_eq!(
            refusal("host-service", LoopbackEgress::Refused).await,
            Some(EgressRefusal::LoopbackNotAllowed {
                target: "localhost:9100 (127.0.0.1)".into()
            })
        );
        assert_eq!(
            refusal("host-service", LoopbackEgress::Declared).await,
            Some(EgressRefusal::LoopbackNotDeclared {
                target: "localhost:9100 (127.0.0.1)".into(),
                port: 9100
            })
        );
        assert_eq!(
            refusal("host-service", LoopbackEgress::Operator).await,
            None
        );
        assert_eq!(
            refusal("declared", LoopbackEgress::Refused).await,
            Some(EgressRefusal::LoopbackNotAllowed {
                target: "127.0.0.1:8500".into()
            })
        );
        assert_eq!(refusal("declared", LoopbackEgress::Declared).await, None);
        assert_eq!(refusal("cloud", LoopbackEgress::Refused).await, None);
        for loopback in [
            LoopbackEgress::Refused,
            LoopbackEgress::Declared,
            LoopbackEgress::Operator,
        ] {
            assert_eq!(
                refusal("metadata", loopback).await,
                Some(EgressRefusal::LinkLocal {
                    target: "169.254.169.254:80".into()
                }),
                "{loopback:?}"
            );
            assert!(
                matches!(
                    refusal("other-loopback", loopback).await,
                    Some(EgressRefusal::LoopbackAddress { .. })
                ),
                "{loopback:?}"
            );
            assert_eq!(
                refusal("ipv6", loopback).await,
                Some(EgressRefusal::Ipv6 {
                    target: "the URL's host [::1]".into()
                })
            );
        }
        assert_eq!(
            refusal("ssh", LoopbackEgress::Refused).await,
            Some(EgressRefusal::LoopbackNotAllowed {
                target: "127.0.0.1:2222".into()
            }),
            "the same policy for every networked kind"
        );
    }

    #[test]
    fn catalog_endpoints_give_their_host_and_port() {
        assert_eq!(
            host_port("nova.example.com:8774"),
            Some(("nova.example.com".into(), 8774))
        );
        assert_eq!(host_port("[::1]:8774"), None);
        assert_eq!(host_port("no-port"), None);
        assert_eq!(host_port(":80"), None);
    }

    #[test]
    fn urls_give_their_host_and_port() {
        assert_eq!(
            url_host_port("http://127.0.0.1:5000/v3"),
            Some(("127.0.0.1".into(), 5000))
        );
        assert_eq!(
            url_host_port("https://cloud.example.com/identity"),
            Some(("cloud.example.com".into(), 443))
        );
        assert_eq!(
            url_host_port("http://u:p@10.0.0.1?x"),
            Some(("10.0.0.1".into(), 80))
        );
        assert_eq!(url_host_port("ftp://10.0.0.1/"), None);
    }
}
