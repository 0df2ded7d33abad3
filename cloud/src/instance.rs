//! One cloud instance's identity on the host: a random 4-hex id that prefixes every name it
//! creates, and a /16 of 10.0.0.0/8 that no address, route or other running cloud uses.
//!
//! Several clouds run at once (each test has its own), so the choice is made under an `flock`
//! on `REGISTRY/lock`, and recorded in a claim file `REGISTRY/ID.claim` that the instance keeps
//! locked while it lives. A claim whose lock is free belongs to a dead instance: its network is
//! free again (its leftovers, if any, show as addresses), but its id stays taken until its
//! clean-up removes the claim, so that a late clean-up never touches a newer instance's links.
//! A dead claim with neither leftovers nor a journal to clean up from is forgotten.

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd as _;
use std::path::{Path, PathBuf};

use rand_core::{OsRng, RngCore};
use serde::{Deserialize, Serialize};

use crate::cidr::Ipv4Net;
use crate::journal::{Journal, Resource};
use crate::network;
use crate::CloudError;

/// Where clouds register by default.
pub const DEFAULT_REGISTRY: &str = "/run/overture-cloud";

/// A claimed instance: its names and network, held while the value lives.
#[derive(Debug)]
pub struct Instance {
    /// The names it gives what it creates.
    pub names: Names,
    /// Its /16.
    pub network: Ipv4Net,
    /// Holds the claim's lock.
    _claim: File,
}

/// How an instance names its namespaces and links (at most 15 characters, the kernel's limit).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Names {
    id: String,
}

impl Names {
    /// The names of instance `id`.
    pub fn new(id: &str) -> Self {
        Self { id: id.to_owned() }
    }

    /// The instance id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// A project's bridge.
    pub fn bridge(&self, index: u8) -> String {
        format!("ovc{}b{index}", self.id)
    }

    /// A server's namespace.
    pub fn namespace(&self, slot: u32) -> String {
        format!("ovc{}s{slot}", self.id)
    }

    /// The host end of a server's veth pair.
    pub fn veth(&self, slot: u32) -> String {
        format!("ovc{}v{slot}", self.id)
    }

    /// The instance id a name made by [`Names`] carries, if any.
    pub fn owner_of(name: &str) -> Option<&str> {
        let id = name.strip_prefix("ovc")?.get(..4)?;
        id.chars().all(|c| c.is_ascii_hexdigit()).then_some(id)
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct Claim {
    id: String,
    network: String,
    dir: PathBuf,
}

/// Picks a free id and /16 and claims them; the claim is journalled before it is written.
/// Blocking: waits for the registry lock and runs `ip`.
pub fn claim(registry: &Path, journal: &Journal, dir: &Path) -> Result<Instance, CloudError> {
    let registry_error = |source: std::io::Error| CloudError::Registry {
        path: registry.to_owned(),
        source,
    };
    std::fs::create_dir_all(registry).map_err(registry_error)?;
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(registry.join("lock"))
        .map_err(registry_error)?;
    flock(&lock, libc::LOCK_EX).map_err(registry_error)?;

    // Ids in use: those in the names of existing namespaces and links, and live claims'.
    let namespaces = network::list_namespaces().run_blocking()?;
    let links = network::list_links().run_blocking()?;
    let mut taken_ids: Vec<String> = namespaces
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .chain(links.lines().filter_map(|line| {
            line.split(':')
                .nth(1)
                .map(|name| name.trim().split('@').next().unwrap_or(""))
        }))
        .filter_map(Names::owner_of)
        .map(str::to_owned)
        .collect();
    let addresses = network::list_addresses().run_blocking()?;
    let routes = network::list_routes().run_blocking()?;
    let mut taken_networks: Vec<Ipv4Net> = network::host_prefixes(&addresses, &routes)
        .into_iter()
        .filter(|prefix| prefix.len() > 0)
        .collect();
    for entry in std::fs::read_dir(registry).map_err(registry_error)? {
        let path = entry.map_err(registry_error)?.path();
        if path.extension().and_then(|e| e.to_str()) != Some("claim") {
            continue;
        }
        let Some(claim) = std::fs::read_to_string(&path)
            .ok()
            .and_then(|text| serde_json::from_str::<Claim>(&text).ok())
        else {
            continue;
        };
        let alive = File::open(&path)
            .map(|file| flock(&file, libc::LOCK_SH | libc::LOCK_NB).is_err())
            .unwrap_or(false);
        if alive {
            if let Ok(network) = claim.network.parse() {
                taken_networks.push(network);
            }
        } else if !taken_ids.contains(&claim.id) && !claim.dir.join("journal").exists() {
            // A dead instance that left nothing behind, not even a journal to clean up from
            // (its directory is gone, say): its claim is forgotten.
            let _ = std::fs::remove_file(&path);
            continue;
        }
        taken_ids.push(claim.id);
    }

    let id = (0..10_000)
        .map(|_| format!("{:04x}", OsRng.next_u32() & 0xffff))
        .find(|id| !taken_ids.contains(id))
        .ok_or(CloudError::NoInstanceId)?;
    let start = OsRng.next_u32() % 254;
    let network = (0..254u32)
        .filter_map(|offset| u8::try_from((start + offset) % 254 + 1).ok())
        .filter_map(|second| Ipv4Net::new(Ipv4Addr::new(10, second, 0, 0), 16).ok())
        .find(|candidate| !taken_networks.iter().any(|t| t.overlaps(candidate)))
        .ok_or(CloudError::NoNetwork)?;

    let path = registry.join(format!("{id}.claim"));
    journal.creating(&Resource::Claim { path: path.clone() })?;
    let mut file = OpenOptions::new()
        .create_new(true)
        .write(true)
        .open(&path)
        .map_err(registry_error)?;
    flock(&file, libc::LOCK_EX | libc::LOCK_NB).map_err(registry_error)?;
    let claim = Claim {
        id: id.clone(),
        network: network.to_string(),
        dir: dir.to_owned(),
    };
    let text = serde_json::to_string(&claim).map_err(|e| registry_error(e.into()))?;
    file.write_all(text.as_bytes()).map_err(registry_error)?;
    drop(lock);
    Ok(Instance {
        names: Names::new(&id),
        network,
        _claim: file,
    })
}

/// `flock(2)` on an open file.
pub(crate) fn flock(file: &File, operation: libc::c_int) -> std::io::Result<()> {
    // SAFETY: flock(2) takes a file descriptor that `file` keeps open, and an integer.
    if unsafe { libc::flock(file.as_raw_fd(), operation) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fit_the_kernel_limit_and_tell_their_owner() {
        let names = Names::new("ab12");
        for name in [
            names.bridge(254),
            names.veth(9_999_999),
            names.namespace(42),
        ] {
            assert!(name.len() <= 15, "{name}");
            assert_eq!(Names::owner_of(&name), Some("ab12"));
        }
        assert_eq!(Names::owner_of("eth0"), None);
        assert_eq!(Names::owner_of("ovcxyzzb1"), None);
    }
}
