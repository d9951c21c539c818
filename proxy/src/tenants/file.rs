//! The tenants file (`sluice run --tenants FILE`): a positioned YAML document in, one
//! [`TenantSpec`] per tenant out, with every problem reported as `FILE:LINE:COL: field:
//! message` (never only the first).
//!
//! Owns the file's schema and the checks across tenants: unique names, usernames and client
//! certificate entries, each tenant identifiable (source addresses, proxy credentials,
//! client certificates, or several), and no address that two tenants could both claim
//! without credentials or certificates to tell them apart. Loading each tenant's
//! policy, profiles and secrets is `cli/tenants.rs`'s.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ipnet::IpNet;

use crate::policy::diag::{Diagnostic, Diagnostics, Location, join_field, map_fields};
use crate::policy::yaml::{self, Kind, Node, Pos};
use crate::tenants::cert::CertMatch;

const TOP_FIELDS: &[&str] = &["tenants"];
const TENANT_FIELDS: &[&str] = &[
    "name",
    "sources",
    "proxy_auth",
    "client_certs",
    "policy",
    "providers",
    "secrets_file",
    "secrets_dir",
];
const AUTH_FIELDS: &[&str] = &["username", "password_env"];
const CERT_FIELDS: &[&str] = &["subject", "spiffe_id"];
/// Longest tenant name: it is shown in audit events, metrics and refusals.
const MAX_NAME: usize = 64;

/// One tenant as the file describes it.
#[derive(Clone, Debug)]
pub struct TenantSpec {
    pub name: Arc<str>,
    pub location: Location,
    /// Client addresses the tenant connects from (empty: any, then `auth` is required).
    pub sources: Vec<IpNet>,
    /// Where `sources` is written (for the checks across tenants).
    sources_pos: Pos,
    pub auth: Option<AuthSpec>,
    /// `client_certs`: the certificates (by subject or SPIFFE ID) the tenant is known by on
    /// the TLS proxy hop, each with where it is written.
    pub certs: Vec<(CertMatch, Pos)>,
    /// Policy files, provider profile files and the secrets file, relative paths resolved
    /// against the tenants file's directory.
    pub policies: Vec<String>,
    pub providers: Vec<String>,
    pub secrets_file: Option<PathBuf>,
    /// `secrets_dir`: one file per key (`--secrets-dir`), resolved like `secrets_file`.
    pub secrets_dir: Option<PathBuf>,
}

/// `proxy_auth`: Basic credentials in `Proxy-Authorization`; the password is read from
/// sluice's environment (`password_env`), never from the file.
#[derive(Clone, Debug)]
pub struct AuthSpec {
    pub username: String,
    username_pos: Pos,
    pub password_env: String,
    pub password_location: Location,
}

/// Reads and checks the tenants file at `path`: every tenant, or every problem found.
/// `has_env` says whether sluice's environment holds a (non-empty) variable, so that an
/// unset `password_env` is reported with the file's other problems.
pub fn read(
    path: &str,
    has_env: &dyn Fn(&str) -> bool,
) -> Result<Vec<TenantSpec>, Vec<Diagnostic>> {
    let text =
        match crate::config_file::read_text(Path::new(path), crate::config_file::Kind::Tenants) {
            Ok(t) => t,
            Err(e) => {
                let mut diags = Diagnostics::default();
                diags.error(&Arc::from(path), Pos::new(0, 0), "", e);
                return Err(diags.into_sorted());
            }
        };
    parse(path, &text, has_env)
}

/// Checks `text`, the tenants file read from `path` (relative paths in it are resolved
/// against `path`'s directory): every tenant, or every problem found.
pub fn parse(
    path: &str,
    text: &str,
    has_env: &dyn Fn(&str) -> bool,
) -> Result<Vec<TenantSpec>, Vec<Diagnostic>> {
    let file: Arc<str> = Arc::from(path);
    let mut diags = Diagnostics::default();
    let base = Path::new(path).parent().unwrap_or(Path::new(""));
    let specs = match yaml::parse(text) {
        Ok(Some(root)) => Reader {
            file: &file,
            base,
            diags: &mut diags,
            has_env,
        }
        .document(&root),
        Ok(None) => {
            diags.error(
                &file,
                Pos::new(1, 1),
                "tenants",
                "the file is empty; it must list `tenants:`",
            );
            Vec::new()
        }
        Err(e) => {
            diags.error(&file, e.pos, "", e.message);
            Vec::new()
        }
    };
    if diags.has_errors() {
        return Err(diags.into_sorted());
    }
    Ok(specs)
}

struct Reader<'a> {
    file: &'a Arc<str>,
    base: &'a Path,
    diags: &'a mut Diagnostics,
    has_env: &'a dyn Fn(&str) -> bool,
}

impl Reader<'_> {
    fn error(&mut self, pos: Pos, field: &str, message: impl Into<String>) {
        self.diags.error(self.file, pos, field, message);
    }

    fn location(&self, pos: Pos) -> Location {
        Location::new(self.file, pos)
    }

    /// The fields of a mapping, checked against `known` (`diag::map_fields`).
    fn fields<'n, 'a>(
        &mut self,
        node: &'n Node<'a>,
        path: &str,
        known: &[&str],
    ) -> Option<Vec<(&'n str, &'n Node<'a>)>> {
        map_fields(
            self.diags,
            self.file,
            node,
            (path, "the tenants file"),
            known,
            &[],
        )
    }

    fn string(&mut self, node: &Node<'_>, field: &str) -> Option<String> {
        match &node.kind {
            Kind::Scalar(s, _) if !node.is_null() && !s.is_empty() => Some(s.to_string()),
            _ => {
                let found = node.type_name();
                self.error(
                    node.pos,
                    field,
                    format!("expected a non-empty string, found {found}"),
                );
                None
            }
        }
    }

    /// A list of strings; a single string is read as a list of one.
    fn strings(&mut self, node: &Node<'_>, field: &str) -> Vec<(String, Pos)> {
        match &node.kind {
            Kind::Seq(items) => items
                .iter()
                .enumerate()
                .filter_map(|(i, n)| {
                    let f = format!("{field}[{i}]");
                    self.string(n, &f).map(|s| (s, n.pos))
                })
                .collect(),
            _ => self
                .string(node, field)
                .map(|s| vec![(s, node.pos)])
                .unwrap_or_default(),
        }
    }

    fn path(&self, relative: &str) -> PathBuf {
        let p = Path::new(relative);
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.base.join(p)
        }
    }

    fn document(&mut self, root: &Node<'_>) -> Vec<TenantSpec> {
        let Some(fields) = self.fields(root, "", TOP_FIELDS) else {
            return Vec::new();
        };
        let Some((_, list)) = fields.into_iter().find(|(k, _)| *k == "tenants") else {
            self.error(
                root.pos,
                "tenants",
                "missing field `tenants` (a list of tenants)",
            );
            return Vec::new();
        };
        let Kind::Seq(items) = &list.kind else {
            let found = list.type_name();
            self.error(
                list.pos,
                "tenants",
                format!("expected a list of tenants, found {found}"),
            );
            return Vec::new();
        };
        if items.is_empty() {
            self.error(list.pos, "tenants", "no tenants: list at least one");
        }
        let specs: Vec<TenantSpec> = items
            .iter()
            .enumerate()
            .filter_map(|(i, n)| self.tenant(n, &format!("tenants[{i}]")))
            .collect();
        self.across(&specs);
        specs
    }

    fn tenant(&mut self, node: &Node<'_>, path: &str) -> Option<TenantSpec> {
        let fields = self.fields(node, path, TENANT_FIELDS)?;
        let errors = self.diags.error_count();
        let mut name = None;
        let mut sources = Vec::new();
        let mut sources_pos = node.pos;
        let mut auth = None;
        let mut certs = Vec::new();
        let mut policies = Vec::new();
        let mut providers = Vec::new();
        let mut secrets_file = None;
        let mut secrets_dir = None;
        for (key, value) in fields {
            let field = join_field(path, key);
            match key {
                "name" => name = self.name(value, &field),
                "sources" => {
                    sources_pos = value.pos;
                    sources = self.sources(value, &field);
                }
                "proxy_auth" => auth = self.auth(value, &field),
                "client_certs" => certs = self.certs(value, &field),
                "policy" => policies = self.files(value, &field),
                "providers" => providers = self.files(value, &field),
                "secrets_dir" => {
                    secrets_dir = self.string(value, &field).map(|s| self.path(&s));
                }
                _ => {
                    secrets_file = self.string(value, &field).map(|s| self.path(&s));
                }
            }
        }
        let Some(name) = name else {
            self.error(node.pos, &join_field(path, "name"), "missing field `name`");
            return None;
        };
        if policies.is_empty() {
            self.error(
                node.pos,
                &join_field(path, "policy"),
                format!("tenant `{name}` names no policy file; add `policy: [FILE]`"),
            );
        }
        if sources.is_empty() && auth.is_none() && certs.is_empty() {
            self.error(
                node.pos,
                path,
                format!(
                    "tenant `{name}` cannot be identified: give it `sources` (client addresses), `proxy_auth` (proxy credentials), `client_certs` (client certificates), or several"
                ),
            );
        }
        if self.diags.error_count() > errors {
            return None;
        }
        Some(TenantSpec {
            name: Arc::from(name.as_str()),
            location: self.location(node.pos),
            sources,
            sources_pos,
            auth,
            certs,
            policies,
            providers,
            secrets_file,
            secrets_dir,
        })
    }

    fn name(&mut self, node: &Node<'_>, field: &str) -> Option<String> {
        let name = self.string(node, field)?;
        let valid = name.len() <= MAX_NAME
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if !valid {
            self.error(
                node.pos,
                field,
                format!(
                    "invalid tenant name `{}`: use at most {MAX_NAME} letters, digits, `.`, `_` or `-`",
                    name.escape_debug()
                ),
            );
            return None;
        }
        Some(name)
    }

    fn sources(&mut self, node: &Node<'_>, field: &str) -> Vec<IpNet> {
        let mut out = Vec::new();
        for (text, pos) in self.strings(node, field) {
            let parsed = text
                .parse::<IpNet>()
                .or_else(|_| text.parse::<std::net::IpAddr>().map(IpNet::from));
            match parsed {
                Ok(net) => out.push(canonical(net.trunc())),
                Err(_) => self.error(
                    pos,
                    field,
                    format!(
                        "`{}` is not an address or a CIDR block (e.g. 10.0.0.0/8, 192.0.2.7, fd00::/64)",
                        text.escape_debug()
                    ),
                ),
            }
        }
        out
    }

    fn auth(&mut self, node: &Node<'_>, path: &str) -> Option<AuthSpec> {
        let fields = self.fields(node, path, AUTH_FIELDS)?;
        let mut username = None;
        let mut username_pos = node.pos;
        let mut password = None;
        for (key, value) in fields {
            let field = join_field(path, key);
            if key == "username" {
                username_pos = value.pos;
                username = self.string(value, &field);
                if let Some(u) = &username
                    && (u.contains(':') || u.chars().any(char::is_control))
                {
                    self.error(
                        value.pos,
                        &field,
                        "a username may not contain `:` or control characters (Basic credentials are `username:password`)",
                    );
                    username = None;
                }
            } else {
                password = self.string(value, &field).map(|s| (s, value.pos));
                if let Some((var, pos)) = &password
                    && !(self.has_env)(var)
                {
                    let message = format!(
                        "the environment variable `{var}` is not set or is empty; export the tenant's proxy password in it"
                    );
                    self.error(*pos, &field, message);
                }
            }
        }
        match (username, password) {
            (Some(username), Some((password_env, pos))) => Some(AuthSpec {
                username,
                username_pos,
                password_env,
                password_location: self.location(pos),
            }),
            (None, _) => {
                self.error(
                    node.pos,
                    &join_field(path, "username"),
                    "missing field `username`",
                );
                None
            }
            (_, None) => {
                self.error(
                    node.pos,
                    &join_field(path, "password_env"),
                    "missing field `password_env` (the environment variable of sluice that holds the password)",
                );
                None
            }
        }
    }

    /// `client_certs`: a list of `{subject: ...}` or `{spiffe_id: ...}` entries.
    fn certs(&mut self, node: &Node<'_>, path: &str) -> Vec<(CertMatch, Pos)> {
        let Kind::Seq(items) = &node.kind else {
            let found = node.type_name();
            self.error(
                node.pos,
                path,
                format!(
                    "expected a list of `{{subject: ...}}` or `{{spiffe_id: ...}}`, found {found}"
                ),
            );
            return Vec::new();
        };
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let at = format!("{path}[{i}]");
            let before = self.diags.error_count();
            let Some(fields) = self.fields(item, &at, CERT_FIELDS) else {
                continue;
            };
            // Only unknown fields: said already.
            let unknown_only = fields.is_empty() && self.diags.error_count() > before;
            if fields.len() != 1 && !unknown_only {
                self.error(
                    item.pos,
                    &at,
                    "give exactly one of `subject` or `spiffe_id` per entry",
                );
                continue;
            }
            for (key, value) in fields.into_iter().take(1) {
                let field = join_field(&at, key);
                let Some(text) = self.string(value, &field) else {
                    continue;
                };
                let parsed = if key == "subject" {
                    CertMatch::subject(&text)
                } else {
                    CertMatch::spiffe_id(&text)
                };
                match parsed {
                    Ok(m) => out.push((m, value.pos)),
                    Err(e) => self.error(value.pos, &field, e),
                }
            }
        }
        if items.is_empty() {
            self.error(
                node.pos,
                path,
                "an empty `client_certs` names no certificate",
            );
        }
        out
    }

    fn files(&mut self, node: &Node<'_>, field: &str) -> Vec<String> {
        self.strings(node, field)
            .into_iter()
            .map(|(f, _)| self.path(&f).to_string_lossy().into_owned())
            .collect()
    }

    /// The checks across tenants: names and usernames unique, and no client address that two
    /// tenants could both claim when neither needs credentials to be told apart.
    fn across(&mut self, specs: &[TenantSpec]) {
        let mut names: HashMap<&str, &Location> = HashMap::new();
        let mut users: HashMap<&str, (&str, &Location)> = HashMap::new();
        let mut certs: HashMap<&CertMatch, (&str, Pos)> = HashMap::new();
        for (i, t) in specs.iter().enumerate() {
            for (j, (m, pos)) in t.certs.iter().enumerate() {
                if let Some((other, first)) = certs.insert(m, (&t.name, *pos)) {
                    let message = format!(
                        "{m} is also tenant `{other}`'s (line {}); a certificate names one tenant",
                        first.line
                    );
                    self.error(*pos, &format!("tenants[{i}].client_certs[{j}]"), message);
                }
            }
            if let Some(first) = names.insert(&t.name, &t.location) {
                let pos = t.location.pos;
                let line = first.pos.line;
                let message = format!("duplicate tenant name `{}` (first at line {line})", t.name);
                self.error(pos, &format!("tenants[{i}].name"), message);
            }
            if let Some(a) = &t.auth
                && let Some((other, first)) = users.insert(&a.username, (&t.name, &t.location))
            {
                let line = first.pos.line;
                let message = format!(
                    "username `{}` is also tenant `{other}`'s (line {line}); each tenant needs its own",
                    a.username
                );
                let field = format!("tenants[{i}].proxy_auth.username");
                self.error(a.username_pos, &field, message);
            }
            for earlier in &specs[..i] {
                // Credentials and certificates tell two tenants apart; addresses alone must
                // not overlap.
                if t.is_credentialed() && earlier.is_credentialed() {
                    continue;
                }
                let clash = t.sources.iter().find_map(|a| {
                    earlier
                        .sources
                        .iter()
                        .find(|b| a.contains(&b.network()) || b.contains(&a.network()))
                        .map(|b| (a, b))
                });
                if let Some((a, b)) = clash {
                    let line = earlier.sources_pos.line;
                    let message = format!(
                        "source {a} overlaps {b} of tenant `{}` (line {line}): a client there could be either; make the ranges disjoint or give both tenants `proxy_auth`",
                        earlier.name
                    );
                    self.error(t.sources_pos, &format!("tenants[{i}].sources"), message);
                }
            }
        }
    }
}

impl TenantSpec {
    /// Whether the tenant is told apart by more than its address (credentials or a
    /// certificate).
    fn is_credentialed(&self) -> bool {
        self.auth.is_some() || !self.certs.is_empty()
    }
}

/// An IPv4-mapped IPv6 block (`::ffff:10.0.0.0/104`) as the IPv4 block it maps
/// (`10.0.0.0/8`): a client's address is compared in its IPv4 form, and two tenants must not
/// claim one address written two ways.
fn canonical(net: IpNet) -> IpNet {
    if let IpNet::V6(v6) = net
        && let Some(v4) = v6.network().to_ipv4_mapped()
        && let Some(prefix) = v6.prefix_len().checked_sub(96)
        && let Ok(mapped) = ipnet::Ipv4Net::new(v4, prefix)
    {
        return IpNet::V4(mapped);
    }
    net
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_text(text: &str) -> Result<Vec<TenantSpec>, Vec<String>> {
        let dir = std::env::temp_dir().join(format!("sluice-tenants-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("t{}.yaml", rand_suffix()));
        std::fs::write(&path, text).unwrap();
        let out = read(path.to_str().unwrap(), &|v| v != "UNSET")
            .map_err(|d| d.iter().map(ToString::to_string).collect());
        let _ = std::fs::remove_file(&path);
        out
    }

    fn rand_suffix() -> u64 {
        use std::sync::atomic::{AtomicU64, Ordering};
        static N: AtomicU64 = AtomicU64::new(0);
        N.fetch_add(1, Ordering::Relaxed)
    }

    #[test]
    fn a_good_file_reads_with_paths_next_to_it() {
        let specs = read_text(
            "tenants:\n  - name: alpha\n    sources: [10.0.0.0/8, 192.0.2.7]\n    policy: a.yaml\n    secrets_file: a.env\n    secrets_dir: keys\n  - name: beta\n    proxy_auth: {username: beta, password_env: B}\n    policy: [/etc/b.yaml]\n    providers: [p.yaml]\n",
        )
        .unwrap();
        assert_eq!(specs.len(), 2);
        assert_eq!(&*specs[0].name, "alpha");
        assert_eq!(specs[0].sources.len(), 2);
        assert!(specs[0].policies[0].ends_with("/a.yaml"));
        assert!(specs[0].policies[0].starts_with('/'));
        assert!(specs[0].secrets_file.as_ref().unwrap().ends_with("a.env"));
        assert!(specs[0].secrets_dir.as_ref().unwrap().ends_with("keys"));
        assert!(specs[1].secrets_dir.is_none());
        assert_eq!(specs[1].policies, vec!["/etc/b.yaml".to_string()]);
        assert_eq!(specs[1].auth.as_ref().unwrap().password_env, "B");
    }

    #[test]
    fn every_problem_is_named_with_its_line_and_field() {
        let errors = read_text(
            "tenants:\n  - name: alpha\n    sources: [10.0.0.0/8]\n    policy: a.yaml\n    colour: red\n  - name: alpha\n    sources: [10.1.0.0/16]\n    policy: b.yaml\n  - name: 'bad name'\n    policy: c.yaml\n  - name: nobody\n    policy: d.yaml\n  - name: e\n    sources: [not-an-ip]\n    proxy_auth: {username: 'a:b'}\n  - name: f\n    proxy_auth:\n      username: f\n      password_env: UNSET\n    policy: f.yaml\n",
        )
        .unwrap_err();
        let all = errors.join("\n");
        assert!(
            all.contains(":5:5: tenants[0].colour: unknown field `colour`"),
            "{all}"
        );
        assert!(
            all.contains(":6:5: tenants[1].name: duplicate tenant name `alpha`"),
            "{all}"
        );
        // At the `sources` it names, not at the tenant.
        assert!(
            all.contains(":7:14: tenants[1].sources: source 10.1.0.0/16 overlaps 10.0.0.0/8 of tenant `alpha` (line 3)"),
            "{all}"
        );
        assert!(
            all.contains(":19:21: tenants[5].proxy_auth.password_env: the environment variable `UNSET` is not set"),
            "{all}"
        );
        assert!(
            all.contains("tenants[2].name: invalid tenant name"),
            "{all}"
        );
        assert!(
            all.contains("tenant `nobody` cannot be identified"),
            "{all}"
        );
        assert!(
            all.contains("tenants[4].sources: `not-an-ip` is not an address"),
            "{all}"
        );
        assert!(
            all.contains("tenants[4].proxy_auth.username: a username may not contain"),
            "{all}"
        );
        assert!(
            all.contains("tenants[4].policy: tenant `e` names no policy file"),
            "{all}"
        );
    }

    #[test]
    fn credentials_tell_overlapping_tenants_apart_and_usernames_are_unique() {
        let ok = read_text(
            "tenants:\n  - name: a\n    sources: [10.0.0.0/8]\n    proxy_auth: {username: a, password_env: A}\n    policy: a.yaml\n  - name: b\n    sources: [10.0.0.0/8]\n    proxy_auth: {username: b, password_env: B}\n    policy: b.yaml\n",
        );
        assert!(ok.is_ok(), "{ok:?}");
        let errors = read_text(
            "tenants:\n  - name: a\n    proxy_auth: {username: x, password_env: A}\n    policy: a.yaml\n  - name: b\n    proxy_auth: {username: x, password_env: B}\n    policy: b.yaml\n",
        )
        .unwrap_err();
        assert!(
            errors
                .join("\n")
                .contains("username `x` is also tenant `a`'s"),
            "{errors:?}"
        );
    }

    #[test]
    fn client_certs_are_read_checked_and_each_names_one_tenant() {
        let specs = read_text(
            "tenants:\n  - name: a\n    client_certs:\n      - subject: CN=agent-a,O=team\n      - spiffe_id: spiffe://example.org/ns/a\n    policy: a.yaml\n  - name: b\n    client_certs: [{subject: agent-b}]\n    proxy_auth: {username: b, password_env: B}\n    policy: b.yaml\n",
        )
        .unwrap();
        assert_eq!(specs[0].certs.len(), 2);
        assert_eq!(specs[1].certs.len(), 1);
        let errors = read_text(
            "tenants:\n  - name: a\n    client_certs: [{subject: agent}]\n    policy: a.yaml\n  - name: b\n    client_certs:\n      - subject: agent\n    policy: b.yaml\n  - name: c\n    client_certs:\n      - spiffe_id: https://example.org/a\n      - {subject: x, spiffe_id: spiffe://e.org/x}\n      - issuer: y\n    policy: c.yaml\n  - name: d\n    client_certs: []\n    policy: d.yaml\n",
        )
        .unwrap_err()
        .join("\n");
        assert!(
            errors.contains(
                ":7:18: tenants[1].client_certs[0]: subject CN=agent is also tenant `a`'s (line 3)"
            ),
            "{errors}"
        );
        assert!(
            errors.contains(
                ":11:20: tenants[2].client_certs[0].spiffe_id: a SPIFFE ID starts with `spiffe://`"
            ),
            "{errors}"
        );
        assert!(
            errors.contains(
                "tenants[2].client_certs[1]: give exactly one of `subject` or `spiffe_id`"
            ),
            "{errors}"
        );
        assert!(
            errors.contains("tenants[2].client_certs[2].issuer: unknown field `issuer`"),
            "{errors}"
        );
        assert!(
            errors
                .contains("tenants[3].client_certs: an empty `client_certs` names no certificate"),
            "{errors}"
        );
        // A tenant known only by its certificate needs no address or password.
        assert!(
            read_text("tenants:\n  - name: a\n    client_certs: [{spiffe_id: spiffe://e.org/a}]\n    policy: a.yaml\n").is_ok()
        );
    }

    #[test]
    fn an_ipv4_mapped_source_reads_as_the_ipv4_block_it_maps() {
        let specs = read_text(
            "tenants:\n  - name: a\n    sources: [\"::ffff:10.0.0.0/104\", \"::ffff:192.0.2.7\", \"fd00::/64\", \"::/0\"]\n    policy: a.yaml\n",
        )
        .unwrap();
        let got: Vec<String> = specs[0].sources.iter().map(ToString::to_string).collect();
        assert_eq!(got, ["10.0.0.0/8", "192.0.2.7/32", "fd00::/64", "::/0"]);
    }

    #[test]
    fn an_empty_or_malformed_file_is_an_error_not_a_panic() {
        assert!(read_text("").is_err());
        assert!(read_text("tenants: []\n").is_err());
        assert!(read_text("tenants: {a: 1}\n").is_err());
        assert!(read_text("[1, 2\n").is_err());
        assert!(read_text("tenants:\n  - 7\n").is_err());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(400))]
        /// Whatever the file holds (a good one cut and spliced anywhere, or arbitrary
        /// bytes), reading it answers: tenants or errors, never a panic.
        #[test]
        fn any_file_is_read_or_refused_never_a_panic(
            cut in 0usize..400,
            splice in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..24),
            junk in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
        ) {
            let good = "tenants:\n  - name: a\n    sources: [10.0.0.0/8, \"::ffff:10.1.0.0/112\"]\n    proxy_auth: {username: a, password_env: A}\n    policy: [a.yaml]\n    providers: p.yaml\n    secrets_file: s.env\n  - name: b\n    sources: 192.0.2.7\n    policy: b.yaml\n";
            let mut bytes = good.as_bytes().to_vec();
            let at = cut.min(bytes.len());
            bytes.splice(at..at, splice);
            for text in [bytes, junk] {
                let dir = std::env::temp_dir().join(format!("sluice-tenants-{}", std::process::id()));
                std::fs::create_dir_all(&dir).unwrap();
                let path = dir.join(format!("p{}.yaml", rand_suffix()));
                std::fs::write(&path, &text).unwrap();
                let _ = read(path.to_str().unwrap(), &|v| v == "A");
                let _ = std::fs::remove_file(&path);
            }
        }
    }
}
