//! The `refresh` block of a provider profile credential, read: the strategy and its fields
//! (`token_url`, `scopes`, the timings, `material`), and `additional_outputs`, each sibling
//! it names checked across the profile's credentials (`co_minted`). Part of the profile
//! schema (`schema.rs`); the typed block is `refresh_block.rs`.

use crate::policy::diag::join_field;
use crate::policy::yaml::Node;

use super::super::refresh_block::{
    DEFAULT_MAX_LIFETIME, DEFAULT_REFRESH_BEFORE, Output, Refresh, Strategy,
};
use super::super::{CredentialName, CredentialSpec};
use super::Reader;

const REFRESH_FIELDS: &[&str] = &[
    "strategy",
    "token_url",
    "scopes",
    "refresh_before_seconds",
    "max_lifetime_seconds",
    "material",
    "additional_outputs",
];

impl Reader<'_> {
    /// `additional_outputs`: each names a sibling credential (declared, without its own
    /// `refresh`, with the one env var the SigV4 signer reads that value under), which is then
    /// marked as refreshed by the primary; the primary maps to `AWS_ACCESS_KEY_ID`.
    pub(super) fn co_minted(
        &mut self,
        node: &Node<'_>,
        credentials: &mut [CredentialSpec],
    ) -> bool {
        let mut ok = true;
        let mut marks = Vec::new();
        for (i, c) in credentials.iter().enumerate() {
            let Some(refresh) = &c.refresh else { continue };
            if refresh.strategy != Strategy::AwsStsAssumeRole {
                continue;
            }
            let field = format!("credentials[{i}].refresh.additional_outputs");
            if c.env_vars.len() != 1 || c.env_vars[0].as_str() != Output::PRIMARY_ENV_VAR {
                self.error(node.pos, &format!("credentials[{i}].env_vars"), format!("`aws_sts_assume_role` mints the access key id: credential `{}` must have `env_vars: [AWS_ACCESS_KEY_ID]`", c.name));
                ok = false;
            }
            for output in Output::ALL {
                if !refresh.outputs.iter().any(|(o, _)| *o == output) {
                    self.error(node.pos, &field, format!("`aws_sts_assume_role` needs an output `{}` naming the credential it goes to", output.name()));
                    ok = false;
                }
            }
            for (output, name) in &refresh.outputs {
                let Some(j) = credentials.iter().position(|s| &s.name == name) else {
                    self.error(
                        node.pos,
                        &field,
                        format!(
                            "output `{}` names credential `{name}`, which is not declared",
                            output.name()
                        ),
                    );
                    ok = false;
                    continue;
                };
                let sibling = &credentials[j];
                if sibling.refresh.is_some() || j == i {
                    self.error(node.pos, &field, format!("credential `{name}` receives output `{}`: it must not have its own `refresh`", output.name()));
                    ok = false;
                } else if sibling.env_vars.len() != 1
                    || sibling.env_vars[0].as_str() != output.env_var()
                {
                    self.error(node.pos, &field, format!("credential `{name}` receives output `{}`: it must have `env_vars: [{}]`", output.name(), output.env_var()));
                    ok = false;
                } else {
                    marks.push((j, c.name.clone()));
                }
            }
        }
        for (j, by) in marks {
            credentials[j].refreshed_by = Some(by);
        }
        ok
    }

    /// `refresh`: `strategy: static` is what sluice does anyway (a note says so);
    /// `oauth2_refresh_token` and `oauth2_client_credentials` are read into a `Refresh`
    /// (`None` inside for `static`); any other strategy would leave a stale or missing secret
    /// if ignored, so it is refused by name.
    pub(super) fn refresh(&mut self, node: &Node<'_>, path: &str) -> Option<Option<Refresh>> {
        let fields = self.fields(node, path, REFRESH_FIELDS, &[])?;
        let strategy = fields
            .iter()
            .find(|(k, _)| *k == "strategy")
            .map(|(_, v)| *v);
        let field = join_field(path, "strategy");
        let Some(v) = strategy else {
            self.error(node.pos, path, "`refresh` needs a `strategy`");
            return None;
        };
        let text = self.string(v, &field)?;
        if text == "static" {
            self.warning(
                v.pos,
                &field,
                "`refresh` with `strategy: static` has no effect: sluice reads the secret once, at start",
            );
            return Some(None);
        }
        let Some(strategy) = Strategy::parse(&text) else {
            self.error(
                v.pos,
                &field,
                format!("unknown `refresh` strategy `{text}`; expected one of: static, external, oauth2_refresh_token, oauth2_client_credentials, google_service_account_jwt, aws_sts_assume_role"),
            );
            return None;
        };
        let mut ok = true;
        let mut refresh = Refresh {
            strategy,
            token_url: String::new(),
            scopes: Vec::new(),
            refresh_before: DEFAULT_REFRESH_BEFORE,
            max_lifetime: DEFAULT_MAX_LIFETIME,
            outputs: Vec::new(),
        };
        for (key, value) in fields {
            let field = join_field(path, key);
            match key {
                "token_url" => match self.string(value, &field) {
                    Some(url) if url.starts_with("https://") && url.len() > 8 => {
                        refresh.token_url = url
                    }
                    Some(url) => {
                        self.error(value.pos, &field, format!("`{url}` is not an https:// URL: sluice sends client secrets and refresh tokens only inside TLS"));
                        ok = false;
                    }
                    None => ok = false,
                },
                "scopes" => match self.list(value, &field) {
                    Some(items) => {
                        for (i, item) in items.iter().enumerate() {
                            match self.string(item, &format!("{field}[{i}]")) {
                                Some(s) => refresh.scopes.push(s),
                                None => ok = false,
                            }
                        }
                    }
                    None => ok = false,
                },
                "refresh_before_seconds" | "max_lifetime_seconds" => {
                    match self.int(value, &field) {
                        Some(n)
                            if (0..=86_400 * 366).contains(&n)
                                && (n > 0 || key == "refresh_before_seconds") =>
                        {
                            let d = std::time::Duration::from_secs(
                                u64::try_from(n).unwrap_or_default(),
                            );
                            if key == "max_lifetime_seconds" {
                                refresh.max_lifetime = d;
                            } else {
                                refresh.refresh_before = d;
                            }
                        }
                        Some(n) => {
                            self.error(value.pos, &field, format!("{n} seconds is out of range"));
                            ok = false;
                        }
                        None => ok = false,
                    }
                }
                "additional_outputs" if strategy == Strategy::AwsStsAssumeRole => {
                    match self.outputs(value, &field) {
                        Some(outputs) => refresh.outputs = outputs,
                        None => ok = false,
                    }
                }
                "additional_outputs" => {
                    self.error(
                        value.pos,
                        &field,
                        format!(
                            "`additional_outputs` applies to `aws_sts_assume_role`, not `{text}`"
                        ),
                    );
                    ok = false;
                }
                // Names only: the values come from `<first env var>_<NAME>`.
                "material" => ok &= self.list(value, &field).is_some(),
                _ => {}
            }
        }
        // STS defaults to the region's endpoint; `external` asks no endpoint.
        let needs_url = !matches!(strategy, Strategy::AwsStsAssumeRole | Strategy::External);
        if refresh.token_url.is_empty() && needs_url && ok {
            self.error(
                node.pos,
                path,
                format!("`refresh` strategy `{text}` needs a `token_url`"),
            );
            ok = false;
        }
        ok.then_some(Some(refresh))
    }

    /// `additional_outputs: [{output, credential}]`, each output once.
    pub(super) fn outputs(
        &mut self,
        node: &Node<'_>,
        path: &str,
    ) -> Option<Vec<(Output, CredentialName)>> {
        let items = self.list(node, path)?;
        let mut out: Vec<(Output, CredentialName)> = Vec::new();
        let mut ok = true;
        for (i, item) in items.iter().enumerate() {
            let field = format!("{path}[{i}]");
            let fields = self.fields(item, &field, &["output", "credential"], &[])?;
            let mut output = None;
            let mut credential = None;
            for (key, value) in fields {
                let f = join_field(&field, key);
                let Some(text) = self.string(value, &f) else {
                    ok = false;
                    continue;
                };
                match key {
                    "output" => match Output::parse(&text) {
                        Some(o) if out.iter().any(|(p, _)| *p == o) => {
                            self.error(value.pos, &f, format!("output `{text}` is listed twice"));
                            ok = false;
                        }
                        Some(o) => output = Some(o),
                        None => {
                            self.error(value.pos, &f, format!("`aws_sts_assume_role` has no output `{text}`; it mints `secret_access_key` and `session_token`"));
                            ok = false;
                        }
                    },
                    _ => match CredentialName::new(&text) {
                        Some(n) => credential = Some(n),
                        None => {
                            self.error(
                                value.pos,
                                &f,
                                format!("`{text}` is not a valid credential name"),
                            );
                            ok = false;
                        }
                    },
                }
            }
            match (output, credential) {
                (Some(o), Some(c)) => out.push((o, c)),
                _ if ok => {
                    self.error(
                        item.pos,
                        &field,
                        "an additional output needs `output` and `credential`",
                    );
                    ok = false;
                }
                _ => {}
            }
        }
        ok.then_some(out)
    }
}
