//! `sluice doctor`: does each common client reach the network through sluice, trusting its
//! CA? For curl, Python (urllib, requests), git, pip, npm and Node, when installed, it asks
//! `https://doctor.sluice.internal/<tool>` (answered by sluice itself) with the proxy and CA
//! settings of the environment, and prints, for each one that fails, what to set, or, when
//! it failed to write a file (`EACCES`), whether `HOME` is the cause.
//!
//! Inside `sluice exec` (the proxy variables are set) it checks the running sluice. Outside,
//! it starts a sluice of its own on loopback and gives the tools the environment `sluice
//! exec` would give them.

use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::Duration;

use super::run::{RunArgs, prepare};
use crate::listen;
use crate::pipeline::doctor::{HOST, OK_TEXT};

struct Check {
    name: &'static str,
    /// The program that must exist for the check to run.
    needs: &'static str,
    /// Shell command; `$URL` is the doctor URL for this tool.
    command: &'static str,
    /// Text in stdout or stderr that proves the request arrived.
    proof: &'static str,
    /// The variables the tool needs (all of which `sluice exec` sets).
    vars: &'static [&'static str],
    /// What the variables are for, shown when some are missing.
    advice: &'static str,
    /// Why the tool can fail although every variable is set.
    when_set: &'static str,
}

const CHECKS: &[Check] = &[
    Check {
        name: "curl",
        needs: "curl",
        command: "curl -sS --max-time 15 \"$URL\"",
        proof: "sluice doctor",
        vars: &["https_proxy", "CURL_CA_BUNDLE"],
        advice: "https_proxy=http://<sluice> and CURL_CA_BUNDLE (or SSL_CERT_FILE) = sluice's ca-bundle.pem",
        when_set: "look at the error above: the proxy address must be reachable and the bundle readable",
    },
    Check {
        name: "python urllib",
        needs: "python3",
        command: "python3 -c \"import urllib.request, sys; print(urllib.request.urlopen(sys.argv[1], timeout=15).read().decode())\" \"$URL\"",
        proof: "sluice doctor",
        vars: &["https_proxy", "SSL_CERT_FILE"],
        advice: "https_proxy=http://<sluice> and SSL_CERT_FILE = sluice's ca-bundle.pem",
        when_set: "look at the error above: the proxy address must be reachable and the bundle readable",
    },
    Check {
        name: "python requests",
        needs: "python3",
        command: "python3 -c \"import requests, sys; print(requests.get(sys.argv[1], timeout=15).text)\" \"$URL\" 2>&1 || python3 -c 'import requests' 2>/dev/null || echo NOT-INSTALLED",
        proof: "sluice doctor",
        vars: &["https_proxy", "REQUESTS_CA_BUNDLE"],
        advice: "https_proxy=http://<sluice> and REQUESTS_CA_BUNDLE = sluice's ca-bundle.pem (requests ignores SSL_CERT_FILE)",
        when_set: "a Session with trust_env=False or its own verify= ignores them: pass verify= sluice's ca-bundle.pem and proxies= explicitly",
    },
    Check {
        name: "git",
        needs: "git",
        command: "git ls-remote \"$URL/repo.git\" && echo git-reached-sluice",
        proof: "git-reached-sluice",
        vars: &["https_proxy", "GIT_SSL_CAINFO"],
        advice: "https_proxy=http://<sluice> (or git config http.proxy) and GIT_SSL_CAINFO = sluice's ca-bundle.pem",
        when_set: "a git config http.proxy or http.sslCAInfo overrides them: check `git config -l`",
    },
    Check {
        name: "pip",
        needs: "python3",
        command: "python3 -m pip --version >/dev/null 2>&1 || { echo NOT-INSTALLED; exit 0; }; python3 -m pip download --no-deps --disable-pip-version-check --index-url \"$URL/simple/\" -d \"${TMPDIR:-/tmp}/sluice-doctor-pip\" doctor-probe 2>&1",
        proof: "No matching distribution",
        vars: &["https_proxy", "PIP_CERT"],
        advice: "https_proxy=http://<sluice> and PIP_CERT (or REQUESTS_CA_BUNDLE) = sluice's ca-bundle.pem",
        when_set: "a pip.conf `proxy` or `cert` overrides them: check `pip config list`",
    },
    Check {
        name: "npm",
        needs: "npm",
        command: "npm view doctor-probe description --registry \"$URL/\" 2>&1",
        proof: "sluice doctor",
        vars: &["npm_config_https_proxy", "npm_config_cafile"],
        advice: "npm reads neither HTTPS_PROXY nor NODE_EXTRA_CA_CERTS here: npm_config_https_proxy=http://<sluice> and npm_config_cafile = sluice's ca-bundle.pem",
        when_set: "an .npmrc `proxy`, `https-proxy`, `cafile` or `strict-ssl` setting overrides them: check `npm config list`",
    },
    Check {
        name: "node",
        needs: "node",
        command: "node -e \"fetch(process.argv[1]).then(r => r.text()).then(t => console.log(t)).catch(e => { console.error(String(e.cause || e)); process.exit(1); })\" \"$URL\" 2>&1",
        proof: "sluice doctor",
        vars: &["https_proxy", "NODE_EXTRA_CA_CERTS", "NODE_USE_ENV_PROXY"],
        advice: "https_proxy=http://<sluice>, NODE_EXTRA_CA_CERTS = sluice's ca.pem and NODE_USE_ENV_PROXY=1",
        when_set: "this Node's fetch ignores proxy variables (they are used from Node 22.21/24.5 on): upgrade Node, or give fetch undici's EnvHttpProxyAgent as its dispatcher",
    },
];

/// What to do about a failed check: set the variables missing from `env` (what the tool
/// ran with), or, when `sluice exec` already set them all, why the tool may still fail.
fn advice(check: &Check, env: impl Fn(&str) -> Option<String>) -> String {
    let missing: Vec<&str> = check
        .vars
        .iter()
        .copied()
        .filter(|k| env(k).is_none_or(|v| v.is_empty()))
        .collect();
    if missing.is_empty() {
        format!(
            "{} are already set (as sluice exec sets them); {}",
            check.vars.join(", "),
            check.when_set
        )
    } else {
        format!("set {} ({})", missing.join(", "), check.advice)
    }
}

/// Whether a tool's failure is a refused write (`EACCES`, a read-only file system): its own
/// files, not its network settings, are the cause.
fn refused_write(output: &str) -> bool {
    [
        "EACCES",
        "EROFS",
        "Permission denied",
        "Read-only file system",
    ]
    .iter()
    .any(|m| output.contains(m))
}

/// What a refused write means: `HOME` (where npm, pip and git keep their caches and
/// settings) is not writable, or, when it is, some other path the tool writes.
fn write_advice(home: Option<&str>, home_writable: bool, uid: u32) -> String {
    match home {
        Some(h) if !home_writable => format!(
            "it could not write a file, and HOME ({h}) is not writable by uid {uid}: npm, pip and git keep their caches and settings there; give it a HOME it can write (sluice exec gives the command one: see the HOME it announces at start)"
        ),
        None => format!(
            "it could not write a file, and HOME is not set: npm, pip and git keep their caches and settings there; set HOME to a directory uid {uid} can write"
        ),
        Some(h) => format!(
            "it could not write a file; HOME ({h}) is writable, so look at the path in the error above (under sluice exec, only the places it lists at start are writable; --rw grants more)"
        ),
    }
}

/// Whether this process can create a file in `dir` (what the tools it runs can do there).
fn can_write_in(dir: &Path) -> bool {
    let probe = dir.join(format!(".sluice-doctor-{}", std::process::id()));
    let made = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
        .is_ok();
    if made {
        let _ = std::fs::remove_file(&probe);
    }
    made
}

fn installed(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The variables `sluice exec` gives a command (the shim's set), for a proxy and CA files.
fn exec_like_env(proxy: &str, ca: &Path, bundle: &Path) -> Vec<(String, String)> {
    let url = format!("http://{proxy}");
    let mut env = Vec::new();
    for k in ["HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy"] {
        env.push((k.to_string(), url.clone()));
    }
    for k in ["NO_PROXY", "no_proxy"] {
        env.push((k.to_string(), "localhost,127.0.0.1,::1".to_string()));
    }
    let b = bundle.display().to_string();
    for k in [
        "SSL_CERT_FILE",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "GIT_SSL_CAINFO",
        "PIP_CERT",
        "CARGO_HTTP_CAINFO",
        "AWS_CA_BUNDLE",
    ] {
        env.push((k.to_string(), b.clone()));
    }
    env.push(("NODE_EXTRA_CA_CERTS".to_string(), ca.display().to_string()));
    env.extend(super::exec::npm_env(&url, bundle));
    env.push(("NODE_USE_ENV_PROXY".to_string(), "1".to_string()));
    env
}

pub fn doctor() -> ExitCode {
    let Ok(runtime) = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    else {
        return ExitCode::from(1);
    };
    runtime.block_on(run_checks())
}

async fn run_checks() -> ExitCode {
    let inside = std::env::var("https_proxy")
        .or_else(|_| std::env::var("HTTPS_PROXY"))
        .ok();
    let mut env: Vec<(String, String)> = Vec::new();
    let mut cleanup = None;
    match &inside {
        Some(p) => println!("sluice doctor: checking the proxy in the environment ({p})"),
        None => {
            let dir = std::env::temp_dir().join(format!("sluice-doctor-{}", std::process::id()));
            let args = RunArgs::for_doctor(dir.clone());
            let prepared = match prepare(&args).await {
                Ok(p) => p,
                Err(code) => return code,
            };
            let Some((ca, bundle)) = prepared.ca_files.clone() else {
                eprintln!("sluice doctor: TLS is unavailable in this sluice");
                return ExitCode::from(1);
            };
            let listener = match listen::bind(std::net::SocketAddr::from(([127, 0, 0, 1], 0))) {
                Ok(l) => l,
                Err(e) => {
                    eprintln!("sluice doctor: cannot listen: {e}");
                    return ExitCode::from(1);
                }
            };
            let Ok(addr) = listener.local_addr() else {
                return ExitCode::from(1);
            };
            tokio::spawn(listen::accept_loop(listener, Arc::clone(&prepared.shared)));
            println!(
                "sluice doctor: started a sluice on {addr}; the tools get the environment `sluice exec` would give them"
            );
            env = exec_like_env(&addr.to_string(), &ca, &bundle);
            cleanup = Some(dir);
        }
    }
    let mut failed = 0;
    println!();
    for check in CHECKS {
        if !installed(check.needs) {
            println!("  {:<16} not installed", check.name);
            continue;
        }
        let url = format!("https://{HOST}/{}", check.name.replace(' ', "-"));
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg(check.command).env("URL", &url);
        for (k, v) in &env {
            cmd.env(k, v);
        }
        let out = tokio::time::timeout(
            Duration::from_secs(60),
            tokio::task::spawn_blocking(move || cmd.output()),
        )
        .await;
        let text = match out {
            Ok(Ok(Ok(o))) => format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
            _ => "timed out".to_string(),
        };
        if text.contains("NOT-INSTALLED") {
            println!("  {:<16} not installed", check.name);
        } else if text.contains(check.proof) || text.contains(OK_TEXT.trim()) {
            println!("  {:<16} ok", check.name);
        } else {
            failed += 1;
            let first = text
                .lines()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("no output")
                .trim();
            println!(
                "  {:<16} FAILED: {}",
                check.name,
                first.chars().take(160).collect::<String>()
            );
            let fix = if refused_write(&text) {
                let home = std::env::var("HOME").ok().filter(|h| !h.is_empty());
                let writable = home.as_deref().is_some_and(|h| can_write_in(Path::new(h)));
                write_advice(
                    home.as_deref(),
                    writable,
                    rustix::process::geteuid().as_raw(),
                )
            } else if inside.is_some() {
                advice(check, |k| std::env::var(k).ok())
            } else {
                advice(check, |k| {
                    env.iter()
                        .find(|(name, _)| name == k)
                        .map(|(_, v)| v.clone())
                })
            };
            println!("  {:<16} fix: {fix}", "");
        }
    }
    if let Some(dir) = cleanup {
        let _ = std::fs::remove_dir_all(dir);
    }
    println!();
    if failed == 0 {
        println!("every installed client reaches the network through sluice and trusts its CA");
        ExitCode::SUCCESS
    } else {
        println!("{failed} client(s) need the settings above");
        ExitCode::from(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_write_is_about_home_not_the_network_settings() {
        assert!(refused_write(
            "npm error code EACCES\nnpm error syscall mkdir"
        ));
        assert!(refused_write(
            "OSError: [Errno 30] Read-only file system: '/w'"
        ));
        assert!(!refused_write("npm error code ECONNREFUSED"));
        let no_home = write_advice(Some("/root/project"), false, 65534);
        assert!(
            no_home.contains("HOME (/root/project) is not writable by uid 65534"),
            "{no_home}"
        );
        assert!(!no_home.contains(".npmrc"), "{no_home}");
        let elsewhere = write_advice(Some("/home/a"), true, 1000);
        assert!(
            elsewhere.contains("HOME (/home/a) is writable"),
            "{elsewhere}"
        );
        assert!(write_advice(None, false, 1).contains("HOME is not set"));
        let here = std::env::temp_dir();
        assert!(can_write_in(&here));
        assert!(!can_write_in(&here.join("sluice-doctor-no-such-dir")));
    }

    #[test]
    fn advice_names_only_what_is_missing() {
        let npm = CHECKS.iter().find(|c| c.name == "npm").unwrap();
        let none = advice(npm, |_| None);
        assert!(
            none.starts_with("set npm_config_https_proxy, npm_config_cafile"),
            "{none}"
        );
        let half = advice(npm, |k| {
            (k == "npm_config_cafile").then(|| "/ca".to_string())
        });
        assert!(half.starts_with("set npm_config_https_proxy ("), "{half}");
        // Everything exec sets is set: no advice to set it again.
        let env = exec_like_env("127.0.0.1:1", Path::new("/ca.pem"), Path::new("/b.pem"));
        for check in CHECKS {
            let all = advice(check, |k| {
                env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
            });
            assert!(all.contains("already set"), "{}: {all}", check.name);
        }
    }
}
