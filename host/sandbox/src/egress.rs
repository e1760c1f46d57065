//! Where outbound HTTP may connect: the address classifier and address
//! ranges of the allow-list.
//!
//! Rules:
//! - An address is *internal* when it is loopback, private (RFC 1918,
//!   CGNAT 100.64/10, IPv6 ULA fc00::/7), link-local (169.254/16 with the
//!   cloud metadata address, fe80::/10), multicast, unspecified, broadcast,
//!   documentation, benchmarking or otherwise reserved — or an IPv6 form
//!   that embeds such an IPv4 address (mapped `::ffff:a.b.c.d`, compatible
//!   `::a.b.c.d`, NAT64 `64:ff9b::/96`, 6to4 `2002::/16`), or a tunnel
//!   (Teredo `2001::/32`) whose endpoint the host cannot judge.
//! - The host connects to an internal address only when the allow-list
//!   names that address or a range holding it ([`IpRange`]), for the same
//!   scheme and port. A host name in the allow-list never makes the
//!   addresses it resolves to reachable by itself.
//! - Addresses are compared in canonical form: an IPv4-mapped IPv6 address
//!   is its IPv4 address.

use std::{
    fmt,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
};

/// Why `ip` is internal (e.g. `"loopback"`), or `None` for a public address.
///
/// ```
/// use boxcar_sandbox::internal_address;
/// assert_eq!(internal_address("127.0.0.1".parse().unwrap()), Some("loopback"));
/// assert_eq!(internal_address("::ffff:169.254.169.254".parse().unwrap()), Some("link-local"));
/// assert_eq!(internal_address("93.184.215.14".parse().unwrap()), None);
/// ```
pub fn internal_address(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => internal_v4(v4),
        IpAddr::V6(v6) => internal_v6(v6),
    }
}

fn internal_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    let why = if ip.is_unspecified() || a == 0 {
        "unspecified (0.0.0.0/8)"
    } else if ip.is_loopback() {
        "loopback"
    } else if a == 10 || (a == 172 && (16..32).contains(&b)) || (a == 192 && b == 168) {
        "private"
    } else if a == 100 && (64..128).contains(&b) {
        "shared address space (CGNAT 100.64.0.0/10)"
    } else if ip.is_link_local() {
        "link-local"
    } else if ip.is_broadcast() {
        "broadcast"
    } else if ip.is_multicast() {
        "multicast"
    } else if (a == 192 && b == 0 && c == 2)
        || (a == 198 && b == 51 && c == 100)
        || (a == 203 && b == 0 && c == 113)
    {
        "documentation"
    } else if a == 198 && (b == 18 || b == 19) {
        "benchmarking (198.18.0.0/15)"
    } else if a == 192 && b == 0 && c == 0 {
        "IETF protocol assignments (192.0.0.0/24)"
    } else if a >= 240 {
        "reserved (240.0.0.0/4)"
    } else {
        return None;
    };
    Some(why)
}

fn internal_v6(ip: Ipv6Addr) -> Option<&'static str> {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return internal_v4(v4);
    }
    let s = ip.segments();
    let embedded = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    let why = if ip.is_unspecified() {
        "unspecified"
    } else if ip.is_loopback() {
        "loopback"
    } else if s[..6] == [0; 6] {
        // IPv4-compatible `::a.b.c.d` (deprecated): never a real destination.
        return Some(internal_v4(embedded(s[6], s[7])).unwrap_or("IPv4-compatible (::/96)"));
    } else if s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0; 4] {
        return internal_v4(embedded(s[6], s[7]));
    } else if s[0] == 0x2002 {
        return internal_v4(embedded(s[1], s[2]));
    } else if s[0] & 0xfe00 == 0xfc00 {
        "unique local (fc00::/7)"
    } else if s[0] & 0xffc0 == 0xfe80 {
        "link-local"
    } else if s[0] & 0xffc0 == 0xfec0 {
        "site-local (fec0::/10)"
    } else if s[0] & 0xff00 == 0xff00 {
        "multicast"
    } else if (s[0] == 0x2001 && s[1] == 0x0db8) || (s[0] == 0x3fff && s[1] & 0xf000 == 0) {
        "documentation"
    } else if s[0] == 0x2001 && s[1] == 0 {
        "Teredo tunnel (2001::/32)"
    } else if s[0] == 0x0100 && s[1..4] == [0; 3] {
        "discard-only (100::/64)"
    } else {
        return None;
    };
    Some(why)
}

/// `ip` with an IPv4-mapped IPv6 address turned into its IPv4 address.
pub(crate) fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 @ IpAddr::V4(_) => v4,
    }
}

/// An address or an address range (`10.0.0.0/8`, `fd00::/8`) named in the
/// allow-list.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct IpRange {
    base: IpAddr,
    prefix: u8,
}

impl IpRange {
    /// One address.
    pub(crate) fn single(ip: IpAddr) -> Self {
        let ip = canonical(ip);
        let prefix = if ip.is_ipv4() { 32 } else { 128 };
        Self { base: ip, prefix }
    }

    /// `address/prefix`; host bits must be zero.
    pub(crate) fn parse(addr: &str, prefix: &str) -> Result<Self, &'static str> {
        let ip: IpAddr = addr.parse().map_err(|_| "has an invalid IP address")?;
        let ip = canonical(ip);
        let max = if ip.is_ipv4() { 32 } else { 128 };
        let prefix: u8 = match prefix.parse() {
            Ok(p) if p <= max && !prefix.starts_with('+') => p,
            _ => return Err("has a range prefix that is not 0..=32 (IPv4) or 0..=128 (IPv6)"),
        };
        let range = Self { base: ip, prefix };
        if range.masked(ip) != bits(ip) {
            return Err(
                "has a range with host bits set (write the network address, e.g. 10.0.0.0/8)",
            );
        }
        Ok(range)
    }

    fn masked(&self, ip: IpAddr) -> u128 {
        let width = if ip.is_ipv4() { 32 } else { 128 };
        let shift = width - u32::from(self.prefix);
        if shift >= 128 {
            0
        } else {
            (bits(ip) >> shift) << shift
        }
    }

    /// True when `ip` (in canonical form) lies in the range.
    pub(crate) fn contains(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        ip.is_ipv4() == self.base.is_ipv4() && self.masked(ip) == self.masked(self.base)
    }

    /// True when the range is one address.
    pub(crate) fn is_single(&self) -> bool {
        self.prefix == if self.base.is_ipv4() { 32 } else { 128 }
    }
}

fn bits(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

impl fmt::Display for IpRange {
    /// `1.2.3.4`, `10.0.0.0/8`, `[::1]`, `[fd00::/8]` (as in a URL authority).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.base, self.is_single()) {
            (IpAddr::V4(ip), true) => write!(f, "{ip}"),
            (IpAddr::V4(ip), false) => write!(f, "{ip}/{}", self.prefix),
            (IpAddr::V6(ip), true) => write!(f, "[{ip}]"),
            (IpAddr::V6(ip), false) => write!(f, "[{ip}/{}]", self.prefix),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::IpRange;

    #[test]
    fn ranges_parse_and_contain() {
        let r = IpRange::parse("10.0.0.0", "8").expect("parses");
        assert!(r.contains("10.200.0.1".parse().expect("ip")));
        assert!(r.contains("::ffff:10.1.2.3".parse().expect("ip")));
        assert!(!r.contains("11.0.0.1".parse().expect("ip")));
        assert_eq!(r.to_string(), "10.0.0.0/8");
        let all = IpRange::parse("0.0.0.0", "0").expect("parses");
        assert!(all.contains("203.0.113.9".parse().expect("ip")));
        assert!(!all.contains("::1".parse().expect("ip")));
        let v6 = IpRange::parse("fd00::", "8").expect("parses");
        assert!(v6.contains("fd12::1".parse().expect("ip")));
        assert_eq!(v6.to_string(), "[fd00::/8]");
        for (addr, prefix) in [
            ("10.0.0.1", "8"),
            ("10.0.0.0", "33"),
            ("fd00::", "129"),
            ("x", "8"),
        ] {
            assert!(IpRange::parse(addr, prefix).is_err(), "{addr}/{prefix}");
        }
    }
}
