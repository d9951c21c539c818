//! The validated policy: typed values only, with the source location of everything a decision
//! or a diagnostic may need to point at.
//!
//! Owns the types that `validate.rs` produces and `compile.rs` indexes. Nothing here is a
//! string that gets re-parsed later: hosts, paths, binaries and query values are compiled
//! globs, ports are `u16`, addresses are `IpNet`. Invalid states (a rule without a path, a
//! port of 0) cannot be expressed.

use std::fmt;
use std::sync::Arc;

use ipnet::IpNet;

use super::diag::Location;
use super::glob::{Glob, HostPattern};

/// A `network_policies` key: what logs, audit events and 403 bodies call the policy.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PolicyKey(Arc<str>);

impl PolicyKey {
    pub fn new(key: &str) -> Self {
        PolicyKey(Arc::from(key))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for PolicyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// No `protocol`: the connection is judged once, requests are not inspected.
    L4,
    /// `protocol: tcp`: transparent raw TCP.
    Tcp,
    Rest,
    WebSocket,
    /// `protocol: json-rpc`: POST bodies judged call by call.
    JsonRpc,
    /// `protocol: mcp`: JSON-RPC with MCP's methods and tools (streamable HTTP).
    Mcp,
    /// `protocol: graphql`: every operation of a request judged (GET and POST).
    Graphql,
    /// `protocol: sql`: audit only, relayed without a parser (as in the reference).
    Sql,
}

impl Protocol {
    pub(super) fn is_l7(self) -> bool {
        matches!(
            self,
            Protocol::Rest
                | Protocol::WebSocket
                | Protocol::JsonRpc
                | Protocol::Mcp
                | Protocol::Graphql
        )
    }

    /// JSON-RPC, MCP or GraphQL: a request is judged by what its body (or, GraphQL `GET`,
    /// its query) asks, not by its head alone.
    pub fn judges_body(self) -> bool {
        self.is_rpc() || self == Protocol::Graphql
    }

    /// JSON-RPC or MCP: requests are judged by the calls their bodies make.
    pub fn is_rpc(self) -> bool {
        matches!(self, Protocol::JsonRpc | Protocol::Mcp)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::L4 => "",
            Protocol::Tcp => "tcp",
            Protocol::Rest => "rest",
            Protocol::WebSocket => "websocket",
            Protocol::JsonRpc => "json-rpc",
            Protocol::Mcp => "mcp",
            Protocol::Graphql => "graphql",
            Protocol::Sql => "sql",
        }
    }
}

/// `credential_signing`: how a request's payload enters its SigV4 signature (spec §3.8).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SigningMode {
    /// `sigv4`: from the client's own `X-Amz-Content-Sha256` (or its `Content-Length`).
    Auto,
    /// `sigv4:body`: the body is read whole (bounded) and hashed.
    Body,
    /// `sigv4:no_body`: `UNSIGNED-PAYLOAD`, the body streams.
    NoBody,
}

impl SigningMode {
    pub fn parse(text: &str) -> Option<SigningMode> {
        Some(match text {
            "sigv4" => SigningMode::Auto,
            "sigv4:body" => SigningMode::Body,
            "sigv4:no_body" => SigningMode::NoBody,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SigningMode::Auto => "sigv4",
            SigningMode::Body => "sigv4:body",
            SigningMode::NoBody => "sigv4:no_body",
        }
    }
}

/// An endpoint's SigV4 re-signing: the mode, the AWS service the signature is scoped to and
/// the region (else read from the request's host).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Signing {
    pub mode: SigningMode,
    pub service: String,
    pub region: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TlsMode {
    Auto,
    Skip,
}

impl TlsMode {
    pub fn as_str(self) -> &'static str {
        match self {
            TlsMode::Auto => "auto",
            TlsMode::Skip => "skip",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Enforcement {
    Enforce,
    /// The reference's default: would-be denials are logged and forwarded.
    Audit,
}

impl Enforcement {
    pub fn as_str(self) -> &'static str {
        match self {
            Enforcement::Enforce => "enforce",
            Enforcement::Audit => "audit",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    ReadOnly,
    ReadWrite,
    Full,
}

impl Access {
    pub fn as_str(self) -> &'static str {
        match self {
            Access::ReadOnly => "read-only",
            Access::ReadWrite => "read-write",
            Access::Full => "full",
        }
    }
}

/// A rule's method: one method, or `*`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum MethodMatcher {
    Any,
    Get,
    Head,
    Post,
    Put,
    Delete,
    Patch,
    Options,
    /// Synthetic method of WebSocket text messages.
    WebsocketText,
    /// Any other HTTP method token (`PURGE`, `PROPFIND`), upper-case, matched as written.
    Other(Arc<str>),
}

impl MethodMatcher {
    /// A known method or `*`; `None` for anything else.
    pub fn parse(method: &str) -> Option<Self> {
        Some(match method.to_ascii_uppercase().as_str() {
            "*" => MethodMatcher::Any,
            "GET" => MethodMatcher::Get,
            "HEAD" => MethodMatcher::Head,
            "POST" => MethodMatcher::Post,
            "PUT" => MethodMatcher::Put,
            "DELETE" => MethodMatcher::Delete,
            "PATCH" => MethodMatcher::Patch,
            "OPTIONS" => MethodMatcher::Options,
            "WEBSOCKET_TEXT" => MethodMatcher::WebsocketText,
            _ => return None,
        })
    }

    /// An HTTP method token (RFC 9110 `token`) that is not a known method.
    pub fn other(method: &str) -> Option<Self> {
        let is_tchar = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
        (!method.is_empty() && method.bytes().all(is_tchar))
            .then(|| MethodMatcher::Other(Arc::from(method.to_ascii_uppercase())))
    }

    pub(super) fn as_str(&self) -> &str {
        match self {
            MethodMatcher::Any => "*",
            MethodMatcher::Get => "GET",
            MethodMatcher::Head => "HEAD",
            MethodMatcher::Post => "POST",
            MethodMatcher::Put => "PUT",
            MethodMatcher::Delete => "DELETE",
            MethodMatcher::Patch => "PATCH",
            MethodMatcher::Options => "OPTIONS",
            MethodMatcher::WebsocketText => "WEBSOCKET_TEXT",
            MethodMatcher::Other(m) => m,
        }
    }

    /// `method` is upper-case. A GET rule also covers HEAD, for allow and deny rules alike
    /// (spec §1.8); OPTIONS is never implied.
    pub(super) fn matches(&self, method: &str) -> bool {
        match self {
            MethodMatcher::Any => true,
            MethodMatcher::Get => method == "GET" || method == "HEAD",
            other => other.as_str() == method,
        }
    }
}

/// A rule path: `**` (everything) or a segment-bound glob over the canonical path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PathMatcher {
    All,
    Glob(Glob),
}

impl PathMatcher {
    pub(super) fn is_match(&self, path: &str) -> bool {
        match self {
            PathMatcher::All => true,
            PathMatcher::Glob(g) => g.is_match(path),
        }
    }

    fn as_str(&self) -> &str {
        match self {
            PathMatcher::All => "**",
            PathMatcher::Glob(g) => g.as_str(),
        }
    }
}

/// A query parameter condition: the decoded key and the globs one value may match.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueryMatcher {
    pub key: String,
    pub globs: Vec<Glob>,
}

impl QueryMatcher {
    pub(super) fn value_matches(&self, value: &str) -> bool {
        self.globs.iter().any(|g| g.is_match(value))
    }
}

/// Deny side: every configured key present, and for each some value matching.
pub(super) fn deny_query_matches(matchers: &[QueryMatcher], query: &[(String, String)]) -> bool {
    matchers
        .iter()
        .all(|m| query.iter().any(|(k, v)| *k == m.key && m.value_matches(v)))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RuleKind {
    Allow,
    Deny,
    /// Expanded from `access`.
    Preset(Access),
}

/// Where a rule came from, for explanations and audit events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleOrigin {
    pub entry: PolicyKey,
    pub endpoint: usize,
    pub kind: RuleKind,
    pub index: usize,
    pub location: Location,
}

impl RuleOrigin {
    /// The field path of the rule, e.g. `network_policies.gh.endpoints[0].rules[1]`.
    pub fn field(&self) -> String {
        let base = format!(
            "network_policies.{}.endpoints[{}]",
            self.entry, self.endpoint
        );
        match self.kind {
            RuleKind::Allow => format!("{base}.rules[{}]", self.index),
            RuleKind::Deny => format!("{base}.deny_rules[{}]", self.index),
            RuleKind::Preset(_) => format!("{base}.access"),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    pub method: MethodMatcher,
    pub path: PathMatcher,
    pub query: Vec<QueryMatcher>,
    /// A JSON-RPC or MCP rule: what it matches in a call (`method`, `path`, `query` unused).
    pub rpc: Option<RpcMatcher>,
    /// A GraphQL rule: what it matches in an operation (`method`, `path`, `query` unused).
    pub graphql: Option<GraphqlMatcher>,
    pub origin: RuleOrigin,
}

impl Rule {
    /// The reference's short form, `METHOD path`, as in 403 bodies; `rpc <method>` (and
    /// its tool globs) for a JSON-RPC or MCP rule.
    pub fn summary(&self) -> String {
        match (&self.rpc, &self.graphql) {
            (Some(r), _) => r.summary(),
            (None, Some(g)) => g.summary(),
            (None, None) => format!("{} {}", self.method.as_str(), self.path.as_str()),
        }
    }
}

/// A JSON-RPC method matcher: `*`, an exact name, or (MCP, `tools/` family) a glob.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RpcMethod {
    Any,
    Exact(String),
    Glob(Glob),
}

/// What a JSON-RPC or MCP rule matches in one call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RpcMatcher {
    pub method: RpcMethod,
    /// Each `params` key (dotted; `tool` is `name`) and the globs its value may match:
    /// every key must be present as a string matching one of them.
    pub params: Vec<QueryMatcher>,
}

impl RpcMatcher {
    pub fn summary(&self) -> String {
        let method = match &self.method {
            RpcMethod::Any => "*",
            RpcMethod::Exact(m) => m.as_str(),
            RpcMethod::Glob(g) => g.as_str(),
        };
        let mut out = format!("rpc {method}");
        for p in &self.params {
            let globs: Vec<&str> = p.globs.iter().map(Glob::as_str).collect();
            out.push_str(&format!(" {}={}", p.key, globs.join("|")));
        }
        out
    }
}

/// What a GraphQL rule matches in one operation (spec §1.6, §1.8).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GraphqlMatcher {
    /// `query`, `mutation`, `subscription` (compared without case), or `*`.
    pub operation_type: String,
    /// A glob (`.` delimits) over the operation's name; `None` matches any (or none).
    pub operation_name: Option<Glob>,
    /// Root-field globs (`.` delimits); empty matches any.
    pub fields: Vec<Glob>,
}

impl GraphqlMatcher {
    pub(crate) fn summary(&self) -> String {
        let mut out = format!("graphql {}", self.operation_type);
        if let Some(n) = &self.operation_name {
            out.push_str(&format!(" name={}", n.as_str()));
        }
        if !self.fields.is_empty() {
            let f: Vec<&str> = self.fields.iter().map(Glob::as_str).collect();
            out.push_str(&format!(" fields={}", f.join("|")));
        }
        out
    }
}

/// An operation the registry of persisted queries trusts (`graphql_persisted_queries`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegisteredOperation {
    pub operation_type: String,
    pub operation_name: Option<String>,
    pub fields: Vec<String>,
}

/// An endpoint's GraphQL options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GraphqlOptions {
    /// The most body bytes read to judge a request (64 KiB by default).
    pub max_body_bytes: usize,
    /// `persisted_queries: allow_registered`: hash-only queries in the registry pass.
    pub allow_registered: bool,
    /// `graphql_persisted_queries`, by id or hash.
    pub registry: std::collections::BTreeMap<String, RegisteredOperation>,
    /// A WebSocket endpoint whose client messages are judged as GraphQL operations (it has
    /// GraphQL rules or a registry).
    pub websocket_policy: bool,
}

impl Default for GraphqlOptions {
    fn default() -> Self {
        GraphqlOptions {
            max_body_bytes: 64 * 1024,
            allow_registered: false,
            registry: std::collections::BTreeMap::new(),
            websocket_policy: false,
        }
    }
}

/// An endpoint's JSON-RPC and MCP options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RpcOptions {
    /// The most body bytes read to judge a request (64 KiB by default).
    pub max_body_bytes: usize,
    /// MCP: `tools/call` names must match `^[A-Za-z0-9_.-]{1,128}$`.
    pub strict_tool_names: bool,
    /// MCP: every method is allowed unless a rule narrows `tools/call` by tool.
    pub allow_all_known_methods: bool,
}

impl Default for RpcOptions {
    fn default() -> Self {
        RpcOptions {
            max_body_bytes: 64 * 1024,
            strict_tool_names: true,
            allow_all_known_methods: false,
        }
    }
}

/// An endpoint's `path`: which requests on host:port this endpoint's L7 settings govern.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PathSelector {
    All,
    /// Compiled so that `/x/**` also covers `/x` (spec §13 row 12).
    Glob(Glob),
    /// A `path` that is not a valid glob, accepted in `--compat openshell` as the reference
    /// reads it: it selects only the request path equal to this text.
    Literal(String),
    /// `P/**` with glob characters in `P`, accepted in `--compat openshell` as the reference
    /// selects it: only paths below the literal text `P` (the field holds `P`).
    LiteralPrefix(String),
}

impl PathSelector {
    pub fn is_match(&self, path: &str) -> bool {
        match self {
            PathSelector::All => true,
            PathSelector::Glob(g) => g.is_match(path),
            PathSelector::Literal(l) => l == path,
            PathSelector::LiteralPrefix(p) => path
                .strip_prefix(p.as_str())
                .is_some_and(|rest| rest.starts_with('/')),
        }
    }

    /// The reference's `path_specificity`: the count of characters other than `*`.
    pub(super) fn specificity(&self) -> usize {
        match self {
            PathSelector::All => 0,
            PathSelector::Glob(g) => g.specificity(),
            PathSelector::Literal(l) => l.chars().filter(|&c| c != '*').count(),
            // `P/**`: the characters of `P` and the `/`.
            PathSelector::LiteralPrefix(p) => p.chars().filter(|&c| c != '*').count() + 1,
        }
    }

    pub fn intersects(&self, other: &PathSelector) -> bool {
        match (self, other) {
            (PathSelector::All, _) | (_, PathSelector::All) => true,
            (PathSelector::Glob(a), PathSelector::Glob(b)) => a.intersects(b),
            (PathSelector::Literal(l), o) | (o, PathSelector::Literal(l)) => o.is_match(l),
            // A witness below the prefix: enough for the ambiguity check's purpose.
            (PathSelector::LiteralPrefix(p), o) | (o, PathSelector::LiteralPrefix(p)) => {
                o.is_match(&format!("{p}/x"))
            }
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            PathSelector::All => "",
            PathSelector::Glob(g) => g.as_str(),
            PathSelector::Literal(l) => l,
            PathSelector::LiteralPrefix(p) => p,
        }
    }
}

/// `allowed_ips`: the valid networks, and whether the document also listed unusable ones
/// (accepted only in `--compat openshell`, where such an endpoint refuses every address).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllowedIps {
    pub nets: Vec<IpNet>,
    pub has_invalid: bool,
}

impl AllowedIps {
    pub fn is_empty(&self) -> bool {
        self.nets.is_empty() && !self.has_invalid
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub entry: PolicyKey,
    pub index: usize,
    pub location: Location,
    pub host: HostPattern,
    pub ports: Vec<u16>,
    pub selector: PathSelector,
    pub protocol: Protocol,
    pub tls: TlsMode,
    pub enforcement: Enforcement,
    /// True when `enforcement` was not written (and so is the reference's `audit`).
    pub enforcement_defaulted: bool,
    /// The enforcement the ambiguity check compares: the reference lower-cases the value
    /// there (`Enforce` is `enforce`), while requests are judged by `enforcement` (where only
    /// `enforce` exactly enforces).
    pub enforcement_for_ambiguity: Enforcement,
    pub access: Option<Access>,
    pub rules: Vec<Rule>,
    pub deny_rules: Vec<Rule>,
    pub allowed_ips: AllowedIps,
    pub allow_encoded_slash: bool,
    pub request_body_credential_rewrite: bool,
    pub websocket_credential_rewrite: bool,
    pub allow_uninspected_credentials: bool,
    /// JSON-RPC and MCP options (defaults elsewhere).
    pub rpc: RpcOptions,
    /// GraphQL options (defaults elsewhere).
    pub graphql: GraphqlOptions,
    /// `credential_signing`: requests are signed again with the bound AWS keys.
    pub signing: Option<Signing>,
    /// `credential_binding.provider`: the provider profile (by id) whose credentials this
    /// endpoint binds (spec §3.4).
    pub credential_binding: Option<String>,
}

impl Endpoint {
    /// The field path, e.g. `network_policies.gh.endpoints[0]`.
    pub fn field(&self) -> String {
        format!("network_policies.{}.endpoints[{}]", self.entry, self.index)
    }

    /// Requests on this endpoint are inspected (L7 protocol and TLS not skipped).
    pub fn inspects_requests(&self) -> bool {
        self.protocol.is_l7() && self.tls == TlsMode::Auto
    }

    /// `host:port,port[path]` as in the reference's ambiguity messages.
    pub fn describe(&self) -> String {
        let ports: Vec<String> = self.ports.iter().map(u16::to_string).collect();
        // An IPv6 literal in brackets, as before any port (`sluice-addr`).
        format!(
            "{}:{}{}",
            sluice_addr::UriHost(&self.host.to_string()),
            ports.join(","),
            self.selector.as_str()
        )
    }
}

/// A `binaries[].path`: a literal path, or a glob when it contains `*` (spec §13 row 1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BinaryMatcher {
    Exact(String),
    /// `*` alone: any executable, even a relative or empty path.
    Any,
    Glob(Glob),
}

impl BinaryMatcher {
    pub fn is_match(&self, exe: &str) -> bool {
        match self {
            BinaryMatcher::Exact(p) => p == exe,
            BinaryMatcher::Any => true,
            BinaryMatcher::Glob(g) => g.is_match(exe),
        }
    }
}

/// Who is asking: the kernel-resolved executable, its ancestors' executables (nearest first)
/// and the absolute paths from their command lines (shown in reasons, never used to grant);
/// or, through a shared gateway, a tenant whose program sluice cannot see.
#[derive(Clone, Copy, Debug)]
pub struct Caller<'a> {
    pub exe: &'a str,
    pub ancestors: &'a [String],
    pub cmdline: &'a [String],
    /// A gateway tenant's name: the program is unknown, so only an entry (or a profile)
    /// whose `binaries` match every program applies (see `Entry::admits`).
    pub tenant: Option<&'a str>,
}

impl<'a> Caller<'a> {
    /// A gateway tenant, known by name only.
    pub fn tenant(name: &'a str) -> Caller<'a> {
        Caller {
            exe: "",
            ancestors: &[],
            cmdline: &[],
            tenant: Some(name),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Binary {
    pub source: String,
    pub matcher: BinaryMatcher,
    pub location: Location,
}

impl Binary {
    /// Whether this pattern matches every program: `*`, `**` or `/**`.
    pub fn matches_every_program(&self) -> bool {
        matches!(self.matcher, BinaryMatcher::Any) || matches!(self.source.as_str(), "**" | "/**")
    }

    /// Whether `caller` is this binary: its executable or an ancestor's matches; a gateway
    /// tenant (whose program is unknown) only where the pattern matches every program.
    pub fn admits(&self, caller: &Caller<'_>) -> bool {
        if caller.tenant.is_some() {
            return self.matches_every_program();
        }
        self.matcher.is_match(caller.exe)
            || caller.ancestors.iter().any(|a| self.matcher.is_match(a))
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub key: PolicyKey,
    pub name: String,
    pub location: Location,
    pub endpoints: Vec<Endpoint>,
    pub binaries: Vec<Binary>,
}

impl Entry {
    /// Whether the caller's exe or any ancestor is one of this entry's binaries (spec §2.3).
    pub(super) fn admits(&self, caller: &Caller<'_>) -> bool {
        self.binaries.iter().any(|b| b.admits(caller))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LandlockCompat {
    BestEffort,
    HardRequirement,
}

/// `process.run_as_user` / `run_as_group`: the literal `sandbox` or a numeric id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunAs {
    Sandbox,
    Id(u32),
}

/// The static sections, which `sluice exec` turns into shim flags.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sandbox {
    pub include_workdir: Option<bool>,
    pub read_only: Vec<String>,
    pub read_write: Vec<String>,
    pub landlock: Option<LandlockCompat>,
    pub run_as_user: Option<RunAs>,
    pub run_as_group: Option<RunAs>,
}
