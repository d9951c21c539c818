//! The machine-readable codes of sluice's refusals (the `error` field of a refusal body),
//! one variant each; shared by the HTTP answers (`http::respond`) and the credential rules
//! that choose a refusal (`credentials`), so that neither imports the other for it.

/// The machine-readable code of a refusal (the `error` field of its body): one variant per
/// code sluice answers with, so that no code is a string written at a refusal site.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Code {
    BadRequest,
    NotAProxyRequest,
    HttpsRequiresConnect,
    UnsupportedProxyScheme,
    InvalidTarget,
    InvalidRequestTarget,
    InvalidMethodOverride,
    /// A JSON-RPC or MCP body that is not a valid JSON-RPC 2.0 message.
    InvalidJsonrpcRequest,
    /// A GraphQL request that does not parse, or whose body is compressed or multipart.
    InvalidGraphqlRequest,
    RequestAuthorityMismatch,
    RequestHeaderFieldsTooLarge,
    RequestBodyTooLarge,
    FormBodyEncoded,
    RequestTimeout,
    PolicyDenied,
    SsrfDenied,
    UninspectedCredentials,
    UnsupportedL7Protocol,
    TlsTerminationUnavailable,
    UpstreamUnreachable,
    UpstreamTimeout,
    TooManyConnections,
    AuditUnavailable,
    CallerConnectionLimit,
    CallerRateLimit,
    CredentialEndpointMismatch,
    CredentialPlacementMismatch,
    CredentialRequiresTls,
    CredentialUnavailable,
    /// A credential sluice refreshes itself has no valid token: its refreshes are failing.
    CredentialRefreshFailed,
    /// A `token_grant` credential has no current token (spec §3.5: `502 token_grant_failed`).
    TokenGrantFailed,
    CredentialResponseEncoded,
    CredentialResponsePartial,
    CredentialScanEncodedBody,
    CredentialInBody,
    CredentialInTrailers,
    ProxyAuthRequired,
    TooManyFailedLogins,
    /// A transparently redirected connection whose original destination is sluice itself.
    TransparentLoop,
    /// A transparently redirected connection whose original destination cannot be read.
    NoOriginalDestination,
    /// A transparent connection whose first bytes are neither a TLS ClientHello nor an
    /// HTTP head sluice can read.
    MalformedClientHello,
    /// A transparent TLS connection without SNI where the policy needs a name.
    TlsSniRequired,
    /// A transparent connection that names no host where the policy needs a name.
    HostNameRequired,
    /// A transparent connection's claimed name does not stand for its original destination.
    HostNameMismatch,
}

impl Code {
    /// The HTTP status every refusal with this code answers with: one per code, so that no
    /// refusal site chooses one.
    pub fn status(self) -> u16 {
        match self {
            Code::BadRequest
            | Code::NotAProxyRequest
            | Code::HttpsRequiresConnect
            | Code::UnsupportedProxyScheme
            | Code::InvalidTarget
            | Code::InvalidRequestTarget
            | Code::InvalidMethodOverride
            | Code::InvalidJsonrpcRequest
            | Code::InvalidGraphqlRequest
            | Code::NoOriginalDestination
            | Code::MalformedClientHello => 400,
            Code::RequestAuthorityMismatch
            | Code::PolicyDenied
            | Code::SsrfDenied
            | Code::UninspectedCredentials
            | Code::UnsupportedL7Protocol
            | Code::CredentialEndpointMismatch
            | Code::CredentialPlacementMismatch
            | Code::CredentialRequiresTls
            | Code::CredentialInBody
            | Code::CredentialInTrailers
            | Code::TransparentLoop
            | Code::TlsSniRequired
            | Code::HostNameRequired
            | Code::HostNameMismatch => 403,
            Code::ProxyAuthRequired => 407,
            Code::RequestTimeout => 408,
            Code::RequestBodyTooLarge => 413,
            Code::FormBodyEncoded | Code::CredentialScanEncodedBody => 415,
            Code::CallerConnectionLimit | Code::CallerRateLimit | Code::TooManyFailedLogins => 429,
            Code::RequestHeaderFieldsTooLarge => 431,
            Code::CredentialUnavailable => 500,
            Code::UpstreamUnreachable
            | Code::TokenGrantFailed
            | Code::CredentialResponseEncoded
            | Code::CredentialResponsePartial => 502,
            Code::TlsTerminationUnavailable
            | Code::TooManyConnections
            | Code::AuditUnavailable
            | Code::CredentialRefreshFailed => 503,
            Code::UpstreamTimeout => 504,
        }
    }

    /// The code as the body's `error` field spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Code::BadRequest => "bad_request",
            Code::NotAProxyRequest => "not_a_proxy_request",
            Code::HttpsRequiresConnect => "https_requires_connect",
            Code::UnsupportedProxyScheme => "unsupported_proxy_scheme",
            Code::InvalidTarget => "invalid_target",
            Code::InvalidRequestTarget => "invalid_request_target",
            Code::InvalidMethodOverride => "invalid_method_override",
            Code::InvalidJsonrpcRequest => "invalid_jsonrpc_request",
            Code::InvalidGraphqlRequest => "invalid_graphql_request",
            Code::RequestAuthorityMismatch => "request_authority_mismatch",
            Code::RequestHeaderFieldsTooLarge => "request_header_fields_too_large",
            Code::RequestBodyTooLarge => "request_body_too_large",
            Code::FormBodyEncoded => "form_body_encoded",
            Code::RequestTimeout => "request_timeout",
            Code::PolicyDenied => "policy_denied",
            Code::SsrfDenied => "ssrf_denied",
            Code::UninspectedCredentials => "uninspected_credentials",
            Code::UnsupportedL7Protocol => "unsupported_l7_protocol",
            Code::TlsTerminationUnavailable => "tls_termination_unavailable",
            Code::UpstreamUnreachable => "upstream_unreachable",
            Code::UpstreamTimeout => "upstream_timeout",
            Code::TooManyConnections => "too_many_connections",
            Code::AuditUnavailable => "audit_unavailable",
            Code::CallerConnectionLimit => "caller_connection_limit",
            Code::CallerRateLimit => "caller_rate_limit",
            Code::CredentialEndpointMismatch => "credential_endpoint_mismatch",
            Code::CredentialPlacementMismatch => "credential_placement_mismatch",
            Code::CredentialRequiresTls => "credential_requires_tls",
            Code::CredentialUnavailable => "credential_unavailable",
            Code::CredentialRefreshFailed => "credential_refresh_failed",
            Code::TokenGrantFailed => "token_grant_failed",
            Code::CredentialResponseEncoded => "credential_response_encoded",
            Code::CredentialResponsePartial => "credential_response_partial",
            Code::CredentialScanEncodedBody => "credential_scan_encoded_body",
            Code::CredentialInBody => "credential_in_body",
            Code::CredentialInTrailers => "credential_in_trailers",
            Code::ProxyAuthRequired => "proxy_auth_required",
            Code::TooManyFailedLogins => "too_many_failed_logins",
            Code::TransparentLoop => "transparent_loop",
            Code::NoOriginalDestination => "no_original_destination",
            Code::MalformedClientHello => "malformed_client_hello",
            Code::TlsSniRequired => "tls_sni_required",
            Code::HostNameRequired => "host_name_required",
            Code::HostNameMismatch => "host_name_mismatch",
        }
    }
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<&str> for Code {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}
