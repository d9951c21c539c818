//! SigV4 signing of an endpoint (spec §3.8): `credential_signing`, `signing_service` and
//! `signing_region`, checked for a known mode, a service, names that can go into a
//! signature's scope, and requests sluice inspects.
//!
//! It does not sign: the proxy's credential layer does, with what this module built.

use crate::model::{Protocol, Signing, SigningMode, TlsMode};
use crate::raw::RawEndpoint;
use crate::report::{Sub, Validator};

impl Validator<'_> {
    /// `credential_signing`, `signing_service`, `signing_region` (spec §3.8): a known mode,
    /// a service, names that can go into a signature's scope, and a request sluice sees.
    pub(super) fn signing(
        &mut self,
        raw: &RawEndpoint,
        protocol: Protocol,
        tls: TlsMode,
        path: &str,
        ok: &mut bool,
    ) -> Option<Signing> {
        let field = |name: &'static str| Sub(&path, name);
        let scope_name = |s: &str| {
            !s.is_empty()
                && s.len() <= 64
                && s.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        };
        for (name, value) in [
            ("signing_service", &raw.signing_service),
            ("signing_region", &raw.signing_region),
        ] {
            if let Some(v) = value
                && !scope_name(&v.value)
            {
                self.error(
                    v.pos,
                    field(name),
                    format!(
                        "`{}` is not an AWS {} name (lower-case letters, digits and `-`)",
                        v.value,
                        name.trim_start_matches("signing_")
                    ),
                );
                *ok = false;
            }
        }
        let Some(written) = &raw.credential_signing else {
            for (name, value) in [
                ("signing_service", &raw.signing_service),
                ("signing_region", &raw.signing_region),
            ] {
                if let Some(v) = value {
                    self.warning(
                        v.pos,
                        field(name),
                        format!("`{name}` has no effect without `credential_signing`"),
                    );
                }
            }
            return None;
        };
        let Some(mode) = SigningMode::parse(&written.value) else {
            self.error(
                written.pos,
                field("credential_signing"),
                format!(
                    "unknown credential_signing `{}`; expected one of: sigv4, sigv4:body, sigv4:no_body",
                    written.value
                ),
            );
            *ok = false;
            return None;
        };
        let Some(service) = raw.signing_service.as_ref().filter(|s| !s.value.is_empty()) else {
            self.error(
                written.pos,
                field("credential_signing"),
                "`credential_signing` needs `signing_service` (the AWS service the signature is for: `s3`, `bedrock`, `sts`, ...)",
            );
            *ok = false;
            return None;
        };
        if raw
            .request_body_credential_rewrite
            .as_ref()
            .is_some_and(|v| v.value)
        {
            self.error(
                written.pos,
                field("credential_signing"),
                "`credential_signing` and `request_body_credential_rewrite` cannot both be set: the signature covers the body as it is sent",
            );
            *ok = false;
        }
        if (protocol != Protocol::Rest || tls == TlsMode::Skip)
            && !self.lenient(
                written.pos,
                field("credential_signing"),
                "`credential_signing` signs only requests sluice inspects: it needs `protocol: rest` without `tls: skip`",
                "relays such requests unsigned",
            )
        {
            *ok = false;
        }
        Some(Signing {
            mode,
            service: service.value.clone(),
            region: raw.signing_region.as_ref().map(|r| r.value.clone()),
        })
    }
}
