//! The original destination of a redirected connection.
//!
//! nftables `redirect` (and `tproxy`) rewrite the destination of a connection to sluice's
//! transparent listener; conntrack remembers the address the client dialled, and the kernel
//! hands it back through `getsockopt(SOL_IP, SO_ORIGINAL_DST)` (IPv4) or
//! `getsockopt(SOL_IPV6, IP6T_SO_ORIGINAL_DST)` (IPv6). socket2 wraps both in a safe API, so
//! this crate keeps `#![forbid(unsafe_code)]`.

use std::io;
use std::net::{SocketAddr, SocketAddrV6};

/// Why the original destination could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OrigDstError {
    /// The kernel has no original destination for this socket (`ENOENT`: the connection was
    /// not redirected, or conntrack lost it) or refused the query.
    #[error("no original destination for this connection (was it redirected by nftables?)")]
    NotRedirected(#[source] io::Error),
    /// The kernel answered with something that is not an IP socket address.
    #[error("the original destination is not an IP socket address")]
    NotInet,
}

/// The address and port the client dialled before nftables redirected the connection to
/// `socket`. The family is the accepted socket's: an IPv6 listener asks the IPv6 table, and
/// an IPv4-mapped answer (`::ffff:a.b.c.d`) is returned as the IPv4 address it carries.
pub fn original_destination(socket: socket2::SockRef<'_>) -> Result<SocketAddr, OrigDstError> {
    let local = socket.local_addr().map_err(OrigDstError::NotRedirected)?;
    let raw = if local.is_ipv6() {
        // An IPv4 client on a dual-stack IPv6 listener is tracked by the IPv4 table.
        match socket.original_dst_v6() {
            Ok(a) => a,
            Err(_) => socket
                .original_dst_v4()
                .map_err(OrigDstError::NotRedirected)?,
        }
    } else {
        socket
            .original_dst_v4()
            .map_err(OrigDstError::NotRedirected)?
    };
    let addr = raw.as_socket().ok_or(OrigDstError::NotInet)?;
    Ok(canonical(addr))
}

/// `::ffff:a.b.c.d:p` as `a.b.c.d:p`; everything else unchanged.
pub fn canonical(addr: SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::from((v4, v6.port())),
            None => SocketAddr::V6(SocketAddrV6::new(*v6.ip(), v6.port(), 0, 0)),
        },
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    use super::*;
    use crate::transparent::testns::{in_fresh_netns, privileged};

    #[test]
    fn mapped_addresses_are_reported_as_ipv4() {
        let a: SocketAddr = "[::ffff:192.0.2.7]:443".parse().unwrap();
        assert_eq!(canonical(a), "192.0.2.7:443".parse().unwrap());
        let b: SocketAddr = "[2001:db8::7]:443".parse().unwrap();
        assert_eq!(canonical(b), b);
    }

    #[test]
    fn a_connection_that_was_not_redirected_has_no_original_destination() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        // Without a conntrack NAT entry the kernel says ENOENT, never the local address.
        let got = original_destination(socket2::SockRef::from(&s));
        assert!(
            matches!(got, Err(OrigDstError::NotRedirected(_))),
            "{got:?}"
        );
        drop(c);
    }

    /// In a fresh network namespace: a veth interface routes TEST-NET addresses, an
    /// nftables `redirect` sends TCP to port 80 to a local listener, and the listener reads
    /// the address the client dialled, for IPv4 and IPv6.
    #[test]
    fn redirected_connections_report_the_address_the_client_dialled() {
        if !privileged("redirected_connections_report_the_address_the_client_dialled") {
            return;
        }
        in_fresh_netns(|| {
            // A veth pair with both ends here: a route for the TEST-NET addresses, and nowhere
            // for a packet to go.
            crate::transparent::testns::run(&[
                "ip", "link", "add", "d0", "type", "veth", "peer", "name", "d1",
            ]);
            crate::transparent::testns::run(&["ip", "link", "set", "d0", "up"]);
            crate::transparent::testns::run(&["ip", "link", "set", "d1", "up"]);
            crate::transparent::testns::run(&["ip", "addr", "add", "192.0.2.1/24", "dev", "d0"]);
            crate::transparent::testns::run(&[
                "ip",
                "-6",
                "addr",
                "add",
                "2001:db8::1/64",
                "dev",
                "d0",
                "nodad",
            ]);
            let v4 = TcpListener::bind("127.0.0.1:0").unwrap();
            let port = v4.local_addr().unwrap().port();
            let v6 = TcpListener::bind(("::1", port)).unwrap();
            let rules = format!(
                "table inet t {{\n  chain out {{\n    type nat hook output priority -100; policy accept;\n    tcp dport 80 redirect to :{port}\n  }}\n}}\n"
            );
            crate::transparent::testns::nft(&rules);
            for (listener, dialled) in [(&v4, "192.0.2.10:80"), (&v6, "[2001:db8::10]:80")] {
                let dialled: SocketAddr = dialled.parse().unwrap();
                let mut c = TcpStream::connect(dialled).unwrap();
                c.write_all(b"x").unwrap();
                let (mut s, _) = listener.accept().unwrap();
                let mut one = [0u8; 1];
                s.read_exact(&mut one).unwrap();
                assert_eq!(
                    original_destination(socket2::SockRef::from(&s)).unwrap(),
                    dialled
                );
                // The connection really landed on sluice's port, not on the dialled one.
                assert_eq!(s.local_addr().unwrap().port(), port);
            }
        });
    }
}
