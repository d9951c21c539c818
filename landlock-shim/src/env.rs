//! The child's environment, built from scratch (spec §1.9). Pure.
//!
//! Owns which variables pass through from the supervisor (a short allow-list: the supervisor's
//! environment holds credentials), the defaults (HOME, USER, PATH, TMPDIR... under rw roots),
//! the proxy and CA variables, and the precedence of `--env` overrides. Does not read the
//! process environment or any file itself: callers hand in the inherited variables and the
//! user name.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::net::SocketAddr;
use std::path::Path;

use crate::cli::AbsPath;

/// Inherited variables that carry no secrets and that terminals and locales need.
const PASS_THROUGH: &[&str] = &["TERM", "LANG", "TZ", "COLUMNS", "LINES"];

/// Default search path when `--env PATH=...` is not given.
pub const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// `NO_PROXY`/`no_proxy`: loopback only, identical in both cases.
pub const NO_PROXY: &str = "localhost,127.0.0.1,::1";

/// Variables that *replace* the trust store: they get the combined bundle.
pub const CA_BUNDLE_VARS: &[&str] = &[
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "GIT_SSL_CAINFO",
    "PIP_CERT",
    "CARGO_HTTP_CAINFO",
    "AWS_CA_BUNDLE",
];

/// What the environment is built from, besides the inherited variables.
#[derive(Debug)]
pub struct EnvSpec<'a> {
    /// The proxy address.
    pub proxy: SocketAddr,
    /// Combined CA bundle.
    pub ca_bundle: Option<&'a AbsPath>,
    /// Proxy CA alone (`NODE_EXTRA_CA_CERTS` is additive).
    pub ca_cert: Option<&'a AbsPath>,
    /// Read-write roots: HOME and TMPDIR default to one of them.
    pub rw: &'a [AbsPath],
    /// Working directory, preferred as HOME when it lies under an rw root.
    pub workdir: Option<&'a AbsPath>,
    /// Login name of the target uid (USER, LOGNAME).
    pub user: &'a str,
    /// `--env` entries, applied last.
    pub overrides: &'a [(OsString, OsString)],
}

/// The child's environment, ordered by name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChildEnv(BTreeMap<OsString, OsString>);

impl ChildEnv {
    /// One variable.
    pub fn get(&self, key: &str) -> Option<&OsStr> {
        self.0.get(OsStr::new(key)).map(OsString::as_os_str)
    }

    /// All variables, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&OsString, &OsString)> {
        self.0.iter()
    }

    fn set(&mut self, key: &str, value: impl Into<OsString>) {
        self.0.insert(key.into(), value.into());
    }
}

fn passes_through(key: &OsStr) -> bool {
    key.to_str()
        .is_some_and(|k| PASS_THROUGH.contains(&k) || k.starts_with("LC_"))
}

fn rw_covers(rw: &[AbsPath], path: &AbsPath) -> bool {
    rw.iter().any(|root| path.is_within(root))
}

/// HOME: the workdir if writable, else the first rw root outside `/dev`, else a path that
/// does not exist (as for `nobody`).
fn home(spec: &EnvSpec<'_>) -> OsString {
    if let Some(dir) = spec.workdir.filter(|d| rw_covers(spec.rw, d)) {
        return dir.as_path().into();
    }
    spec.rw
        .iter()
        .find(|root| !root.as_path().starts_with("/dev"))
        .map(|root| root.as_path().into())
        .unwrap_or_else(|| "/nonexistent".into())
}

/// Builds the environment: pass-through allow-list, defaults, proxy and CA variables, then
/// `--env` overrides.
pub fn build<I>(inherited: I, spec: &EnvSpec<'_>) -> ChildEnv
where
    I: IntoIterator<Item = (OsString, OsString)>,
{
    let mut env = ChildEnv::default();
    for (key, value) in inherited {
        if passes_through(&key) {
            env.0.insert(key, value);
        }
    }

    let home = home(spec);
    let tmp = AbsPath::parse(OsStr::new("/tmp")).ok();
    let tmpdir: OsString = match tmp {
        Some(tmp) if rw_covers(spec.rw, &tmp) => "/tmp".into(),
        _ => home.clone(),
    };
    env.set("XDG_CACHE_HOME", Path::new(&home).join(".cache"));
    env.set("HOME", home);
    env.set("TMPDIR", tmpdir);
    env.set("USER", spec.user);
    env.set("LOGNAME", spec.user);
    env.set("SHELL", "/bin/sh");
    env.set("PATH", DEFAULT_PATH);

    // curl reads only the lowercase http_proxy (httpoxy); Go reads uppercase first: set both.
    let proxy_url = format!("http://{}", spec.proxy);
    for key in ["HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy"] {
        env.set(key, proxy_url.as_str());
    }
    env.set("NO_PROXY", NO_PROXY);
    env.set("no_proxy", NO_PROXY);
    env.set("NODE_USE_ENV_PROXY", "1");

    if let Some(bundle) = spec.ca_bundle {
        for key in CA_BUNDLE_VARS {
            env.set(key, bundle.as_path());
        }
    }
    if let Some(cert) = spec.ca_cert {
        env.set("NODE_EXTRA_CA_CERTS", cert.as_path());
    }

    for (key, value) in spec.overrides {
        env.0.insert(key.clone(), value.clone());
    }
    env
}

/// The login name of `uid` in a passwd(5) file's contents, without NSS.
pub fn user_name(passwd: &str, uid: u32) -> Option<String> {
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        let name = fields.next()?;
        let entry_uid: u32 = fields.nth(1)?.parse().ok()?;
        (entry_uid == uid && !name.is_empty()).then(|| name.to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn abs(p: &str) -> AbsPath {
        AbsPath::parse(OsStr::new(p)).unwrap()
    }

    fn inherited() -> Vec<(OsString, OsString)> {
        [
            ("SECRET_TOKEN", "s3cret"),
            ("AWS_SECRET_ACCESS_KEY", "k"),
            ("PATH", "/root/.cargo/bin:/usr/bin"),
            ("HOME", "/root"),
            ("TERM", "xterm"),
            ("LC_ALL", "C.UTF-8"),
            ("LANG", "C"),
            ("HTTPS_PROXY", "http://evil:1"),
        ]
        .into_iter()
        .map(|(k, v)| (k.into(), v.into()))
        .collect()
    }

    fn spec<'a>(rw: &'a [AbsPath], overrides: &'a [(OsString, OsString)]) -> EnvSpec<'a> {
        EnvSpec {
            proxy: "127.0.0.1:3128".parse().unwrap(),
            ca_bundle: None,
            ca_cert: None,
            rw,
            workdir: None,
            user: "nobody",
            overrides,
        }
    }

    #[test]
    fn supervisor_variables_do_not_pass() {
        let rw = [abs("/work")];
        let env = build(inherited(), &spec(&rw, &[]));
        assert_eq!(env.get("SECRET_TOKEN"), None);
        assert_eq!(env.get("AWS_SECRET_ACCESS_KEY"), None);
        assert_eq!(env.get("TERM"), Some(OsStr::new("xterm")));
        assert_eq!(env.get("LC_ALL"), Some(OsStr::new("C.UTF-8")));
        assert_eq!(env.get("LANG"), Some(OsStr::new("C")));
        assert_eq!(env.get("PATH"), Some(OsStr::new(DEFAULT_PATH)));
        assert_eq!(env.get("HOME"), Some(OsStr::new("/work")));
    }

    #[test]
    fn proxy_variables_come_from_the_proxy_address_in_both_cases() {
        let env = build(inherited(), &spec(&[], &[]));
        for key in ["HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy"] {
            assert_eq!(
                env.get(key),
                Some(OsStr::new("http://127.0.0.1:3128")),
                "{key}"
            );
        }
        assert_eq!(env.get("NO_PROXY"), Some(OsStr::new(NO_PROXY)));
        assert_eq!(env.get("no_proxy"), Some(OsStr::new(NO_PROXY)));
        assert_eq!(env.get("NODE_USE_ENV_PROXY"), Some(OsStr::new("1")));
        assert_eq!(env.get("ALL_PROXY"), None);
        assert_eq!(env.get("HOME"), Some(OsStr::new("/nonexistent")));
    }

    #[test]
    fn ipv6_proxy_is_bracketed() {
        let mut s = spec(&[], &[]);
        s.proxy = "[::1]:8080".parse().unwrap();
        let env = build([], &s);
        assert_eq!(
            env.get("https_proxy"),
            Some(OsStr::new("http://[::1]:8080"))
        );
    }

    #[test]
    fn ca_variables() {
        let bundle = abs("/run/sluice/ca-bundle.pem");
        let cert = abs("/run/sluice/ca.pem");
        let mut s = spec(&[], &[]);
        s.ca_bundle = Some(&bundle);
        s.ca_cert = Some(&cert);
        let env = build([], &s);
        for key in CA_BUNDLE_VARS {
            assert_eq!(env.get(key), Some(bundle.as_path().as_os_str()), "{key}");
        }
        assert_eq!(
            env.get("NODE_EXTRA_CA_CERTS"),
            Some(cert.as_path().as_os_str())
        );
    }

    #[test]
    fn home_tmpdir_and_overrides() {
        let rw = [abs("/dev/null"), abs("/tmp"), abs("/work/ws")];
        let workdir = abs("/work/ws/project");
        let overrides = [
            (OsString::from("PATH"), OsString::from("/opt/bin")),
            (
                OsString::from("API_KEY"),
                OsString::from("openshell:resolve:env:API_KEY"),
            ),
            (
                OsString::from("https_proxy"),
                OsString::from("http://10.0.0.1:1"),
            ),
        ];
        let mut s = spec(&rw, &overrides);
        s.workdir = Some(&workdir);
        let env = build(inherited(), &s);
        assert_eq!(env.get("HOME"), Some(OsStr::new("/work/ws/project")));
        assert_eq!(
            env.get("XDG_CACHE_HOME"),
            Some(OsStr::new("/work/ws/project/.cache"))
        );
        assert_eq!(env.get("TMPDIR"), Some(OsStr::new("/tmp")));
        assert_eq!(env.get("PATH"), Some(OsStr::new("/opt/bin")));
        assert_eq!(
            env.get("API_KEY"),
            Some(OsStr::new("openshell:resolve:env:API_KEY"))
        );
        assert_eq!(
            env.get("https_proxy"),
            Some(OsStr::new("http://10.0.0.1:1"))
        );
        assert_eq!(
            env.get("HTTPS_PROXY"),
            Some(OsStr::new("http://127.0.0.1:3128"))
        );
    }

    #[test]
    fn home_skips_dev_roots() {
        let rw = [abs("/dev/null"), abs("/srv/agent")];
        let env = build([], &spec(&rw, &[]));
        assert_eq!(env.get("HOME"), Some(OsStr::new("/srv/agent")));
        assert_eq!(env.get("TMPDIR"), Some(OsStr::new("/srv/agent")));
    }

    #[test]
    fn user_name_from_passwd() {
        let passwd = "root:x:0:0:root:/root:/bin/bash\n\
                      nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n\
                      broken\n";
        assert_eq!(user_name(passwd, 65534).as_deref(), Some("nobody"));
        assert_eq!(user_name(passwd, 0).as_deref(), Some("root"));
        assert_eq!(user_name(passwd, 1000), None);
    }
}
