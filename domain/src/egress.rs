//! Where a networked step may connect besides what its deployment needs: a [`Destination`], as
//! a blueprint declares it under `egress:` (`ADDRESS`, `ADDRESS:PORT` or `ADDRESS/PREFIX`) and
//! as a step attempt's network policy lists it.

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
