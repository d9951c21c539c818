//! Who a client certificate names, and which tenant's `client_certs` entries match it.
//!
//! Owns the two identities a tenant may be known by on the TLS proxy hop (`--tls-listen`
//! with `--client-ca`): a certificate's subject (a common name, or a whole distinguished
//! name) and its SPIFFE ID (the one URI SAN of an X.509 SVID, `spiffe://trust-domain/path`).
//! [`PeerCert`] is what a verified certificate says, read once when the hop is accepted;
//! [`CertMatch`] is one `client_certs` entry of the tenants file, parsed once when it loads.
//! Whether the certificate is trusted at all is decided before this, in the handshake
//! (`listen::hop`): only a certificate that chains to `--client-ca` gets here.

use std::fmt;

/// What a verified client certificate says about its holder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerCert {
    /// The subject's attributes as (type, value): types in their short upper-case names
    /// (`CN`, `O`, `OU`, ...) or dotted OIDs, in the certificate's order.
    subject: Vec<(String, String)>,
    /// The SPIFFE ID: the certificate's URI SAN when it has exactly one and it is a
    /// `spiffe://` URI (an SVID has exactly one), else none.
    spiffe_id: Option<String>,
}

/// One `client_certs` entry: the subject or the SPIFFE ID a tenant's certificates carry.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum CertMatch {
    /// A common name: the certificate's subject has this CN (and one CN only).
    CommonName(String),
    /// A distinguished name: the certificate's subject has exactly these attributes (in
    /// any order).
    Subject(Vec<(String, String)>),
    /// A SPIFFE ID, compared whole.
    SpiffeId(String),
}

impl PeerCert {
    /// Reads a certificate (DER) the handshake verified.
    pub fn from_der(der: &[u8]) -> Result<PeerCert, String> {
        let (_, cert) = x509_parser::parse_x509_certificate(der)
            .map_err(|e| format!("the client certificate does not parse: {e}"))?;
        let subject = cert
            .subject()
            .iter_rdn()
            .flat_map(|rdn| rdn.iter())
            .map(|atv| {
                let value = match atv.as_str() {
                    Ok(s) => s.to_string(),
                    // Not a string type: shown as RFC 4514 does, `#` and the hex of its DER.
                    Err(_) => format!("#{}", hex(atv.attr_value().data)),
                };
                (short_name(&atv.attr_type().to_id_string()), value)
            })
            .collect();
        let mut uris = Vec::new();
        if let Ok(Some(san)) = cert.subject_alternative_name() {
            for name in &san.value.general_names {
                if let x509_parser::extensions::GeneralName::URI(u) = name {
                    uris.push(u.to_string());
                }
            }
        }
        let spiffe_id = match uris.as_slice() {
            [one] if one.starts_with("spiffe://") => Some(one.clone()),
            _ => None,
        };
        Ok(PeerCert { subject, spiffe_id })
    }

    /// The SPIFFE ID, if the certificate is an SVID.
    pub fn spiffe_id(&self) -> Option<&str> {
        self.spiffe_id.as_deref()
    }

    fn common_names(&self) -> impl Iterator<Item = &str> {
        self.subject
            .iter()
            .filter(|(t, _)| t == "CN")
            .map(|(_, v)| v.as_str())
    }
}

impl fmt::Display for PeerCert {
    /// The SPIFFE ID when there is one, else the subject (`CN=a, O=b`): how audit and
    /// refusals name the certificate.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(id) = &self.spiffe_id {
            return f.write_str(id);
        }
        let parts: Vec<String> = self
            .subject
            .iter()
            .map(|(t, v)| format!("{t}={v}"))
            .collect();
        f.write_str(&parts.join(", "))
    }
}

impl CertMatch {
    /// A `subject:` entry: a distinguished name when it holds `=` (`CN=agent,O=team-a`, as
    /// RFC 4514 writes it, or `/O=team-a/CN=agent` as OpenSSL does), else a common name.
    pub fn subject(text: &str) -> Result<CertMatch, String> {
        let text = text.trim();
        if text.is_empty() {
            return Err("an empty subject matches nothing".to_string());
        }
        if !text.contains('=') {
            return Ok(CertMatch::CommonName(text.to_string()));
        }
        let parts = if let Some(rest) = text.strip_prefix('/') {
            rest.split('/').map(str::to_string).collect()
        } else {
            split_unescaped(text)?
        };
        let mut attrs = Vec::new();
        for part in parts {
            let (t, v) = part.split_once('=').ok_or_else(|| {
                format!(
                    "`{}` is not TYPE=value (e.g. CN=agent-1,O=team-a)",
                    part.escape_debug()
                )
            })?;
            let t = t.trim();
            let known = t.chars().all(|c| c.is_ascii_alphabetic())
                || (t.contains('.') && t.chars().all(|c| c.is_ascii_digit() || c == '.'));
            if t.is_empty() || !known {
                return Err(format!(
                    "`{}` is not an attribute type (CN, O, OU, C, L, ST, DC, ... or a dotted OID)",
                    t.escape_debug()
                ));
            }
            attrs.push((short_name(&t.to_ascii_uppercase()), unescape(v.trim())?));
        }
        attrs.sort();
        Ok(CertMatch::Subject(attrs))
    }

    /// A `spiffe_id:` entry: `spiffe://trust-domain/path`, checked as the SPIFFE ID
    /// standard writes it (a lower-case trust domain, no query, fragment or port).
    pub fn spiffe_id(text: &str) -> Result<CertMatch, String> {
        let rest = text
            .strip_prefix("spiffe://")
            .ok_or("a SPIFFE ID starts with `spiffe://`")?;
        let (domain, path) = rest.split_once('/').map_or((rest, ""), |(d, p)| (d, p));
        let domain_ok = !domain.is_empty()
            && domain.bytes().all(|b| {
                b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'-' | b'_')
            });
        if !domain_ok {
            return Err(format!(
                "`{}` is not a trust domain (lower-case letters, digits, `.`, `-`, `_`)",
                domain.escape_debug()
            ));
        }
        let path_ok = path.split('/').all(|seg| {
            !seg.is_empty()
                && seg != "."
                && seg != ".."
                && seg
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
        });
        if !path.is_empty() && !path_ok {
            return Err(format!(
                "`{}` is not a SPIFFE ID path (segments of letters, digits, `.`, `-`, `_`; no empty, `.` or `..` segment, no query or fragment)",
                path.escape_debug()
            ));
        }
        Ok(CertMatch::SpiffeId(text.to_string()))
    }

    /// Whether `cert` is one this entry names.
    pub fn matches(&self, cert: &PeerCert) -> bool {
        match self {
            CertMatch::CommonName(cn) => {
                let mut cns = cert.common_names();
                cns.next() == Some(cn.as_str()) && cns.next().is_none()
            }
            CertMatch::Subject(want) => {
                let mut have = cert.subject.clone();
                have.sort();
                &have == want
            }
            CertMatch::SpiffeId(id) => cert.spiffe_id.as_deref() == Some(id.as_str()),
        }
    }
}

impl fmt::Display for CertMatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CertMatch::CommonName(cn) => write!(f, "subject CN={cn}"),
            CertMatch::Subject(attrs) => {
                let parts: Vec<String> = attrs.iter().map(|(t, v)| format!("{t}={v}")).collect();
                write!(f, "subject {}", parts.join(","))
            }
            CertMatch::SpiffeId(id) => write!(f, "spiffe_id {id}"),
        }
    }
}

/// The short name of an attribute type given as a dotted OID or a name; unknown OIDs stay
/// dotted. `EMAIL` and `EMAILADDRESS` are one.
fn short_name(t: &str) -> String {
    let name = match t {
        "2.5.4.3" => "CN",
        "2.5.4.5" => "SERIALNUMBER",
        "2.5.4.6" => "C",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        "2.5.4.9" => "STREET",
        "2.5.4.10" => "O",
        "2.5.4.11" => "OU",
        "0.9.2342.19200300.100.1.1" => "UID",
        "0.9.2342.19200300.100.1.25" => "DC",
        "1.2.840.113549.1.9.1" | "EMAIL" => "EMAILADDRESS",
        other => other,
    };
    name.to_string()
}

/// Splits an RFC 4514 string at its unescaped `,` and `+` (a multi-valued RDN's attributes
/// are matched as any others).
fn split_unescaped(text: &str) -> Result<Vec<String>, String> {
    let mut parts = Vec::new();
    let mut current = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                current.push(c);
                current.push(chars.next().ok_or("a `\\` ends the subject")?);
            }
            ',' | '+' => parts.push(std::mem::take(&mut current)),
            _ => current.push(c),
        }
    }
    parts.push(current);
    Ok(parts)
}

/// RFC 4514 escapes undone: `\,` and the other specials, and `\XX` hex pairs (UTF-8).
fn unescape(value: &str) -> Result<String, String> {
    let mut out = Vec::new();
    let bytes = value.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'\\' {
            out.push(bytes[i]);
            i += 1;
            continue;
        }
        let next = *bytes.get(i + 1).ok_or("a `\\` ends a value")?;
        let hex_pair = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match hex_pair {
            Some(b) if next.is_ascii_hexdigit() => {
                out.push(b);
                i += 3;
            }
            _ => {
                out.push(next);
                i += 2;
            }
        }
    }
    String::from_utf8(out).map_err(|_| format!("`{value}` is not UTF-8 once unescaped"))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair, SanType};

    fn cert(dn: &[(DnType, &str)], uris: &[&str]) -> PeerCert {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::default();
        let mut name = DistinguishedName::new();
        for (t, v) in dn {
            name.push(t.clone(), *v);
        }
        params.distinguished_name = name;
        params.subject_alt_names = uris
            .iter()
            .map(|u| SanType::URI(u.to_string().try_into().unwrap()))
            .collect();
        let c = params.self_signed(&key).unwrap();
        PeerCert::from_der(c.der()).unwrap()
    }

    #[test]
    fn a_common_name_or_a_whole_subject_in_either_notation() {
        let agent = cert(
            &[
                (DnType::OrganizationName, "team-a"),
                (DnType::CommonName, "agent-1"),
            ],
            &[],
        );
        let yes = [
            "agent-1",
            "CN=agent-1,O=team-a",
            "O=team-a, CN=agent-1",
            "/O=team-a/CN=agent-1",
            "cn=agent-1,o=team-a",
            "2.5.4.3=agent-1,O=team-a",
        ];
        for s in yes {
            assert!(CertMatch::subject(s).unwrap().matches(&agent), "{s}");
        }
        let no = [
            "agent-2",
            "agent",
            "CN=agent-1",
            "CN=agent-1,O=team-b",
            "CN=agent-1,O=team-a,OU=x",
        ];
        for s in no {
            assert!(!CertMatch::subject(s).unwrap().matches(&agent), "{s}");
        }
        assert_eq!(agent.to_string(), "O=team-a, CN=agent-1");
        // Escapes are read as RFC 4514 writes them.
        let comma = cert(&[(DnType::CommonName, "a,b+c")], &[]);
        assert!(CertMatch::subject("CN=a\\,b\\+c").unwrap().matches(&comma));
        assert!(
            CertMatch::subject("CN=a\\2cb\\2bc")
                .unwrap()
                .matches(&comma)
        );
        for bad in ["", "CN=a,=b", "C N=a", "CN=a\\"] {
            assert!(CertMatch::subject(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_spiffe_id_is_the_one_uri_san_of_the_certificate() {
        let svid = cert(&[], &["spiffe://example.org/ns/ci/sa/runner"]);
        assert_eq!(
            svid.spiffe_id(),
            Some("spiffe://example.org/ns/ci/sa/runner")
        );
        let m = CertMatch::spiffe_id("spiffe://example.org/ns/ci/sa/runner").unwrap();
        assert!(m.matches(&svid));
        assert!(
            !CertMatch::spiffe_id("spiffe://example.org/ns/ci/sa/other")
                .unwrap()
                .matches(&svid)
        );
        // Two URI SANs, or one that is not SPIFFE: not an SVID.
        let two = cert(
            &[],
            &[
                "spiffe://example.org/ns/ci/sa/runner",
                "spiffe://example.org/ns/ci/sa/admin",
            ],
        );
        assert_eq!(two.spiffe_id(), None);
        assert!(!m.matches(&two));
        let https = cert(&[], &["https://example.org/"]);
        assert_eq!(https.spiffe_id(), None);
        for bad in [
            "https://example.org/a",
            "spiffe://",
            "spiffe://Example.org/a",
            "spiffe://example.org/a/../b",
            "spiffe://example.org/a?b=c",
            "spiffe://example.org/a/",
            "spiffe://example.org:443/a",
        ] {
            assert!(CertMatch::spiffe_id(bad).is_err(), "{bad}");
        }
        assert!(CertMatch::spiffe_id("spiffe://example.org").is_ok());
    }
}
