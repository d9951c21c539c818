//! Unit tests of the command-line parser: defaults, refusals, normalization.

use super::*;

fn args(list: &[&str]) -> Vec<OsString> {
    list.iter().map(OsString::from).collect()
}

fn run(list: &[&str]) -> Result<Policy, CliError> {
    match parse(args(list), None)? {
        Parsed::Run(policy) => Ok(*policy),
        other => panic!("expected Run, got {other:?}"),
    }
}

const MINIMAL: &[&str] = &["--proxy", "127.0.0.1:3128", "--exec", "/usr/bin"];

fn with(extra: &[&str]) -> Vec<&'static str> {
    let mut all: Vec<&'static str> = MINIMAL.to_vec();
    for e in extra {
        all.push(Box::leak(e.to_string().into_boxed_str()));
    }
    all
}

#[test]
fn minimal_policy_has_documented_defaults() {
    let p = run(&with(&["--", "curl", "-s"])).unwrap();
    assert_eq!(p.uid, DEFAULT_ID);
    assert_eq!(p.gid, DEFAULT_ID);
    assert_eq!(p.compat, Compat::Strict);
    assert_eq!(p.command.program, "curl");
    assert_eq!(p.command.args, args(&["-s"]));
    assert_eq!(p.connect_ports(), vec![3128]);
    assert!(p.interp_grant);
    assert_eq!(p.disabled, DisabledLayers::default());
}

#[test]
fn command_without_double_dash_keeps_its_flags() {
    let p = run(&with(&["ls", "--ro", "-l"])).unwrap();
    assert_eq!(p.command.program, "ls");
    assert_eq!(p.command.args, args(&["--ro", "-l"]));
}

#[test]
fn paths_are_normalized_and_must_be_absolute() {
    let p = run(&with(&["--ro", "/usr//lib/./x/", "--", "true"])).unwrap();
    assert_eq!(p.fs.ro[0].as_path(), Path::new("/usr/lib/x"));
    assert!(matches!(
        run(&with(&["--rw", "tmp", "--", "true"])),
        Err(CliError::InvalidValue { flag: "--rw", .. })
    ));
    assert!(matches!(
        run(&with(&["--rw", "/tmp/../etc", "--", "true"])),
        Err(CliError::InvalidValue { flag: "--rw", .. })
    ));
}

#[test]
fn root_ids_are_refused() {
    for flag in ["--uid", "--gid"] {
        let err = run(&with(&[flag, "0", "--", "true"])).unwrap_err();
        assert!(err.to_string().contains("root"), "{err}");
    }
}

#[test]
fn allow_lists_must_not_be_empty() {
    let err = run(&["--proxy", "127.0.0.1:1", "--", "true"]).unwrap_err();
    assert!(matches!(err, CliError::EmptyAllowList));
    let err = run(&["--proxy", "127.0.0.1:1", "--ro", "/usr", "--", "true"]).unwrap_err();
    assert!(matches!(err, CliError::NoExecPath));
}

#[test]
fn proxy_and_command_are_required() {
    assert!(matches!(
        run(&["--exec", "/usr/bin", "--", "true"]),
        Err(CliError::Missing(_))
    ));
    assert!(matches!(run(MINIMAL), Err(CliError::MissingCommand)));
    assert!(matches!(
        run(&with(&["--proxy", "[::1]:8080", "--", "true"])),
        Err(CliError::Repeated("--proxy"))
    ));
    assert!(matches!(
        run(&["--proxy", "[::1]:0", "--exec", "/usr/bin", "--", "true"]),
        Err(CliError::InvalidValue {
            flag: "--proxy",
            ..
        })
    ));
}

#[test]
fn env_entries_split_at_the_first_equals() {
    let p = run(&with(&["--env", "A=b=c", "--env", "EMPTY=", "--", "true"])).unwrap();
    assert_eq!(
        p.env,
        vec![("A".into(), "b=c".into()), ("EMPTY".into(), "".into())]
    );
    assert!(run(&with(&["--env", "=x", "--", "true"])).is_err());
    assert!(run(&with(&["--env", "novalue", "--", "true"])).is_err());
}

#[test]
fn compat_and_unconfined() {
    let p = run(&with(&[
        "--compat",
        "best-effort",
        "--allow-unconfined",
        "--",
        "t",
    ]))
    .unwrap();
    assert_eq!(p.compat, Compat::BestEffort);
    assert!(matches!(
        run(&with(&["--allow-unconfined", "--", "t"])),
        Err(CliError::UnconfinedInStrict)
    ));
    assert!(run(&with(&["--compat", "lenient", "--", "t"])).is_err());
}

#[test]
fn status_fd_must_not_be_a_standard_stream() {
    assert!(run(&with(&["--status-fd", "1", "--", "t"])).is_err());
    assert_eq!(
        run(&with(&["--status-fd", "3", "--", "t"]))
            .unwrap()
            .status_fd,
        Some(3)
    );
}

#[test]
fn transparent_ports_extend_the_connect_list_once() {
    let p = run(&with(&[
        "--transparent-port",
        "443",
        "--transparent-port",
        "3128",
        "--",
        "t",
    ]))
    .unwrap();
    assert_eq!(p.connect_ports(), vec![3128, 443]);
}

#[test]
fn unknown_flags_are_refused() {
    assert!(matches!(
        run(&with(&["--yaml", "x", "--", "t"])),
        Err(CliError::Syntax(_))
    ));
}

#[test]
fn help_and_version() {
    assert!(matches!(parse(args(&["--help"]), None), Ok(Parsed::Help)));
    assert!(matches!(
        parse(args(&["--version"]), None),
        Ok(Parsed::Version)
    ));
}

#[test]
fn within_is_component_wise() {
    let root = AbsPath::parse(OsStr::new("/work/ws")).unwrap();
    assert!(
        AbsPath::parse(OsStr::new("/work/ws/a"))
            .unwrap()
            .is_within(&root)
    );
    assert!(
        !AbsPath::parse(OsStr::new("/work/wsx"))
            .unwrap()
            .is_within(&root)
    );
}
