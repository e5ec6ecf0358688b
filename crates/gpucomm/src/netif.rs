//! Which local address the TCP transport listens on, and whether the store
//! binds one address or all of them (rules in [`crate::env`], *Which
//! addresses listen*).

use std::ffi::CStr;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6};

use crate::env::SocketIfname;

/// One address of a network interface that is up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Iface {
    pub name: String,
    pub ip: IpAddr,
    pub loopback: bool,
}

/// Whether `host` (the host part of a `host:port`, IPv6 in brackets) is an
/// IP literal; the store binds exactly that address then, and every
/// interface for a name. An IPv6 zone (`[fe80::1%eth0]`) is allowed and
/// not part of the address returned.
pub(crate) fn ip_literal(host: &str) -> Option<IpAddr> {
    split_literal(host).map(|(ip, _)| ip)
}

/// An IP literal host split into its address and its IPv6 zone (scope):
/// `10.0.0.1`, `[fd00::1]`, `[fe80::1%eth0]` (an interface name) or
/// `[fe80::1%4]` (an interface index); brackets optional for IPv6. `None`
/// for a host name, or a zone no interface could have.
pub(crate) fn split_literal(host: &str) -> Option<(IpAddr, Option<&str>)> {
    let h = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if let Ok(v4) = h.parse::<Ipv4Addr>() {
        return Some((IpAddr::V4(v4), None));
    }
    let (a, zone) = match h.split_once('%') {
        Some((a, z)) => (a, Some(z)),
        None => (h, None),
    };
    let v6: Ipv6Addr = a.parse().ok()?;
    if zone.is_some_and(|z| z.parse::<u32>().is_err() && !valid_ifname(z)) {
        return None;
    }
    Some((IpAddr::V6(v6), zone))
}

/// A name Linux could give an interface: 1 to 15 bytes (IFNAMSIZ with its
/// NUL), no `/`, `:`, `%`, `,` or white space, not `.` or `..`.
pub(crate) fn valid_ifname(name: &str) -> bool {
    !name.contains(':') && valid_if_label(name)
}

/// A name `getifaddrs` reports an address under: an interface name
/// ([`valid_ifname`]), or an IPv4 alias label (`eth0:1`), which
/// `NCCL_SOCKET_IFNAME` matches as well.
pub(crate) fn valid_if_label(name: &str) -> bool {
    !name.is_empty()
        && name.len() < 16
        && name != "."
        && name != ".."
        && !name.contains(|c: char| c.is_whitespace() || matches!(c, '/' | '%' | ','))
}

/// The socket address of the IP literal `host` (see [`split_literal`]) and
/// `port`, an IPv6 zone resolved to this host's interface index; `None` for
/// a host name.
pub(crate) fn literal_addr(host: &str, port: u16) -> std::io::Result<Option<SocketAddr>> {
    let Some((ip, zone)) = split_literal(host) else {
        return Ok(None);
    };
    Ok(Some(match (ip, zone) {
        (IpAddr::V6(v6), Some(zone)) => {
            SocketAddr::V6(SocketAddrV6::new(v6, port, 0, scope_id(zone)?))
        }
        _ => SocketAddr::new(ip, port),
    }))
}

/// The interface index an IPv6 zone names (`4`, or `eth0`).
#[allow(unsafe_code)] // if_nametoindex: the interface index of a name
fn scope_id(zone: &str) -> std::io::Result<u32> {
    if let Ok(index) = zone.parse::<u32>() {
        return Ok(index);
    }
    let missing = || {
        std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("the IPv6 zone %{zone} names no network interface of this host"),
        )
    };
    let name = std::ffi::CString::new(zone).map_err(|_| missing())?;
    // SAFETY: `name` is a NUL-terminated string that outlives the call;
    // if_nametoindex only reads it and returns 0 when there is no such
    // interface.
    match unsafe { libc::if_nametoindex(name.as_ptr()) } {
        0 => Err(missing()),
        index => Ok(index),
    }
}

/// Every address `addr` (`host:port`) stands for, in the resolver's order:
/// an IP literal as given (with its zone), a name as resolved.
pub(crate) fn resolve(addr: &str) -> std::io::Result<Vec<SocketAddr>> {
    let bad = || {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "expected host:port with a port from 0 to 65535",
        )
    };
    let (host, port) = addr.rsplit_once(':').ok_or_else(bad)?;
    let port: u16 = port.parse().map_err(|_| bad())?;
    if let Some(sa) = literal_addr(host, port)? {
        return Ok(vec![sa]);
    }
    Ok(std::net::ToSocketAddrs::to_socket_addrs(addr)?.collect())
}

/// `ip` (chosen for a data listener) as a socket address to bind, port 0:
/// an IPv6 link-local address needs a scope, the one of `local` (this
/// rank's store connection, on the same link) when that is the same
/// address.
pub(crate) fn bind_addr(ip: IpAddr, local: Option<SocketAddr>) -> SocketAddr {
    match (ip, local) {
        (IpAddr::V6(v6), Some(SocketAddr::V6(l))) if *l.ip() == v6 => {
            SocketAddr::V6(SocketAddrV6::new(v6, 0, 0, l.scope_id()))
        }
        _ => SocketAddr::new(ip, 0),
    }
}

/// A peer's published data address as this rank connects to it: a scope
/// id is a host's own interface index, so a link-local address takes this
/// rank's own scope (`local`: its store connection's address, on the link
/// the job uses) rather than the publisher's.
pub(crate) fn peer_addr(mut peer: SocketAddr, local: Option<SocketAddr>) -> SocketAddr {
    if let (SocketAddr::V6(p), Some(SocketAddr::V6(l))) = (&mut peer, local)
        && is_link_local(p.ip())
        && l.scope_id() != 0
    {
        p.set_scope_id(l.scope_id());
    }
    peer
}

fn is_link_local(a: &Ipv6Addr) -> bool {
    (a.segments()[0] & 0xffc0) == 0xfe80
}

/// An address a peer on another host can be given: not IPv6 link-local
/// (which needs a scope id) and not unspecified.
fn usable(ip: &IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => !a.is_unspecified(),
        IpAddr::V6(a) => !a.is_unspecified() && !is_link_local(a),
    }
}

/// The first usable address among `ifaces` that `pick` accepts, IPv4 first.
fn first(ifaces: &[Iface], pick: impl Fn(&Iface) -> bool) -> Option<IpAddr> {
    let ok = |i: &&Iface| pick(i) && usable(&i.ip);
    ifaces
        .iter()
        .filter(ok)
        .find(|i| i.ip.is_ipv4())
        .or_else(|| ifaces.iter().find(ok))
        .map(|i| i.ip)
}

/// The IP the data listener binds and publishes.
///
/// `store_local` is the local address of this rank's store connection,
/// `store_host` the host part of the store address, `ifname`
/// `GPUCOMM_SOCKET_IFNAME`; `ifaces` lists this host's interfaces (asked
/// only when needed).
pub(crate) fn data_ip(
    store_local: IpAddr,
    store_host: &str,
    ifname: Option<&SocketIfname>,
    ifaces: impl FnOnce() -> std::io::Result<Vec<Iface>>,
) -> Result<IpAddr, String> {
    if let Some(spec) = ifname {
        let all = ifaces().map_err(|e| format!("listing network interfaces: {e}"))?;
        return first(&all, |i| spec.matches(&i.name)).ok_or_else(|| {
            let mut names: Vec<&str> = all.iter().map(|i| i.name.as_str()).collect();
            names.dedup();
            format!(
                "GPUCOMM_SOCKET_IFNAME={spec}: no interface that is up with a usable address \
                 matches it (this host has: {})",
                names.join(", ")
            )
        });
    }
    let local_job = ip_literal(store_host).is_some_and(|ip| ip.is_loopback());
    if !store_local.is_loopback() || local_job {
        return Ok(store_local);
    }
    // This rank reached the store over loopback, yet the store's host is a
    // name (or a routable IP of this host): ranks on other hosts need a
    // routable address. With none, the job can only be local anyway.
    let all = ifaces().unwrap_or_default();
    Ok(first(&all, |i| !i.loopback && !i.name.starts_with("docker")).unwrap_or(store_local))
}

/// This host's interface addresses, for interfaces that are up.
#[allow(unsafe_code)] // getifaddrs: the one way to list interface addresses
pub(crate) fn interfaces() -> std::io::Result<Vec<Iface>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: `head` is a valid out-pointer; on success getifaddrs stores
    // a list that is freed below with freeifaddrs, once.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let mut p = head;
    while !p.is_null() {
        // SAFETY: `p` is a node of the list getifaddrs returned, not yet
        // freed; its fields are valid for as long as the list is.
        let ifa = unsafe { &*p };
        p = ifa.ifa_next;
        let up = ifa.ifa_flags & libc::IFF_UP as libc::c_uint != 0;
        if ifa.ifa_addr.is_null() || ifa.ifa_name.is_null() || !up {
            continue;
        }
        // SAFETY: `ifa_addr` is non-null and points to a sockaddr whose
        // family says which sockaddr_* it is; those are read only for the
        // two families matched, whose structures the kernel filled.
        let ip = unsafe {
            match (*ifa.ifa_addr).sa_family as libc::c_int {
                libc::AF_INET => {
                    let sin = &*(ifa.ifa_addr as *const libc::sockaddr_in);
                    IpAddr::V4(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)))
                }
                libc::AF_INET6 => {
                    let sin6 = &*(ifa.ifa_addr as *const libc::sockaddr_in6);
                    IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr))
                }
                _ => continue,
            }
        };
        // SAFETY: `ifa_name` is non-null and NUL-terminated.
        let name = unsafe { CStr::from_ptr(ifa.ifa_name) }
            .to_string_lossy()
            .into_owned();
        let loopback = ifa.ifa_flags & libc::IFF_LOOPBACK as libc::c_uint != 0;
        out.push(Iface { name, ip, loopback });
    }
    // SAFETY: `head` came from a successful getifaddrs and is freed once;
    // no reference into the list outlives this point.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iface(name: &str, ip: &str) -> Iface {
        let ip: IpAddr = ip.parse().unwrap();
        Iface {
            name: name.into(),
            loopback: ip.is_loopback(),
            ip,
        }
    }

    fn host() -> Vec<Iface> {
        vec![
            iface("lo", "127.0.0.1"),
            iface("lo", "::1"),
            iface("docker0", "172.17.0.1"),
            iface("eth0", "fe80::1"),
            iface("eth0", "fd00::2"),
            iface("eth0", "192.0.2.2"),
            iface("ib0", "10.1.0.2"),
        ]
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn never() -> std::io::Result<Vec<Iface>> {
        panic!("interfaces listed although not needed")
    }

    #[test]
    fn the_store_connection_address_wins_when_routable() {
        let got = data_ip(ip("192.0.2.2"), "node7", None, never).unwrap();
        assert_eq!(got, ip("192.0.2.2"));
    }

    #[test]
    fn a_local_job_keeps_loopback() {
        for host in ["127.0.0.1", "[::1]", "127.0.1.1"] {
            let local = if host.contains(':') { "::1" } else { host };
            let got = data_ip(ip(local), host, None, never).unwrap();
            assert_eq!(got, ip(local), "{host}");
        }
    }

    #[test]
    fn loopback_to_a_named_store_takes_a_routable_interface() {
        // Debian's `127.0.1.1 <hostname>`: rank 0's own store connection is
        // loopback; peers elsewhere need eth0's IPv4 (docker0 and IPv6
        // link-local skipped, IPv4 before IPv6).
        let got = data_ip(ip("127.0.1.1"), "node7", None, || Ok(host())).unwrap();
        assert_eq!(got, ip("192.0.2.2"));
        let v6only: Vec<Iface> = host().into_iter().filter(|i| i.ip.is_ipv6()).collect();
        let got = data_ip(ip("127.0.1.1"), "node7", None, || Ok(v6only)).unwrap();
        assert_eq!(got, ip("fd00::2"));
        // Nothing routable (or the list failing): loopback, a local job.
        let got = data_ip(ip("127.0.0.1"), "node7", None, || {
            Ok(vec![iface("lo", "127.0.0.1")])
        })
        .unwrap();
        assert_eq!(got, ip("127.0.0.1"));
        let got = data_ip(ip("127.0.0.1"), "node7", None, || {
            Err(std::io::Error::other("no netlink"))
        })
        .unwrap();
        assert_eq!(got, ip("127.0.0.1"));
    }

    fn spec(s: &str) -> SocketIfname {
        s.parse().unwrap()
    }

    #[test]
    fn socket_ifname_chooses_and_explains() {
        let got = data_ip(ip("192.0.2.2"), "node7", Some(&spec("ib")), || Ok(host())).unwrap();
        assert_eq!(got, ip("10.1.0.2"));
        // A prefix list in the host's order; an exact name.
        let got = data_ip(ip("192.0.2.2"), "n", Some(&spec("docker, eth")), || {
            Ok(host())
        })
        .unwrap();
        assert_eq!(got, ip("172.17.0.1"));
        let got = data_ip(ip("127.0.0.1"), "127.0.0.1", Some(&spec("=eth0")), || {
            Ok(host())
        })
        .unwrap();
        assert_eq!(got, ip("192.0.2.2"));
        let e = data_ip(ip("192.0.2.2"), "n", Some(&spec("=eth")), || Ok(host())).unwrap_err();
        assert!(e.contains("lo, docker0, eth0, ib0"), "{e}");
        assert!(e.contains("GPUCOMM_SOCKET_IFNAME==eth:"), "{e}");
    }

    /// NCCL's `^` excludes: `^docker,lo` takes eth0 (it found no
    /// interface: "^docker" was a prefix), `^=` exact names to exclude.
    #[test]
    fn socket_ifname_excludes() {
        let got = data_ip(ip("127.0.0.1"), "n", Some(&spec("^docker,lo")), || {
            Ok(host())
        })
        .unwrap();
        assert_eq!(got, ip("192.0.2.2"));
        let got = data_ip(
            ip("127.0.0.1"),
            "n",
            Some(&spec("^=lo,=docker0,=eth0")),
            || Ok(host()),
        )
        .unwrap();
        assert_eq!(got, ip("10.1.0.2"));
    }

    #[test]
    fn ip_literals_and_names() {
        assert_eq!(ip_literal("10.0.0.1"), Some(ip("10.0.0.1")));
        assert_eq!(ip_literal("[fe80::1]"), Some(ip("fe80::1")));
        assert_eq!(ip_literal("node7"), None);
        assert_eq!(ip_literal("localhost"), None);
    }

    #[test]
    fn ipv6_zones_are_kept_and_resolved() {
        assert_eq!(
            split_literal("[fe80::1%eth0]"),
            Some((ip("fe80::1"), Some("eth0")))
        );
        assert_eq!(
            split_literal("[fe80::1%4]"),
            Some((ip("fe80::1"), Some("4")))
        );
        assert_eq!(ip_literal("[fe80::1%eth0]"), Some(ip("fe80::1")));
        for bad in [
            "[fe80::1%]",
            "[fe80::1%a/b]",
            "[fe80::1%x%y]",
            "node7",
            "[x]",
        ] {
            assert_eq!(split_literal(bad), None, "{bad}");
        }
        let sa = |s: &str| s.parse::<SocketAddr>().unwrap();
        // An index as given; a name as this host numbers it (lo exists).
        assert_eq!(
            literal_addr("[fe80::1%4]", 7).unwrap(),
            Some(sa("[fe80::1%4]:7"))
        );
        let lo = literal_addr("[fe80::1%lo]", 7).unwrap().unwrap();
        assert!(matches!(lo, SocketAddr::V6(a) if a.scope_id() > 0), "{lo}");
        let e = literal_addr("[fe80::1%nosuch0]", 7).unwrap_err();
        assert!(e.to_string().contains("%nosuch0"), "{e}");
        assert_eq!(literal_addr("node7", 7).unwrap(), None);
        assert_eq!(resolve("[fe80::1%3]:9").unwrap(), [sa("[fe80::1%3]:9")]);
        assert_eq!(resolve("10.0.0.1:9").unwrap(), [sa("10.0.0.1:9")]);
        // The data listener binds a link-local address with the store
        // connection's scope; a peer's link-local address takes this host's.
        assert_eq!(
            bind_addr(ip("fe80::1"), Some(sa("[fe80::1%3]:5"))),
            sa("[fe80::1%3]:0")
        );
        assert_eq!(bind_addr(ip("10.0.0.1"), None), sa("10.0.0.1:0"));
        assert_eq!(
            peer_addr(sa("[fe80::2%7]:9"), Some(sa("[fe80::1%3]:5"))),
            sa("[fe80::2%3]:9")
        );
        assert_eq!(
            peer_addr(sa("[fd00::2]:9"), Some(sa("[fe80::1%3]:5"))),
            sa("[fd00::2]:9")
        );
    }

    #[test]
    fn this_host_lists_its_loopback() {
        let all = interfaces().unwrap();
        assert!(
            all.iter().any(|i| i.loopback && i.ip.is_loopback()),
            "{all:?}"
        );
    }
}
