//! Fuzz entry points for the files and logs sluice reads (the tenants file, audit lines as
//! `sluice audit` reads them back, policy files and provider profiles), as opposed to the
//! bytes a client or upstream sends (`fuzz.rs`).

/// A tenants file (`sluice run --tenants FILE`): read and checked, every problem reported
/// with a position inside the file; every tenant read has a name unique in the file.
pub fn tenants_file(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match crate::tenants::file::parse("tenants.yaml", text, &|name| name.starts_with('S')) {
        Ok(specs) => {
            let mut names: Vec<&str> = specs.iter().map(|t| &*t.name).collect();
            names.sort_unstable();
            let before = names.len();
            names.dedup();
            assert_eq!(names.len(), before, "two tenants of one name");
        }
        Err(diags) => assert!(!diags.is_empty(), "refused without a reason"),
    }
}

/// Lines of an audit log as `sluice audit` reads them back (they carry what clients sent:
/// hosts, paths, reasons): each parsed, printed as `sluice audit` prints it, counted for
/// `--summary` and drafted by `sluice policy suggest`. A printed line holds no control or
/// invisible format character (no terminal escape reaches the operator's terminal).
pub fn audit_lines(data: &[u8]) {
    use crate::audit::report::{self, Colour};
    let text = String::from_utf8_lossy(data);
    let mut summary = report::Summary::default();
    let mut draft = crate::audit::suggest::Draft::default();
    for line in text.lines() {
        let Ok(record) = crate::audit::read::parse(line) else {
            continue;
        };
        let shown = report::line(&record, Colour::Off);
        assert!(
            !shown
                .chars()
                .any(|c| c.is_control() || crate::audit::shorthand::is_invisible_format(c)),
            "a printed line holds a control character: {shown:?}"
        );
        let _ = report::line(&record, Colour::On);
        summary.add(&record);
        draft.add(&record);
    }
    let _ = summary.render();
    let _ = draft.render("fuzz.jsonl");
}

/// A policy file, loaded strictly and with the reference's (OpenShell) compatibility.
pub fn policy_yaml(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for compat in [
        crate::policy::Compat::Strict,
        crate::policy::Compat::OpenShell,
    ] {
        let source = crate::policy::Source {
            name: "policy.yaml".into(),
            text: text.into(),
        };
        let _ = crate::policy::load(&[source], compat);
    }
}

/// A provider profile file (`--providers`), loaded.
pub fn provider_profile(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let source = crate::policy::Source {
        name: "profile.yaml".into(),
        text: text.into(),
    };
    let _ = crate::credentials::profile::load(&[source]);
}
