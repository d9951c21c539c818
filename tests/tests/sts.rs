//! End-to-end: `refresh.strategy: aws_sts_assume_role` through the real `sluice` binary.
//! sluice calls AssumeRole on moto's STS itself (`tests/clients/sts_origin.py`, over TLS),
//! signed with the long-lived source keys of its refresh material, and re-signs the client's
//! requests (boto3 with placeholder keys) with the temporary key, secret and session token STS
//! issued. The origin accepts only what STS issued, while it is valid; STS issues credentials
//! that live three seconds, so requests made across several expiries all succeed, each with
//! current credentials. Attacks: the temporary secret reflected by the origin, the source
//! secret and every issued secret in no response, log line or audit event; STS refusing the
//! source keys ends in `503 credential_refresh_failed`, not a hang or a stale key; a profile
//! that would put the minted values under other names is refused at load.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread::sleep;
use std::time::{Duration, Instant};

use serde_json::Value;
use sluice_e2e::origin::{OriginProcess, make_cert};
use sluice_e2e::proxy::{Sluice, TempDir, python, run};

const SOURCE_ACCESS: &str = "AKIASOURCEKEY0EXAMPL";
const SOURCE_SECRET: &str = "source/SECRET+key-77ac1e09d4b2f6";
const ROLE: &str = "arn:aws:iam::123456789012:role/agent";
const PLACEHOLDERS: [(&str, &str); 3] = [
    (
        "AWS_ACCESS_KEY_ID",
        "openshell:resolve:env:AWS_ACCESS_KEY_ID",
    ),
    (
        "AWS_SECRET_ACCESS_KEY",
        "openshell:resolve:env:AWS_SECRET_ACCESS_KEY",
    ),
    (
        "AWS_SESSION_TOKEN",
        "openshell:resolve:env:AWS_SESSION_TOKEN",
    ),
];

fn clients() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("clients")
}

const POLICY: &str = "version: 1\nnetwork_policies:\n  unrelated:\n    endpoints: [{host: unrelated.example.com, port: 443}]\n    binaries: [{path: /usr/bin/curl}]\n";

/// OpenShell's `aws` profile (providers/aws.yaml) as written, with STS and Bedrock local.
fn profile(port: u16) -> String {
    format!(
        "\
id: aws
display_name: AWS
description: Generic AWS access via STS temporary credentials
category: other
credentials:
  - name: access_key_id
    env_vars: [AWS_ACCESS_KEY_ID]
    required: true
    refresh:
      strategy: aws_sts_assume_role
      token_url: 'https://127.0.0.1:{port}/'
      refresh_before_seconds: 1
      max_lifetime_seconds: 3600
      additional_outputs:
        - output: secret_access_key
          credential: secret_access_key
        - output: session_token
          credential: session_token
      material:
        - {{name: role_arn, required: true, secret: false}}
        - {{name: session_name, required: false, secret: false}}
        - {{name: external_id, required: false, secret: false}}
        - {{name: aws_region, required: false, secret: false}}
        - {{name: aws_access_key_id, required: false, secret: false}}
        - {{name: aws_secret_access_key, required: false, secret: true}}
        - {{name: aws_session_token, required: false, secret: true}}
  - name: secret_access_key
    env_vars: [AWS_SECRET_ACCESS_KEY]
    required: true
  - name: session_token
    env_vars: [AWS_SESSION_TOKEN]
    required: true
endpoints:
  - {{host: 127.0.0.1, port: {port}, path: '/model/**', protocol: rest, enforcement: enforce,
     access: full, credential_signing: 'sigv4:body', signing_service: bedrock,
     signing_region: us-east-1}}
  - {{host: 127.0.0.1, port: {port}, path: '/echo-auth', protocol: rest, enforcement: enforce,
     access: full, credential_signing: sigv4, signing_service: bedrock,
     signing_region: us-east-1}}
binaries: [{python}, /usr/bin/curl]
",
        python = python()
    )
}

fn sts(dir: &Path, log: &Path) -> (OriginProcess, PathBuf) {
    let (ca, cert, key) = make_cert(dir);
    let mut cmd = Command::new("python3");
    cmd.arg(clients().join("sts_origin.py"))
        .arg(&cert)
        .arg(&key)
        .arg(log)
        .env("SOURCE_ACCESS_KEY_ID", SOURCE_ACCESS)
        .env("SOURCE_SECRET_ACCESS_KEY", SOURCE_SECRET)
        .env("STS_DURATION", "3");
    (OriginProcess::spawn(&mut cmd, "moto's STS"), ca)
}

fn start(dir: &TempDir, ca: &Path, port: u16, source_secret: &str) -> (Sluice, PathBuf) {
    let providers = dir.write("aws.yaml", &profile(port));
    Sluice::intercepting(
        dir,
        POLICY,
        &[ca],
        Some(&providers),
        &[
            ("AWS_ACCESS_KEY_ID_ROLE_ARN", ROLE),
            ("AWS_ACCESS_KEY_ID_AWS_ACCESS_KEY_ID", SOURCE_ACCESS),
            ("AWS_ACCESS_KEY_ID_AWS_SECRET_ACCESS_KEY", source_secret),
        ],
    )
}

fn bedrock(sluice: &Sluice, ca: &Path, port: u16) -> (i32, String) {
    let (code, out, err) = run(Command::new("python3")
        .arg(clients().join("sigv4_client.py"))
        .arg(sluice.proxy_url())
        .arg(ca)
        .arg(format!("https://127.0.0.1:{port}"))
        .arg("bedrock")
        .envs(PLACEHOLDERS));
    (code, format!("{out}{err}"))
}

/// curl signing with the placeholders (`--aws-sigv4`), for the reflecting route.
fn echo_auth(sluice: &Sluice, ca: &Path, port: u16) -> String {
    run(Command::new("/usr/bin/curl")
        .args(["-s", "-i", "--max-time", "20", "--cacert"])
        .arg(ca)
        .args(["-x", &sluice.proxy_url(), "-w", "\n%{http_code}"])
        .args(["--aws-sigv4", "aws:amz:us-east-1:bedrock", "--user"])
        .arg(format!("{}:{}", PLACEHOLDERS[0].1, PLACEHOLDERS[1].1))
        .args([
            "-H",
            &format!("x-amz-security-token: {}", PLACEHOLDERS[2].1),
        ])
        .arg(format!("https://127.0.0.1:{port}/echo-auth")))
    .1
}

fn logged(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn sluice_assumes_the_role_itself_and_signs_with_credentials_that_outlive_their_expiry() {
    let dir = TempDir::new("sts");
    let log = dir.path().join("sts.jsonl");
    let (server, sts_ca) = sts(dir.path(), &log);
    let port = server.port;
    let (sluice, ca) = start(&dir, &sts_ca, port, SOURCE_SECRET);

    let mut client_saw = String::new();
    let begin = Instant::now();
    while begin.elapsed() < Duration::from_secs(9) {
        let (code, out) = bedrock(&sluice, &ca, port);
        assert_eq!(code, 0, "{out}\n{}", sluice.stderr());
        assert!(out.contains("bedrock True True"), "{out}");
        client_saw.push_str(&out);
        sleep(Duration::from_millis(200));
    }
    let reflected = echo_auth(&sluice, &ca, port);
    assert!(
        reflected.ends_with("200"),
        "{reflected}\n{}",
        sluice.stderr()
    );
    client_saw.push_str(&reflected);

    let entries = logged(&log);
    // Every AssumeRole was signed with the source keys; every request to the origin carried
    // credentials STS issued and had not expired.
    let calls: Vec<&Value> = entries.iter().filter(|e| e["server"] == "sts").collect();
    assert!(calls.len() >= 3, "{entries:?}");
    assert!(calls.iter().all(|e| e["verified"] == true), "{calls:?}");
    assert!(calls.iter().all(|e| e["role"][0] == ROLE), "{calls:?}");
    let served: Vec<&Value> = entries.iter().filter(|e| e["server"] == "origin").collect();
    assert!(served.iter().all(|e| e["verified"] == true), "{served:?}");
    let keys: BTreeSet<&str> = served
        .iter()
        .map(|e| e["access"].as_str().unwrap())
        .collect();
    assert!(keys.len() >= 3, "not rotated across expiries: {keys:?}");

    // The reflection comes back as placeholders: the temporary secret, key id and token too.
    assert!(
        reflected.contains("openshell:resolve:env:AWS_SECRET_ACCESS_KEY"),
        "{reflected}"
    );
    assert!(
        reflected.contains("openshell:resolve:env:AWS_SESSION_TOKEN"),
        "{reflected}"
    );
    let key_now = served.last().unwrap()["access"].as_str().unwrap();
    assert!(!reflected.contains(key_now), "{reflected}");

    // No issued key, the source secret, or STS's answer reaches the client, a log or the audit.
    let audit = serde_json::to_string(&sluice.events()).unwrap();
    let stderr = sluice.stderr();
    let issued: BTreeSet<&str> = served
        .iter()
        .flat_map(|e| e["issued"].as_array().unwrap())
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(issued.len() >= 6, "{issued:?}");
    for secret in issued.iter().copied().chain([SOURCE_SECRET]) {
        assert!(!client_saw.contains(secret), "the client saw a secret");
        assert!(!audit.contains(secret), "the audit log holds a secret");
        assert!(!stderr.contains(secret), "sluice's log holds a secret");
    }
    for key in &keys {
        assert!(!client_saw.contains(key), "the client saw issued key {key}");
        assert!(!stderr.contains(key), "sluice's log holds {key}");
    }
    assert!(!client_saw.contains("ASIA"), "{client_saw}");
}

#[test]
fn sts_refusing_the_source_keys_is_a_503_not_a_hang() {
    let dir = TempDir::new("sts-refused");
    let log = dir.path().join("sts.jsonl");
    let (server, sts_ca) = sts(dir.path(), &log);
    let port = server.port;
    let (sluice, ca) = start(&dir, &sts_ca, port, "not/the-source+SECRET-at-all00");
    let begin = Instant::now();
    let out = echo_auth(&sluice, &ca, port);
    assert!(begin.elapsed() < Duration::from_secs(10), "{out}");
    assert!(out.ends_with("503"), "{out}");
    assert!(out.contains("credential_refresh_failed"), "{out}");
    // STS saw a signature, refused it, and the origin saw nothing.
    let entries = logged(&log);
    assert!(
        entries
            .iter()
            .any(|e| e["server"] == "sts" && e["verified"] == false),
        "{entries:?}"
    );
    assert!(
        !entries.iter().any(|e| e["server"] == "origin"),
        "{entries:?}"
    );
    assert!(
        sluice.stderr().contains("SignatureDoesNotMatch"),
        "{}",
        sluice.stderr()
    );
}

#[test]
fn minted_values_go_only_under_the_names_the_signer_reads() {
    let dir = TempDir::new("sts-names");
    let policy = dir.write("policy.yaml", POLICY);
    for (bad, want) in [
        (
            profile(8443).replace("[AWS_SESSION_TOKEN]", "[MY_TOKEN]"),
            "must have `env_vars: [AWS_SESSION_TOKEN]`",
        ),
        (
            profile(8443).replace("credential: session_token", "credential: nothing"),
            "names credential `nothing`, which is not declared",
        ),
        (
            profile(8443).replace(
                "        - output: session_token\n          credential: session_token\n",
                "",
            ),
            "needs an output `session_token`",
        ),
        (
            profile(8443).replace("token_url: 'https://", "token_url: 'http://"),
            "is not an https:// URL",
        ),
    ] {
        let providers = dir.write("aws.yaml", &bad);
        let out = Command::new(sluice_e2e::sluice_bin())
            .args(["policy", "check", "--providers"])
            .arg(&providers)
            .arg(&policy)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(!out.status.success(), "{stdout}{stderr}");
        assert!(
            stdout.contains(want) || stderr.contains(want),
            "{want}: {stdout}{stderr}"
        );
    }
}
