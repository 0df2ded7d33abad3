//! IPv4 prefixes: security group rules' `remote_ip_prefix`, and the host's addresses and routes
//! when the cloud picks its network.

use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;

/// An IPv4 network, always normalised (no bits set past the prefix length).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ipv4Net {
    network: Ipv4Addr,
    len: u8,
}

/// Text that is not `a.b.c.d` or `a.b.c.d/len` with a length of at most 32.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not an IPv4 address or prefix (a.b.c.d or a.b.c.d/len)")]
pub struct BadPrefix(pub String);

impl Ipv4Net {
    /// The network holding `address` with `len` leading bits (host bits cleared).
    pub fn new(address: Ipv4Addr, len: u8) -> Result<Self, BadPrefix> {
        if len > 32 {
            return Err(BadPrefix(format!("{address}/{len}")));
        }
        Ok(Self {
            network: Ipv4Addr::from(u32::from(address) & mask(len)),
            len,
        })
    }

    /// The network address.
    pub fn network(&self) -> Ipv4Addr {
        self.network
    }

    /// The prefix length.
    pub fn len(&self) -> u8 {
        self.len
    }

    /// Whether the two networks share any address.
    pub fn overlaps(&self, other: &Ipv4Net) -> bool {
        let shorter = mask(self.len.min(other.len));
        u32::from(self.network) & shorter == u32::from(other.network) & shorter
    }
}

fn mask(len: u8) -> u32 {
    match len {
        0 => 0,
        len => u32::MAX << (32 - u32::from(len.min(32))),
    }
}

impl FromStr for Ipv4Net {
    type Err = BadPrefix;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = || BadPrefix(text.to_owned());
        let (address, len) = match text.split_once('/') {
            Some((address, len)) => (address, len.parse::<u8>().map_err(|_| bad())?),
            None => (text, 32),
        };
        let address: Ipv4Addr = address.parse().map_err(|_| bad())?;
        Self::new(address, len).map_err(|_| bad())
    }
}

impl fmt::Display for Ipv4Net {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(text: &str) -> Ipv4Net {
        text.parse().unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn prefixes_are_normalised_and_a_bare_address_is_a_host() {
        assert_eq!(net("10.1.2.3/24").to_string(), "10.1.2.0/24");
        assert_eq!(net("10.1.2.3").to_string(), "10.1.2.3/32");
        assert_eq!(net("0.0.0.0/0").to_string(), "0.0.0.0/0");
        for bad in ["10.1.2/24", "10.1.2.3/33", "10.1.2.3/", "fe80::1/64", "x"] {
            assert_eq!(bad.parse::<Ipv4Net>(), Err(BadPrefix(bad.into())));
        }
    }

    #[test]
    fn overlap() {
        assert!(net("10.0.0.0/8").overlaps(&net("10.7.0.0/16")));
        assert!(net("10.7.3.0/24").overlaps(&net("10.7.0.0/16")));
        assert!(!net("10.8.0.0/16").overlaps(&net("10.7.0.0/16")));
        assert!(net("0.0.0.0/0").overlaps(&net("10.7.0.0/16")));
    }
}
