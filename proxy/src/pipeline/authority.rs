//! Where a connection goes: a host and a port ([`Authority`], from `sluice-addr`, the one
//! spelling every crate uses); and a request target's path without its query
//! ([`path_only`]), the only form of a path that reaches a message or a log.

pub use sluice_addr::{Authority, AuthorityError};

/// A request target's path without its query (queries are never logged nor echoed).
pub fn path_only(path_and_query: &str) -> &str {
    match path_and_query.split('?').next() {
        Some(p) if !p.is_empty() => p,
        _ => "/",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_lose_their_query() {
        assert_eq!(path_only("/a/b?c=1"), "/a/b");
        assert_eq!(path_only("/a"), "/a");
        assert_eq!(path_only("?q"), "/");
        assert_eq!(path_only(""), "/");
    }
}
