//! End-to-end tests of `sluice exec`: the real sluice and sluice-shim binaries running real
//! programs (curl, git, pip, Python) confined, with local origins on loopback reached through
//! sluice under a test name (`origin.test`, resolved by `--resolve`). Needs root (the shim
//! drops to uid 65534; `--netns` makes a network namespace).
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use sluice_e2e::origin::{H2Origin, StaticHttpsOrigin};
use sluice_e2e::proxy::{TempDir, privileged, realpath};
use sluice_e2e::sluice_bin;

const SECRET: &str = "s3cr3t-EXEC-91bd44";

/// A directory the confined command may write, owned by uid 65534: the user sluice exec,
/// as root, runs the command as (`--user 65534`: sluice chooses only a normal user's
/// directory by itself).
fn workdir(dir: &TempDir, name: &str) -> std::path::PathBuf {
    let w = dir.path().join(name);
    std::fs::create_dir_all(&w).unwrap();
    std::fs::set_permissions(&w, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::os::unix::fs::chown(&w, Some(65534), Some(65534)).unwrap();
    // The temporary parent must be traversable too.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    w
}

/// `sluice exec` with the policy text, extra flags, sluice's environment and the command.
fn exec(
    dir: &TempDir,
    cwd: &Path,
    policy: &str,
    flags: &[String],
    env: &[(&str, &str)],
    cmd: &[&str],
) -> (i32, String, String) {
    let policy_path = dir.write("policy.yaml", policy);
    let mut c = Command::new(sluice_bin());
    c.arg("exec")
        .arg("--policy")
        .arg(&policy_path)
        .arg("--audit-log")
        .arg(dir.path().join("audit.jsonl"))
        .args(["--user", "65534"])
        .args(flags)
        .arg("--")
        .args(cmd)
        .current_dir(cwd);
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().expect("run sluice exec");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn base_flags(origin_port: u16, ca: &Path) -> Vec<String> {
    let _ = origin_port;
    vec![
        "--allow-loopback-upstream".into(),
        "--resolve".into(),
        "origin.test=127.0.0.1".into(),
        "--upstream-ca".into(),
        ca.display().to_string(),
    ]
}

#[test]
fn the_secret_is_injected_and_the_child_only_ever_sees_the_placeholder() {
    if !privileged("the_secret_is_injected_and_the_child_only_ever_sees_the_placeholder") {
        return;
    }
    let dir = TempDir::new("exec-creds");
    let origin = H2Origin::start(dir.path());
    let policy = format!(
        "version: 1\nnetwork_policies:\n  api:\n    endpoints:\n      - {{host: origin.test, port: {}, protocol: rest, enforcement: enforce, access: full}}\n    binaries:\n      - path: /usr/bin/curl\n",
        origin.port()
    );
    let providers = dir.write(
        "providers.yaml",
        &format!("id: test-api\ncredentials:\n  - name: api-key\n    env_vars: [TEST_API_KEY]\nendpoints:\n  - host: origin.test\n    port: {}\n", origin.port()),
    );
    let mut flags = base_flags(origin.port(), &origin.cert);
    flags.extend(["--providers".to_string(), providers.display().to_string()]);
    let cwd = workdir(&dir, "work");
    let script = format!(
        "env | grep TEST_API_KEY; curl -sS --max-time 20 -H \"Authorization: Bearer $TEST_API_KEY\" https://origin.test:{}/v1/x",
        origin.port()
    );
    let (code, out, err) = exec(
        &dir,
        &cwd,
        &policy,
        &flags,
        &[("TEST_API_KEY", SECRET)],
        &["/bin/sh", "-c", &script],
    );
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    assert!(
        out.contains("TEST_API_KEY=openshell:resolve:env:TEST_API_KEY"),
        "{out}"
    );
    assert!(
        !out.contains(SECRET) && !err.contains(SECRET),
        "the child or sluice's output showed the secret:\n{out}\n{err}"
    );
    assert!(
        out.contains("proto=") && out.contains("path=/v1/x"),
        "{out}"
    );
    let got = origin.received();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(
        got[0]["headers"]["authorization"],
        format!("Bearer {SECRET}")
    );
    let audit = std::fs::read_to_string(dir.path().join("audit.jsonl")).unwrap();
    assert!(!audit.contains(SECRET));
}

#[test]
fn in_its_own_network_namespace_the_child_has_no_way_out_but_sluice() {
    if !privileged("in_its_own_network_namespace_the_child_has_no_way_out_but_sluice") {
        return;
    }
    let dir = TempDir::new("exec-netns");
    let origin = H2Origin::start(dir.path());
    let policy = format!(
        "version: 1\nnetwork_policies:\n  api:\n    endpoints:\n      - {{host: origin.test, port: {}, protocol: rest, enforcement: enforce, access: full}}\n    binaries:\n      - path: /usr/bin/curl\n",
        origin.port()
    );
    let mut flags = base_flags(origin.port(), &origin.cert);
    flags.push("--netns".into());
    let cwd = workdir(&dir, "work");
    // UDP and raw TCP to an address outside: both must fail. 192.0.2.1 is a documentation
    // address; the namespace's fence rejects UDP (DNS, port 53, goes to sluice's policy DNS)
    // and redirects TCP to sluice, where Landlock refuses ports no policy names first.
    let probe = "import socket\nfor name, f in [('udp', lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('192.0.2.1', 9))), ('tcp', lambda: socket.create_connection(('192.0.2.1', 443), timeout=3))]:\n    try:\n        f()\n        print(name, 'SENT')\n    except OSError as e:\n        print(name, 'failed', e.errno)\n";
    // The child's environment is built from scratch, so the probe travels as a file.
    std::fs::write(cwd.join("probe.py"), probe).unwrap();
    let script = format!(
        "/usr/bin/python3 probe.py; curl -sS --max-time 20 https://origin.test:{}/through-sluice",
        origin.port()
    );
    let mut c = vec!["/bin/sh", "-c"];
    c.push(&script);
    let policy_path = dir.write("policy.yaml", &policy);
    let out = Command::new(sluice_bin())
        .arg("exec")
        .arg("--policy")
        .arg(&policy_path)
        .arg("--audit-log")
        .arg(dir.path().join("audit.jsonl"))
        .args(["--user", "65534"])
        .args(&flags)
        .arg("--")
        .args(&c)
        .current_dir(&cwd)
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(stdout.contains("udp failed"), "{stdout}\n{stderr}");
    assert!(stdout.contains("tcp failed"), "{stdout}\n{stderr}");
    assert!(!stdout.contains("SENT"), "{stdout}");
    // ... while sluice, listening inside the namespace, still carries allowed traffic.
    assert!(
        stdout.contains("path=/through-sluice"),
        "{stdout}\n{stderr}"
    );
}

/// Behind `--netns`, a client that ignores the proxy variables (curl `--noproxy '*'`) still
/// reaches an allowed host: the fence in the command's namespace redirects it to sluice's
/// transparent listener there, which judges and dials it like a CONNECT.
#[test]
fn behind_the_exec_fence_a_client_without_proxy_variables_goes_through_sluice() {
    if !privileged("behind_the_exec_fence_a_client_without_proxy_variables_goes_through_sluice") {
        return;
    }
    let dir = TempDir::new("exec-fence");
    // An origin on a non-loopback address of this host (a veth end), so the command's
    // connection leaves its namespace's loopback and meets the fence.
    let host = sluice_e2e::netns::TestHost::start("xfence").unwrap();
    let octets = host.ip.octets();
    let outside = std::net::Ipv4Addr::new(octets[0], octets[1], octets[2], octets[3] - 1);
    let origin = H2Origin::start_on(dir.path(), outside.into());
    let policy = format!(
        "version: 1\nnetwork_policies:\n  api:\n    endpoints:\n      - {{host: origin.test, port: {}, protocol: rest, enforcement: enforce, access: full, allowed_ips: [\"{outside}/32\"]}}\n    binaries:\n      - path: /usr/bin/curl\n",
        origin.port()
    );
    let flags: Vec<String> = vec![
        "--netns".into(),
        "--resolve".into(),
        format!("origin.test={outside}"),
        "--upstream-ca".into(),
        origin.cert.display().to_string(),
    ];
    let cwd = workdir(&dir, "work");
    let url = format!("https://origin.test:{}/around-the-proxy", origin.port());
    let resolve = format!("origin.test:{}:{outside}", origin.port());
    let (code, stdout, stderr) = exec(
        &dir,
        &cwd,
        &policy,
        &flags,
        &[],
        &[
            "curl",
            "-sS",
            "--max-time",
            "20",
            "--noproxy",
            "*",
            "--resolve",
            &resolve,
            &url,
        ],
    );
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(
        stdout.contains("path=/around-the-proxy"),
        "{stdout}\n{stderr}"
    );
    let audit = std::fs::read_to_string(dir.path().join("audit.jsonl")).unwrap();
    assert!(
        audit
            .lines()
            .any(|l| l.contains("TRANSPARENT allowed origin.test")),
        "{audit}"
    );
    drop(host);
}

#[test]
fn git_clones_over_https_under_exec() {
    if !privileged("git_clones_over_https_under_exec") {
        return;
    }
    let dir = TempDir::new("exec-git");
    let served = dir.path().join("served");
    std::fs::create_dir_all(&served).unwrap();
    let git = |args: &[&str], cwd: &Path| {
        let s = Command::new("git")
            .args(args)
            .current_dir(cwd)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
            .output()
            .unwrap();
        assert!(
            s.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&s.stderr)
        );
    };
    let src = dir.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    git(&["init", "-q", "-b", "main"], &src);
    std::fs::write(src.join("README"), "cloned through sluice\n").unwrap();
    git(&["add", "README"], &src);
    git(&["commit", "-q", "-m", "first"], &src);
    git(
        &[
            "clone",
            "-q",
            "--bare",
            src.to_str().unwrap(),
            served.join("repo.git").to_str().unwrap(),
        ],
        dir.path(),
    );
    git(&["update-server-info"], &served.join("repo.git"));
    let cert_dir = dir.path().join("certs");
    std::fs::create_dir_all(&cert_dir).unwrap();
    let origin = StaticHttpsOrigin::start(&cert_dir, &served);
    let which = Command::new("sh")
        .args(["-c", "command -v git"])
        .output()
        .unwrap();
    let git_bin = realpath(String::from_utf8_lossy(&which.stdout).trim());
    let policy = format!(
        "version: 1\nnetwork_policies:\n  git:\n    endpoints:\n      - {{host: origin.test, port: {}, protocol: rest, enforcement: enforce, access: read-only}}\n    binaries:\n      - path: {git_bin}\n",
        origin.port()
    );
    let cwd = workdir(&dir, "work");
    let url = format!("https://origin.test:{}/repo.git", origin.port());
    let (code, out, err) = exec(
        &dir,
        &cwd,
        &policy,
        &base_flags(origin.port(), &origin.cert),
        &[],
        &[&git_bin, "clone", "-q", &url, "cloned"],
    );
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    assert_eq!(
        std::fs::read_to_string(cwd.join("cloned/README")).unwrap(),
        "cloned through sluice\n"
    );
}

#[test]
fn pip_downloads_from_a_local_index_under_exec() {
    if !privileged("pip_downloads_from_a_local_index_under_exec") {
        return;
    }
    let dir = TempDir::new("exec-pip");
    let served = dir.path().join("served");
    let simple = served.join("simple").join("demo-pkg");
    std::fs::create_dir_all(&simple).unwrap();
    std::fs::create_dir_all(served.join("files")).unwrap();
    // A minimal wheel, made by Python's zipfile.
    let wheel = served.join("files").join("demo_pkg-0.1-py3-none-any.whl");
    let make = format!(
        "import zipfile\nz = zipfile.ZipFile({w:?}, 'w')\nz.writestr('demo_pkg/__init__.py', 'X = 1\\n')\nz.writestr('demo_pkg-0.1.dist-info/METADATA', 'Metadata-Version: 2.1\\nName: demo-pkg\\nVersion: 0.1\\n')\nz.writestr('demo_pkg-0.1.dist-info/WHEEL', 'Wheel-Version: 1.0\\nGenerator: test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n')\nz.writestr('demo_pkg-0.1.dist-info/RECORD', '')\nz.close()\n",
        w = wheel.display().to_string()
    );
    assert!(
        Command::new("python3")
            .arg("-c")
            .arg(&make)
            .status()
            .unwrap()
            .success()
    );
    std::fs::write(
        simple.join("index.html"),
        "<!DOCTYPE html><html><body><a href=\"../../files/demo_pkg-0.1-py3-none-any.whl\">demo_pkg-0.1-py3-none-any.whl</a></body></html>\n",
    )
    .unwrap();
    let cert_dir = dir.path().join("certs");
    std::fs::create_dir_all(&cert_dir).unwrap();
    let origin = StaticHttpsOrigin::start(&cert_dir, &served);
    let policy = format!(
        "version: 1\nnetwork_policies:\n  index:\n    endpoints:\n      - {{host: origin.test, port: {}, protocol: rest, enforcement: enforce, access: read-only}}\n    binaries:\n      - path: /usr/bin/python3\n",
        origin.port()
    );
    let cwd = workdir(&dir, "work");
    let index = format!("https://origin.test:{}/simple/", origin.port());
    let (code, out, err) = exec(
        &dir,
        &cwd,
        &policy,
        &base_flags(origin.port(), &origin.cert),
        &[],
        &[
            "/usr/bin/python3",
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--index-url",
            &index,
            "-d",
            "downloads",
            "demo-pkg",
        ],
    );
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    assert!(
        cwd.join("downloads/demo_pkg-0.1-py3-none-any.whl")
            .is_file(),
        "{out}\n{err}"
    );
}

#[test]
fn doctor_checks_the_clients_outside_and_inside_exec() {
    let (_, out, err) = {
        let o = Command::new(sluice_bin()).arg("doctor").output().unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    assert!(
        out.contains("started a sluice on 127.0.0.1:"),
        "{out}\n{err}"
    );
    for tool in ["curl", "python urllib", "git"] {
        let line = out
            .lines()
            .find(|l| l.trim_start().starts_with(tool))
            .unwrap_or_else(|| panic!("no {tool} line:\n{out}"));
        assert!(line.ends_with(" ok"), "{line}\n{out}");
    }
    // A failing client gets the settings it needs.
    for line in out.lines().filter(|l| l.contains("FAILED")) {
        let next = out
            .lines()
            .skip_while(|l| *l != line)
            .nth(1)
            .unwrap_or_default();
        assert!(next.contains("fix:"), "{line} without advice:\n{out}");
    }
    if !privileged("doctor_checks_the_clients_outside_and_inside_exec") {
        return;
    }
    let dir = TempDir::new("exec-doctor");
    let cwd = workdir(&dir, "work");
    let bin = sluice_bin().display().to_string();
    let (_, out, err) = exec(
        &dir,
        &cwd,
        "version: 1\nnetwork_policies: {}\n",
        &[],
        &[],
        &[&bin, "doctor"],
    );
    assert!(
        out.contains("checking the proxy in the environment"),
        "{out}\n{err}"
    );
    let curl = out
        .lines()
        .find(|l| l.trim_start().starts_with("curl"))
        .unwrap_or_default();
    assert!(curl.ends_with(" ok"), "{out}\n{err}");
    // Advice inside exec never asks for what exec already set.
    for fix in out.lines().filter(|l| l.contains("fix:")) {
        assert!(fix.contains("already set"), "{fix}\n{out}");
    }
}
