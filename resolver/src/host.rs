//! Host text as it arrives from a CONNECT authority, a URL or a `--resolve` flag: IP literals
//! (IPv6 possibly bracketed) and DNS names (case-insensitive, one trailing dot tolerated).
//!
//! Pure helpers shared by the override parser and the resolver; no lookups happen here.

/// Longest DNS name in text form, without the trailing dot (RFC 1035 §2.3.4).
const MAX_NAME_LEN: usize = 253;
/// Longest label (RFC 1035 §2.3.4).
const MAX_LABEL_LEN: usize = 63;

/// Parses an IP literal: `192.0.2.1`, `2001:db8::1` or `[2001:db8::1]`. Brackets are accepted
/// around IPv6 only; zone identifiers (`fe80::1%eth0`) are not accepted (`sluice-addr`'s).
pub(crate) use sluice_addr::ip_literal as parse_ip_literal;

/// The canonical key of a DNS name: ASCII-lowercased, one trailing dot removed. `None` when
/// the text is not a plausible host name: empty, too long, an empty or over-long label, or a
/// character other than ASCII letters, digits, `-` and `_`.
pub(crate) fn canonical_name(text: &str) -> Option<String> {
    let name = text.strip_suffix('.').unwrap_or(text);
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return None;
    }
    let labels_ok = name.split('.').all(|label| {
        !label.is_empty()
            && label.len() <= MAX_LABEL_LEN
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    });
    labels_ok.then(|| name.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ip_literals() {
        assert_eq!(
            parse_ip_literal("192.0.2.1"),
            Some("192.0.2.1".parse().unwrap())
        );
        assert_eq!(parse_ip_literal("::1"), Some("::1".parse().unwrap()));
        assert_eq!(parse_ip_literal("[::1]"), Some("::1".parse().unwrap()));
        assert_eq!(
            parse_ip_literal("[2001:db8::1]"),
            Some("2001:db8::1".parse().unwrap())
        );
        for bad in [
            "[192.0.2.1]",
            "[::1",
            "::1]",
            "fe80::1%eth0",
            "1.2.3",
            "",
            "[]",
            "example.com",
        ] {
            assert_eq!(parse_ip_literal(bad), None, "{bad}");
        }
    }

    #[test]
    fn names() {
        assert_eq!(
            canonical_name("Example.COM."),
            Some("example.com".to_owned())
        );
        assert_eq!(canonical_name("a_b-c.d"), Some("a_b-c.d".to_owned()));
        assert_eq!(canonical_name("localhost"), Some("localhost".to_owned()));
        let long_label = "a".repeat(63);
        assert!(canonical_name(&long_label).is_some());
        assert!(canonical_name(&"a".repeat(64)).is_none());
        let long_name = [
            "a".repeat(63),
            "b".repeat(63),
            "c".repeat(63),
            "d".repeat(61),
        ]
        .join(".");
        assert_eq!(long_name.len(), 253);
        assert!(canonical_name(&long_name).is_some());
        assert!(canonical_name(&format!("{long_name}.")).is_some());
        assert!(canonical_name(&format!("{long_name}e")).is_none());
        for bad in [
            "",
            ".",
            "a..b",
            ".a",
            "a b",
            "*.example.com",
            "a/b",
            "ex\u{e4}mple.com",
            "a..",
        ] {
            assert_eq!(canonical_name(bad), None, "{bad:?}");
        }
    }
}
