//! End-to-end: provider profiles in OpenShell's providers-v2 shape, composed into the policy
//! as OpenShell composes them (`_provider_<id>`), through the real `sluice` binary.
//!
//! `policy check --providers` and `policy explain --providers` show the composed result and
//! report a profile's mistakes at its file and line; then a profile alone (the policy file
//! grants nothing for its host) drives real credential injection through an intercepting
//! sluice, with curl and with Python, in the canonical and the revisioned placeholder forms;
//! what its rules deny is refused with 403 and never reaches the origin; a program outside
//! its binaries is refused. Every byte the clients, the audit log, sluice's stderr and its
//! files received is swept for the secret.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::path::{Path, PathBuf};
use std::process::Command;

use sluice_e2e::ocsf::class;
use sluice_e2e::origin::EchoOrigin;
use sluice_e2e::proxy::{Sluice, TempDir, assert_events_valid, python, run};
use sluice_e2e::{fixture_dir, run_sluice, workspace_dir};

const SECRET: &str = "pr0file-SECRET-a41d77e9";
const PLACEHOLDER: &str = "openshell:resolve:env:ECHO_API_KEY";
/// In sluice's environment, bound by no profile.
const STRAY: &str = "stray-SECRET-0c2b55d1";

fn providers_dir() -> PathBuf {
    workspace_dir().join("configs/providers")
}

fn out_of(args: &[&str]) -> (Option<i32>, String, String) {
    let out = run_sluice(args);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn path(p: &Path) -> String {
    p.display().to_string()
}

// === policy check / explain --providers ===

#[test]
fn policy_check_shows_each_profile_as_its_provider_entry() {
    let dir = providers_dir();
    let (a, g, o) = (
        path(&dir.join("anthropic.yaml")),
        path(&dir.join("github.yaml")),
        path(&dir.join("openai.yaml")),
    );
    let policies = workspace_dir().join("configs/policies");
    let llm = path(&policies.join("llm-provider.yaml"));
    let (code, stdout, stderr) = out_of(&[
        "policy",
        "check",
        "--providers",
        &a,
        "--providers",
        &g,
        "--providers",
        &o,
        &llm,
    ]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    // Three `discovery` notes, a `refresh: static` note, three `/usr/bin/node` in `binaries`.
    assert!(
        stdout.starts_with("ok: 1 file(s), 4 policies, 5 endpoints, 7 warning(s)\n"),
        "{stdout}\n{stderr}"
    );
    for (id, file, line) in [("anthropic", &a, 7), ("github", &g, 4), ("openai", &o, 3)] {
        let want =
            format!("provider profile `{id}` ({file}:{line}:5) -> policy `_provider_{id}`: ");
        assert!(stdout.contains(&want), "{want}\n{stdout}");
    }
    // What has no effect on enforcement is a note, at its line.
    assert!(
        stderr.contains(&format!("{a}:21:3: warning: discovery: `discovery`")),
        "{stderr}"
    );
    // Profiles alone compose into the embedded deny-all default.
    let (code, stdout, stderr) = out_of(&["policy", "check", "--providers", &g]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.starts_with("ok: 0 file(s), 1 policies, 2 endpoints"),
        "{stdout}"
    );
}

#[test]
fn policy_check_reports_a_profiles_mistakes_at_its_file_and_line() {
    let dir = TempDir::new("prov-check");
    let profile = dir.write(
        "bad.yaml",
        "\
id: bad-api
credentials:
  - {name: key, env_vars: [BAD_KEY]}
endpoints:
  - host: api.example.com
    port: 443
    protocol: rest
    enforcement: enforce
    access: read-only
  - host: api.example.com
    port: 443
    protocol: rest
    enforcement: audit
    access: read-only
binaries: [/usr/bin/curl]
",
    );
    let policy = dir.write(
        "p.yaml",
        "version: 1\nnetwork_policies:\n  _provider_bad_api:\n    endpoints: [{host: x.example.com, port: 443}]\n    binaries: [{path: /usr/bin/curl}]\n",
    );
    let (p, f) = (path(&policy), path(&profile));
    let (code, stdout, stderr) = out_of(&["policy", "check", "--providers", &f, &p]);
    assert_eq!(code, Some(1), "{stdout}\n{stderr}");
    assert!(
        stderr.contains(&format!("{f}:1:5: id: provider profile `bad-api` composes into the policy `_provider_bad_api`, which is already defined in {p}:3:3")),
        "{stderr}"
    );
    // Its endpoints are checked by the ambiguity rules like any policy's.
    let (code, stdout, stderr) = out_of(&["policy", "check", "--providers", &f]);
    assert_eq!(code, Some(1), "{stdout}\n{stderr}");
    assert!(
        stderr.contains(&format!("{f}:10:5: network_policies._provider_bad_api.endpoints[1]: network policies '_provider_bad_api' endpoint[0]")),
        "{stderr}"
    );
    assert!(
        stderr.contains("enforcement=\"enforce\" vs \"audit\""),
        "{stderr}"
    );

    // A refresh sluice does not know would leave a stale secret: refused by name.
    let refresh = dir.write(
        "api.yaml",
        "id: api\ncredentials: [{name: k, env_vars: [API_TOKEN], refresh: {strategy: bespoke}}]\nendpoints:\n  - {host: api.example.com, port: 443, protocol: rest, access: full}\n",
    );
    let r = path(&refresh);
    let (code, _, stderr) = out_of(&["policy", "check", "--providers", &r]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{r}:2:68: credentials[0].refresh.strategy: unknown `refresh` strategy `bespoke`"
        )),
        "{stderr}"
    );
    // SigV4 signing is checked like any endpoint field, at its line.
    let signing = dir.write(
        "aws.yaml",
        "id: aws\ncredentials: [{name: k, env_vars: [AWS_ACCESS_KEY_ID]}]\nendpoints:\n  - {host: s3.amazonaws.com, port: 443, protocol: rest, access: full, credential_signing: sigv4}\n",
    );
    let s = path(&signing);
    let (code, _, stderr) = out_of(&["policy", "check", "--providers", &s]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("{s}:4:91: network_policies._provider_aws.endpoints[0].credential_signing: `credential_signing` needs `signing_service`")),
        "{stderr}"
    );
}

#[test]
fn a_nemoclaw_preset_loads_with_a_note() {
    let preset = fixture_dir("nemoclaw/github-preset.yaml");
    let f = path(&preset);
    let (code, stdout, stderr) = out_of(&["policy", "check", &f]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.starts_with("ok: 1 file(s), 1 policies, 2 endpoints"),
        "{stdout}"
    );
    assert!(
        stderr.contains(&format!(
            "{f}:4:3: warning: preset: a NemoClaw preset header"
        )),
        "{stderr}"
    );
}

#[test]
fn policy_explain_answers_with_the_composed_policy() {
    let a = path(&providers_dir().join("anthropic.yaml"));
    let explain = |binary: &str, method: &str, url: &str| {
        let (code, stdout, stderr) = out_of(&[
            "policy",
            "explain",
            "--providers",
            &a,
            "--binary",
            binary,
            "--method",
            method,
            "--json",
            url,
        ]);
        assert_eq!(code, Some(0), "{stdout}\n{stderr}");
        serde_json::from_str::<serde_json::Value>(&stdout).unwrap()
    };
    let allow = explain(
        "/usr/bin/curl",
        "POST",
        "https://api.anthropic.com/v1/messages",
    );
    assert_eq!(allow["decision"], "allow", "{allow}");
    assert_eq!(allow["entry"], "_provider_anthropic", "{allow}");
    assert!(
        allow["rule_location"]
            .as_str()
            .unwrap()
            .contains("anthropic.yaml:"),
        "{allow}"
    );
    let deny = explain(
        "/usr/bin/curl",
        "DELETE",
        "https://api.anthropic.com/v1/messages",
    );
    assert_eq!(deny["decision"], "deny", "{deny}");
    assert_eq!(deny["stage"], "l7", "{deny}");
    let outsider = explain(
        "/usr/bin/wget",
        "GET",
        "https://api.anthropic.com/v1/models",
    );
    assert_eq!(outsider["decision"], "deny", "{outsider}");
    assert_eq!(outsider["stage"], "l4", "{outsider}");
}

// === A profile alone drives injection ===

/// An OpenShell-shaped profile for the echo origin: bearer credential, `protocol: rest`
/// with rules, `binaries` (curl and Python), `discovery`.
fn openshell_profile(port: u16) -> String {
    format!(
        "\
id: echo-api
display_name: Echo API
description: A local stand-in for a bearer-token REST API
category: other
credentials:
  - name: api-key
    description: API key
    env_vars: [ECHO_API_KEY]
    required: true
    auth_style: bearer
discovery:
  credentials:
    - name: api-key
      env_vars: [ECHO_API_KEY]
endpoints:
  - host: 127.0.0.1
    port: {port}
    protocol: rest
    enforcement: enforce
    rules:
      - allow: {{method: GET, path: /v1/**}}
      - allow: {{method: POST, path: /v1/messages}}
binaries:
  - /usr/bin/curl
  - {python}
",
        python = python()
    )
}

/// The policy file grants nothing for the origin: only the profile does.
const UNRELATED_POLICY: &str = "version: 1\nnetwork_policies:\n  unrelated:\n    endpoints: [{host: unrelated.example.com, port: 443}]\n    binaries: [{path: /usr/bin/curl}]\n";

fn curl(sluice: &Sluice, ca: &Path, args: &[&str], url: &str) -> String {
    run(Command::new("/usr/bin/curl")
        .args(["-s", "-i", "--max-time", "20", "--cacert"])
        .arg(ca)
        .args(["-x", &sluice.proxy_url(), "-w", "\n%{http_code}"])
        .args(args)
        .arg(url))
    .1
}

const PY_CLIENT: &str = r#"
import sys, ssl, urllib.request, urllib.error
proxy, ca, method, url, auth = sys.argv[1:6]
ctx = ssl.create_default_context(cafile=ca)
opener = urllib.request.build_opener(
    urllib.request.ProxyHandler({"https": proxy}), urllib.request.HTTPSHandler(context=ctx))
data = b'{"model":"m"}' if method == "POST" else None
req = urllib.request.Request(url, data=data, method=method,
    headers={"Authorization": auth, "Content-Type": "application/json"})
try:
    with opener.open(req, timeout=20) as r:
        print(r.status); print(r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code); print(e.read().decode())
"#;

fn py(sluice: &Sluice, ca: &Path, method: &str, url: &str, auth: &str) -> String {
    let (_, out, err) = run(Command::new(python()).args([
        "-c",
        PY_CLIENT,
        &sluice.proxy_url(),
        &path(ca),
        method,
        url,
        auth,
    ]));
    format!("{out}{err}")
}

#[test]
fn an_openshell_profile_alone_drives_injection_with_curl_and_python() {
    let dir = TempDir::new("prov-inject");
    let origin = EchoOrigin::start(dir.path());
    let providers = dir.write("echo-api.yaml", &openshell_profile(origin.port()));
    let (sluice, ca) = Sluice::intercepting(
        &dir,
        UNRELATED_POLICY,
        &[&origin.cert],
        Some(&providers),
        &[("ECHO_API_KEY", SECRET), ("STRAY_KEY", STRAY)],
    );
    let base = format!("https://127.0.0.1:{}", origin.port());
    let hex = "0123456789abcdef".repeat(4);
    let mut client_saw = String::new();

    // curl, over HTTP/1.1 and HTTP/2, with the canonical and the revisioned forms.
    let forms = [
        PLACEHOLDER.to_string(),
        "openshell:resolve:env:v3_ECHO_API_KEY".to_string(),
        format!("openshell:resolve:env:s{hex}_ECHO_API_KEY"),
        "sk-OPENSHELL-RESOLVE-ENV-v3_ECHO_API_KEY".to_string(),
        format!("sk-OPENSHELL-RESOLVE-ENV-s{hex}_ECHO_API_KEY"),
    ];
    for http in ["--http1.1", "--http2"] {
        for form in &forms {
            let auth = format!("Authorization: Bearer {form}");
            let out = curl(
                &sluice,
                &ca,
                &[http, "-H", &auth],
                &format!("{base}/v1/models"),
            );
            assert!(
                out.ends_with("200"),
                "{http} {form}: {out}\n{}",
                sluice.stderr()
            );
            client_saw.push_str(&out);
        }
    }
    // Python: a GET and a POST the rules allow.
    let auth = format!("Bearer {PLACEHOLDER}");
    for (method, p) in [("GET", "/v1/models/m1"), ("POST", "/v1/messages")] {
        let out = py(&sluice, &ca, method, &format!("{base}{p}"), &auth);
        assert!(
            out.starts_with("200\n"),
            "python {method} {p}: {out}\n{}",
            sluice.stderr()
        );
        client_saw.push_str(&out);
    }
    let got = origin.received();
    // Five spellings over two HTTP versions, and two from Python.
    assert_eq!(got.len(), 12, "{got:#?}");
    for r in &got {
        assert_eq!(
            r["headers"]["authorization"],
            format!("Bearer {SECRET}"),
            "{r}"
        );
    }

    // What the profile's rules deny: 403, never forwarded.
    for (method, p) in [
        ("DELETE", "/v1/models"),
        ("GET", "/admin"),
        ("POST", "/v1/files"),
    ] {
        let out = curl(
            &sluice,
            &ca,
            &[
                "--http1.1",
                "-X",
                method,
                "-H",
                &format!("Authorization: Bearer {PLACEHOLDER}"),
            ],
            &format!("{base}{p}"),
        );
        assert!(out.ends_with("403"), "curl {method} {p}: {out}");
        client_saw.push_str(&out);
        let out = py(&sluice, &ca, method, &format!("{base}{p}"), &auth);
        assert!(out.starts_with("403\n"), "python {method} {p}: {out}");
        client_saw.push_str(&out);
    }
    assert_eq!(
        origin.received().len(),
        12,
        "a denied request reached the origin"
    );

    // A value in sluice's environment that no profile binds never resolves, in any form.
    for form in [
        "openshell:resolve:env:STRAY_KEY".to_string(),
        "openshell:resolve:env:v2_STRAY_KEY".to_string(),
        format!("openshell:resolve:env:s{hex}_STRAY_KEY"),
    ] {
        let auth = format!("Authorization: Bearer {form}");
        let out = curl(
            &sluice,
            &ca,
            &["--http1.1", "-H", &auth],
            &format!("{base}/v1/models"),
        );
        assert!(out.ends_with("500"), "{form}: {out}");
        assert!(out.contains("credential_unavailable"), "{form}: {out}");
        client_saw.push_str(&out);
    }
    assert_eq!(
        origin.received().len(),
        12,
        "an unresolvable placeholder reached the origin"
    );

    // A program outside the profile's binaries is refused at CONNECT: the profile is the
    // only grant for this host.
    let (_, out, err) = run(Command::new("node").args([
        "-e",
        "const http=require('http');const [h,p]=process.argv[1].split(':');\
         const r=http.request({host:h,port:+p,method:'CONNECT',path:process.argv[2]});\
         r.on('connect',(res)=>{console.log(res.statusCode);process.exit(0)});\
         r.on('response',(res)=>{console.log(res.statusCode);process.exit(0)});\
         r.on('error',(e)=>{console.log('error '+e.message);process.exit(0)});r.end();",
        &sluice.addr().to_string(),
        &format!("127.0.0.1:{}", origin.port()),
    ]));
    assert_eq!(out.trim(), "403", "node: {out}{err}");

    let audit = std::fs::read_to_string(&sluice.audit_path).unwrap();
    for secret in [SECRET, STRAY] {
        assert!(
            !client_saw.contains(secret),
            "a client saw a secret:\n{client_saw}"
        );
        assert!(!audit.contains(secret), "the audit log holds a secret");
        assert!(
            !sluice.stderr().contains(secret),
            "sluice's stderr holds a secret"
        );
        for d in [sluice.dir.path(), ca.parent().unwrap()] {
            for f in std::fs::read_dir(d).unwrap().flatten() {
                let bytes = std::fs::read(f.path()).unwrap_or_default();
                assert!(
                    !String::from_utf8_lossy(&bytes).contains(secret),
                    "a secret is in {}",
                    f.path().display()
                );
            }
        }
    }
    assert!(
        !origin.log_text().contains(STRAY),
        "the unbound secret reached the origin"
    );
    // The policy load names the profile among its sources.
    let load = sluice.wait_event("the policy load", |e| class(e) == 5019);
    let profile_file = path(&providers);
    assert!(
        load["unmapped"]["policy_sources"]
            .as_array()
            .is_some_and(|a| a.iter().any(|s| s.as_str() == Some(profile_file.as_str()))),
        "{load}"
    );
    // The allowed requests were judged by the profile's entry.
    assert!(audit.contains("_provider_echo_api"), "{audit}");
    assert_events_valid(&sluice);
}

/// A raw HTTPS GET through sluice with Node's own sockets (CONNECT, then TLS trusting `ca`):
/// the status line, then the whole response.
const NODE_CLIENT: &str = r#"
const http = require('http'), tls = require('tls'), fs = require('fs');
const [proxy, target, ca, auth] = process.argv.slice(1);
const [phost, pport] = proxy.split(':'); const [thost] = target.split(':');
const r = http.request({ host: phost, port: +pport, method: 'CONNECT', path: target });
r.on('connect', (res, sock) => {
  if (res.statusCode !== 200) { console.log('CONNECT ' + res.statusCode); process.exit(0); }
  const s = tls.connect({ socket: sock, host: thost, ca: fs.readFileSync(ca) }, () => {
    const h = auth ? `Authorization: ${auth}\r\n` : '';
    s.write(`GET /v1/models HTTP/1.1\r\nHost: ${target}\r\n${h}Connection: close\r\n\r\n`);
  });
  let d = ''; s.on('data', (c) => d += c); s.on('end', () => { console.log(d); process.exit(0); });
  s.on('error', (e) => { console.log('tls error ' + e.message); process.exit(0); });
});
r.on('error', (e) => { console.log('error ' + e.message); process.exit(0); });
r.end();
"#;

#[test]
fn a_program_outside_the_profiles_binaries_never_gets_its_secret() {
    let dir = TempDir::new("prov-callers");
    let origin = EchoOrigin::start(dir.path());
    let providers = dir.write("echo-api.yaml", &openshell_profile(origin.port()));
    // A policy file grants node the same host, with the same request-level settings as the
    // profile's endpoint (the ambiguity rules would refuse anything else).
    let (_, node, _) = run(Command::new("sh").args(["-c", "command -v node"]));
    let node = sluice_e2e::proxy::realpath(node.trim());
    let policy = format!(
        "version: 1\nnetwork_policies:\n  node_api:\n    endpoints:\n      - host: 127.0.0.1\n        port: {}\n        protocol: rest\n        enforcement: enforce\n        access: read-only\n    binaries:\n      - path: {node}\n",
        origin.port()
    );
    let (sluice, ca) = Sluice::intercepting(
        &dir,
        &policy,
        &[&origin.cert],
        Some(&providers),
        &[("ECHO_API_KEY", SECRET)],
    );
    let target = format!("127.0.0.1:{}", origin.port());
    let node_get = |auth: &str| {
        let (_, out, err) = run(Command::new(&node).args([
            "-e",
            NODE_CLIENT,
            &sluice.addr().to_string(),
            &target,
            &path(&ca),
            auth,
        ]));
        format!("{out}{err}")
    };
    // Without a placeholder, the policy file's grant works.
    let out = node_get("");
    assert!(
        out.starts_with("HTTP/1.1 200"),
        "{out}\n{}",
        sluice.stderr()
    );
    // With one: the secret belongs to the profile's binaries only.
    let out = node_get(&format!("Bearer {PLACEHOLDER}"));
    assert!(out.starts_with("HTTP/1.1 403"), "{out}");
    assert!(out.contains("credential_endpoint_mismatch"), "{out}");
    assert!(!out.contains(SECRET), "{out}");
    let got = origin.received();
    assert_eq!(got.len(), 1, "{got:#?}");
    assert!(got[0]["headers"]["authorization"].is_null(), "{got:#?}");
    // curl, listed in the profile, gets it on the same host.
    let out = curl(
        &sluice,
        &ca,
        &[
            "--http1.1",
            "-H",
            &format!("Authorization: Bearer {PLACEHOLDER}"),
        ],
        &format!("https://{target}/v1/models"),
    );
    assert!(out.ends_with("200"), "{out}");
    assert_eq!(
        origin.received()[1]["headers"]["authorization"],
        format!("Bearer {SECRET}")
    );
    assert!(
        !std::fs::read_to_string(&sluice.audit_path)
            .unwrap()
            .contains(SECRET)
    );
    assert!(!sluice.stderr().contains(SECRET));
    assert_events_valid(&sluice);
}
