//! sluice-identity: finds which program is on the other end of an accepted socket.
//!
//! It owns the walk socket → inode (NETLINK_SOCK_DIAG) → owning processes → real exe path,
//! ancestor chain and cmdline, with caches invalidated on pid reuse. It does not judge the
//! identity against policy; the `sluice` crate does that.
//!
//! The lookup is built with the explicit-proxy issue; until then this crate has no items.
#![forbid(unsafe_code)]
