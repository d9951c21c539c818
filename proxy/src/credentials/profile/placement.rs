//! Where a credential may be swapped in, derived once from a profile credential's
//! `auth_style`, `header_name`, `query_param` and `path_template`.

use super::{AuthStyle, CredentialSpec, Placement};

impl CredentialSpec {
    /// Where this credential goes, from its placement fields; an error for fields that
    /// contradict each other or a style without the field it needs.
    pub(super) fn derive_placement(&self) -> Result<Placement, String> {
        let spec = self;
        let header = spec.header_name.as_ref().map(|h| h.to_ascii_lowercase());
        let query = spec.query_param.clone();
        let template = spec.path_template.clone();
        let given: Vec<&str> = [
            ("header_name", header.is_some()),
            ("query_param", query.is_some()),
            ("path_template", template.is_some()),
        ]
        .iter()
        .filter(|(_, set)| *set)
        .map(|(name, _)| *name)
        .collect();
        let only = |allowed: &str| -> Result<(), String> {
            match given.iter().find(|g| **g != allowed) {
                Some(extra) => Err(format!(
                    "`{extra}` does not apply to auth_style `{}`",
                    spec.auth_style.map_or("", AuthStyle::as_str)
                )),
                None => Ok(()),
            }
        };
        match spec.auth_style {
            Some(AuthStyle::Bearer | AuthStyle::Basic) => {
                only("header_name")?;
                Ok(Placement::Header(
                    header.unwrap_or_else(|| "authorization".to_string()),
                ))
            }
            Some(AuthStyle::Header) => {
                only("header_name")?;
                header
                    .map(Placement::Header)
                    .ok_or_else(|| "auth_style `header` needs `header_name`".to_string())
            }
            Some(AuthStyle::Query) => {
                only("query_param")?;
                query
                    .map(Placement::Query)
                    .ok_or_else(|| "auth_style `query` needs `query_param`".to_string())
            }
            Some(AuthStyle::Path) => {
                only("path_template")?;
                Ok(Placement::Path(template))
            }
            None => match (header, query, template) {
                (None, None, None) => Ok(Placement::AnyHeader),
                (Some(h), None, None) => Ok(Placement::Header(h)),
                (None, Some(q), None) => Ok(Placement::Query(q)),
                (None, None, Some(t)) => Ok(Placement::Path(Some(t))),
                _ => Err(format!(
                    "{} are given together: say where the credential goes with `auth_style`",
                    given.join(" and ")
                )),
            },
        }
    }
}
