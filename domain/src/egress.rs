//! Where a networked step may connect besides what its deployment needs: a [`Destination`], as
//! a blueprint declares it under `egress:` (`ADDRESS`, `ADDRESS:PORT` or `ADDRESS/PREFIX`) and
//! as a step attempt's network policy lists it.
//!
//! How much of the engine host's loopback a step may reach is the engine operator's choice
//! ([`LoopbackEgress`]), applied to each wanted destination by where it came from ([`Origin`]):
//! [`LoopbackEgress::admits`] decides what enters an attempt's policy, and
//! [`LoopbackEgress::refusal`] why a step's own target is not in it, so that the attempt fails at
//! once as `egress-refused` instead of timing out against the firewall.

use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;

/// One allowed destination: an IPv4 network and, optionally, one TCP port on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Destination {
    /// The network's first address.
    pub address: Ipv4Addr,
    /// The prefix length, 32 for one address.
    pub prefix: u8,
    /// When set, only TCP to this port; otherwise anything.
    pub port: Option<u16>,
}

/// Why a destination cannot be allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DestinationError {
    /// Not `ADDRESS`, `ADDRESS:PORT` or `ADDRESS/PREFIX` with an IPv4 address.
    #[error("{given:?} is not an IPv4 address, ADDRESS:PORT or ADDRESS/PREFIX")]
    Malformed {
        /// What was given.
        given: String,
    },
    /// The prefix is over 32 or the address has bits beyond it.
    #[error("{given:?} is not a network: the prefix is over 32 or the address has host bits set")]
    NotANetwork {
        /// What was given.
        given: String,
    },
    /// It lies in 169.254.0.0/16, where clouds serve instance metadata.
    #[error("{given:?} is link-local (169.254.0.0/16, cloud metadata), which no step may reach")]
    LinkLocal {
        /// What was given.
        given: String,
    },
    /// It is on the loopback network but not `127.0.0.1:PORT`.
    #[error(
        "{given:?} is on the host's loopback: only one port of 127.0.0.1 at a time \
         (127.0.0.1:PORT) can be allowed"
    )]
    Loopback {
        /// What was given.
        given: String,
    },
    /// Port 0 names no service.
    #[error("{given:?} has port 0")]
    PortZero {
        /// What was given.
        given: String,
    },
}

impl Destination {
    /// One TCP port of one address.
    pub fn tcp(address: Ipv4Addr, port: u16) -> Self {
        Self {
            address,
            prefix: 32,
            port: Some(port),
        }
    }

    /// Whether this is a port on the host's loopback, which pasta forwards.
    pub fn is_loopback(&self) -> bool {
        self.address.is_loopback()
    }

    /// Checks it is a destination a step may be allowed.
    pub fn check(&self) -> Result<(), DestinationError> {
        let given = self.to_string();
        if self.prefix > 32 || u32::from(self.address) & !mask(self.prefix) != 0 {
            return Err(DestinationError::NotANetwork { given });
        }
        if self.port == Some(0) {
            return Err(DestinationError::PortZero { given });
        }
        // A network that contains or lies within 169.254.0.0/16.
        let link_local = Ipv4Addr::new(169, 254, 0, 0);
        let shorter = self.prefix.min(16);
        if u32::from(self.address) & mask(shorter) == u32::from(link_local) & mask(shorter) {
            return Err(DestinationError::LinkLocal { given });
        }
        let loopback = Ipv4Addr::new(127, 0, 0, 0);
        let shorter = self.prefix.min(8);
        if u32::from(self.address) & mask(shorter) == u32::from(loopback) & mask(shorter)
            && !(self.address == Ipv4Addr::LOCALHOST && self.prefix == 32 && self.port.is_some())
        {
            return Err(DestinationError::Loopback { given });
        }
        Ok(())
    }
}

impl FromStr for Destination {
    type Err = DestinationError;

    /// Reads `ADDRESS`, `ADDRESS:PORT` or `ADDRESS/PREFIX`, and checks it.
    fn from_str(given: &str) -> Result<Self, Self::Err> {
        let malformed = || DestinationError::Malformed {
            given: given.to_owned(),
        };
        let destination = if let Some((address, prefix)) = given.split_once('/') {
            Destination {
                address: address.parse().map_err(|_| malformed())?,
                prefix: prefix.parse().map_err(|_| malformed())?,
                port: None,
            }
        } else if let Some((address, port)) = given.split_once(':') {
            Destination {
                address: address.parse().map_err(|_| malformed())?,
                prefix: 32,
                port: Some(port.parse().map_err(|_| malformed())?),
            }
        } else {
            Destination {
                address: given.parse().map_err(|_| malformed())?,
                prefix: 32,
                port: None,
            }
        };
        destination.check()?;
        Ok(destination)
    }
}

impl fmt::Display for Destination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.prefix, self.port) {
            (32, Some(port)) => write!(f, "{}:{port}", self.address),
            (32, None) => write!(f, "{}", self.address),
            (prefix, Some(port)) => write!(f, "{}/{prefix} port {port}", self.address),
            (prefix, None) => write!(f, "{}/{prefix}", self.address),
        }
    }
}

impl Destination {
    /// Whether a TCP connection to `address:port` falls within it.
    pub fn covers(&self, address: Ipv4Addr, port: u16) -> bool {
        let mask = mask(self.prefix);
        u32::from(address) & mask == u32::from(self.address) & mask
            && self.port.is_none_or(|allowed| allowed == port)
    }
}

/// How much of the engine host's loopback the engine's operator lets steps reach. Link-local
/// addresses (169.254.0.0/16) are never reachable, whatever it says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LoopbackEgress {
    /// Nothing of it but the cloud endpoints of the deployment's token: an API engine's default
    /// (`overture serve`), whose tenants must not read the host's own services.
    #[default]
    Refused,
    /// The `127.0.0.1:PORT` entries the blueprint declares under `egress:`, and nothing else of
    /// it (`overture serve --allow-loopback-egress`).
    Declared,
    /// The declared entries and the step's own targets there (its `url`, its hosts): the
    /// operator's own commands (`overture deploy`, `engine`, `resume`, ...), whose blueprints are
    /// the operator's and whose user may open the loopback anyway.
    Operator,
}

/// Where a destination an attempt wants came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// The identity URL and service catalog of the deployment's token: the cloud's, checked by
    /// the engine before the deployment was recorded.
    Cloud,
    /// The blueprint's `egress:`.
    Declared,
    /// Anything else the blueprint names or its steps made: the step's `url` and hosts, the
    /// bastion, the deployment's servers.
    Target,
}

/// Why a step may not connect to one of its own targets.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EgressRefusal {
    /// The target is link-local, where clouds serve instance metadata.
    #[error(
        "{target} is link-local (169.254.0.0/16, where clouds serve instance metadata), \
         which no step may reach"
    )]
    LinkLocal {
        /// The target, as `host:port` and the address it resolved to.
        target: String,
    },
    /// The target is on the host's loopback, and the engine's operator lets no step reach it.
    #[error(
        "{target} is on the engine host's loopback, which this engine lets no step reach \
         (its operator can allow declared ports with `overture serve --allow-loopback-egress`)"
    )]
    LoopbackNotAllowed {
        /// The target.
        target: String,
    },
    /// The target is a port of the host's loopback that the blueprint does not declare.
    #[error(
        "{target} is on the engine host's loopback and not declared under the blueprint's \
         `egress:`; declare \"127.0.0.1:{port}\" there to reach it"
    )]
    LoopbackNotDeclared {
        /// The target.
        target: String,
        /// Its port.
        port: u16,
    },
    /// The target is on the host's loopback but not `127.0.0.1`, whose ports alone can be
    /// reached.
    #[error(
        "{target} is on the engine host's loopback, of which only 127.0.0.1:PORT can be reached"
    )]
    LoopbackAddress {
        /// The target.
        target: String,
    },
    /// The target is IPv6, which a step's network namespace does not have.
    #[error("{target} is an IPv6 address; steps reach IPv4 destinations only")]
    Ipv6 {
        /// The target.
        target: String,
    },
    /// The target is outside the attempt's policy for another reason.
    #[error("{target} is not among the destinations the step may reach")]
    NotAllowed {
        /// The target.
        target: String,
    },
}

impl LoopbackEgress {
    /// Whether a destination wanted from `origin` enters an attempt's policy: never one that
    /// fails [`Destination::check`] (link-local, a loopback other than `127.0.0.1:PORT`); one on
    /// the host's loopback only as this setting allows for its origin; any other one always.
    pub fn admits(self, destination: &Destination, origin: Origin) -> bool {
        if destination.check().is_err() {
            return false;
        }
        if !destination.is_loopback() {
            return true;
        }
        match origin {
            Origin::Cloud => true,
            Origin::Declared => self != LoopbackEgress::Refused,
            Origin::Target => self == LoopbackEgress::Operator,
        }
    }

    /// Why a step may not open a TCP connection to `address:port`, one of its own targets, when
    /// its attempt's policy is `allowed`; `None` when it may. `target` names it in the answer
    /// (`localhost:8080 (127.0.0.1)`).
    pub fn refusal(
        self,
        target: &str,
        address: Ipv4Addr,
        port: u16,
        allowed: &[Destination],
    ) -> Option<EgressRefusal> {
        if allowed
            .iter()
            .any(|destination| destination.covers(address, port))
        {
            return None;
        }
        let target = target.to_owned();
        Some(if address.is_link_local() {
            EgressRefusal::LinkLocal { target }
        } else if !address.is_loopback() {
            EgressRefusal::NotAllowed { target }
        } else if address != Ipv4Addr::LOCALHOST {
            EgressRefusal::LoopbackAddress { target }
        } else if self == LoopbackEgress::Refused {
            EgressRefusal::LoopbackNotAllowed { target }
        } else {
            EgressRefusal::LoopbackNotDeclared { target, port }
        })
    }
}

fn mask(prefix: u8) -> u32 {
    u32::MAX
        .checked_shl(32 - u32::from(prefix.min(32)))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destinations_read_as_written() {
        let cases = [
            ("10.0.0.5:22", "10.0.0.5:22"),
            ("10.0.0.0/24", "10.0.0.0/24"),
            ("192.0.2.7", "192.0.2.7"),
            ("127.0.0.1:5000", "127.0.0.1:5000"),
        ];
        for (given, shown) in cases {
            let destination: Destination = given.parse().expect(given);
            assert_eq!(destination.to_string(), shown);
        }
    }

    #[test]
    fn metadata_loopback_and_malformed_destinations_are_refused() {
        for (given, expected) in [
            ("169.254.169.254", "link-local"),
            ("169.254.169.254:80", "link-local"),
            ("169.0.0.0/8", "link-local"),
            ("0.0.0.0/0", "link-local"),
            ("127.0.0.1", "loopback"),
            ("127.0.0.0/8", "loopback"),
            ("127.0.0.2:80", "loopback"),
            ("10.0.0.1/24", "not a network"),
            ("10.0.0.0/33", "not a network"),
            ("10.0.0.1:0", "port 0"),
            ("example.com:80", "not an IPv4"),
            ("10.0.0.1:x", "not an IPv4"),
        ] {
            let error = given.parse::<Destination>().expect_err(given).to_string();
            assert!(error.contains(expected), "{given}: {error}");
        }
    }
}
