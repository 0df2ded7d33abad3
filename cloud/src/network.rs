//! The host's network plumbing, through `ip` and `nft`: per-project bridges, per-server namespaces
//! and veth pairs, and each namespace's firewall. Every resource is written to the journal
//! *before* it is created, so a clean-up after a crash finds it.
//!
//! Nothing here touches what the cloud did not create: no sysctl, no forwarding, no host firewall.

use std::net::Ipv4Addr;

use crate::command::{CommandError, Invocation};
use crate::journal::{Journal, JournalError, Resource};
use crate::process::ProcessId;

/// A network step that failed.
#[derive(Debug, thiserror::Error)]
pub enum NetworkError {
    /// A command failed.
    #[error(transparent)]
    Command(#[from] CommandError),
    /// The journal could not record the resource, so it was not created.
    #[error(transparent)]
    Journal(#[from] JournalError),
}

/// The name of a server's interface inside its namespace.
pub const SERVER_INTERFACE: &str = "eth0";

/// `ip netns add NAME`.
pub fn add_namespace(name: &str) -> Invocation {
    Invocation::new("ip", ["netns", "add", name])
}

/// `ip netns delete NAME`.
pub fn delete_namespace(name: &str) -> Invocation {
    Invocation::new("ip", ["netns", "delete", name])
}

/// `ip netns pids NAME`: the processes in the namespace.
pub fn namespace_pids(name: &str) -> Invocation {
    Invocation::new("ip", ["netns", "pids", name])
}

/// `ip netns list`.
pub fn list_namespaces() -> Invocation {
    Invocation::new("ip", ["netns", "list"])
}

/// `ip -o link show`: one line per link.
pub fn list_links() -> Invocation {
    Invocation::new("ip", ["-o", "link", "show"])
}

/// `ip -4 -o addr show`: the host's IPv4 addresses.
pub fn list_addresses() -> Invocation {
    Invocation::new("ip", ["-4", "-o", "addr", "show"])
}

/// `ip -4 -o route show table all`: the host's IPv4 routes, every table.
pub fn list_routes() -> Invocation {
    Invocation::new("ip", ["-4", "-o", "route", "show", "table", "all"])
}

/// `ip link delete NAME` (a bridge, or either end of a veth pair, which takes both).
pub fn delete_link(name: &str) -> Invocation {
    Invocation::new("ip", ["link", "delete", name])
}

/// Runs `nft -f -` with `script` inside the namespace.
pub fn load_firewall(namespace: &str, script: String) -> Invocation {
    Invocation::new("ip", ["netns", "exec", namespace, "nft", "-f", "-"]).with_stdin(script)
}

/// Creates a project's bridge with the host's address on it.
pub async fn create_bridge(
    journal: &Journal,
    bridge: &str,
    gateway: Ipv4Addr,
    prefix_len: u8,
) -> Result<(), NetworkError> {
    journal.creating(&Resource::Link {
        name: bridge.to_owned(),
    })?;
    Invocation::new("ip", ["link", "add", bridge, "type", "bridge"])
        .run()
        .await?;
    Invocation::new(
        "ip",
        [
            "addr".to_owned(),
            "add".to_owned(),
            format!("{gateway}/{prefix_len}"),
            "dev".to_owned(),
            bridge.to_owned(),
        ],
    )
    .run()
    .await?;
    Invocation::new("ip", ["link", "set", bridge, "up"])
        .run()
        .await?;
    Ok(())
}

/// Creates a server's namespace with loopback up, and no other interface yet.
pub async fn create_namespace(journal: &Journal, namespace: &str) -> Result<(), NetworkError> {
    journal.creating(&Resource::Namespace {
        name: namespace.to_owned(),
    })?;
    add_namespace(namespace).run().await?;
    Invocation::new("ip", ["-n", namespace, "link", "set", "lo", "up"])
        .run()
        .await?;
    Ok(())
}

/// Plugs a namespace into a bridge: a veth pair whose far end is `eth0` inside, with `address`.
/// No default route: a server reaches only its project's network.
pub async fn wire(
    journal: &Journal,
    namespace: &str,
    veth: &str,
    bridge: &str,
    address: Ipv4Addr,
    prefix_len: u8,
) -> Result<(), NetworkError> {
    journal.creating(&Resource::Link {
        name: veth.to_owned(),
    })?;
    Invocation::new(
        "ip",
        [
            "link",
            "add",
            veth,
            "type",
            "veth",
            "peer",
            "name",
            SERVER_INTERFACE,
            "netns",
            namespace,
        ],
    )
    .run()
    .await?;
    Invocation::new("ip", ["link", "set", veth, "master", bridge, "up"])
        .run()
        .await?;
    Invocation::new(
        "ip",
        [
            "-n".to_owned(),
            namespace.to_owned(),
            "addr".to_owned(),
            "add".to_owned(),
            format!("{address}/{prefix_len}"),
            "dev".to_owned(),
            SERVER_INTERFACE.to_owned(),
        ],
    )
    .run()
    .await?;
    Invocation::new(
        "ip",
        ["-n", namespace, "link", "set", SERVER_INTERFACE, "up"],
    )
    .run()
    .await?;
    Ok(())
}

/// Removes a server's namespace: kills what still runs in it, deletes it and its veth pair.
pub async fn remove_namespace(
    journal: &Journal,
    namespace: &str,
    veth: &str,
) -> Result<(), NetworkError> {
    let pids = namespace_pids(namespace).run().await;
    let namespace_resource = Resource::Namespace {
        name: namespace.to_owned(),
    };
    let pids = match pids {
        Ok(pids) => pids,
        Err(error) if error.is_missing() => String::new(),
        Err(error) => return Err(error.into()),
    };
    // Usually empty: the server's processes died with its sshd's pid namespace.
    if !pids.trim().is_empty() {
        let _ = tokio::task::spawn_blocking(move || kill_listed(&pids)).await;
    }
    // Deleting the host end of the pair deletes `eth0` inside too.
    ignore_missing(delete_link(veth).run().await)?;
    journal.removed(&Resource::Link {
        name: veth.to_owned(),
    })?;
    ignore_missing(delete_namespace(namespace).run().await)?;
    journal.removed(&namespace_resource)?;
    Ok(())
}

/// Kills every process listed (one pid a line, as `ip netns pids` prints them). Only used on
/// namespaces of this instance: whatever runs in them belongs to one of its servers.
pub fn kill_listed(pids: &str) {
    for process in pids
        .lines()
        .filter_map(|line| line.trim().parse().ok())
        .filter_map(ProcessId::of)
    {
        process.kill(std::time::Duration::from_secs(2));
    }
}

/// Success for a command that failed only because its target was already gone.
pub fn ignore_missing(outcome: Result<String, CommandError>) -> Result<(), CommandError> {
    match outcome {
        Ok(_) => Ok(()),
        Err(error) if error.is_missing() => Ok(()),
        Err(error) => Err(error),
    }
}

/// The IPv4 prefixes named by `ip -4 -o addr show` and `ip -4 -o route show table all` output,
/// default routes left out (they overlap everything and take no address).
pub fn host_prefixes(addresses: &str, routes: &str) -> Vec<crate::cidr::Ipv4Net> {
    const ROUTE_TYPES: [&str; 10] = [
        "unicast",
        "local",
        "broadcast",
        "multicast",
        "throw",
        "unreachable",
        "prohibit",
        "blackhole",
        "nat",
        "anycast",
    ];
    let from_addresses = addresses.lines().filter_map(|line| {
        let mut words = line.split_whitespace();
        words.find(|w| *w == "inet")?;
        words.next()?.parse().ok()
    });
    let from_routes = routes.lines().filter_map(|line| {
        let mut words = line.split_whitespace().peekable();
        if words.peek().is_some_and(|w| ROUTE_TYPES.contains(w)) {
            words.next();
        }
        match words.next()? {
            "default" => None,
            prefix => prefix.parse().ok(),
        }
    });
    from_addresses.chain(from_routes).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_prefixes_come_from_addresses_and_every_route_but_the_default() {
        let addresses = "1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever\n4: eth0    inet 192.0.2.2/24 brd 192.0.2.255 scope global eth0\\       valid_lft forever\n";
        let routes = "default via 192.0.2.1 dev eth0 \n10.9.0.0/16 via 192.0.2.7 dev eth0\nlocal 127.0.0.0/8 dev lo table local proto kernel scope host src 127.0.0.1\nbroadcast 192.0.2.255 dev eth0 table local proto kernel scope link src 192.0.2.2\n";
        let found: Vec<String> = host_prefixes(addresses, routes)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            found,
            [
                "127.0.0.0/8",
                "192.0.2.0/24",
                "10.9.0.0/16",
                "127.0.0.0/8",
                "192.0.2.255/32"
            ]
        );
    }
}
