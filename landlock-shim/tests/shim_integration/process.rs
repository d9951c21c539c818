//! What the command inherits: ids, capabilities, no_new_privs, PDEATHSIG, core limit, session,
//! descriptors, working directory and an environment built from scratch.

use std::fs::File;
use std::os::fd::OwnedFd;

use crate::harness::{Fixture, Shim, listener};
use crate::require_root;

#[test]
fn runs_as_nobody_without_groups_or_capabilities() {
    require_root!();
    let fx = Fixture::new();
    let (_l, port) = listener();
    let out = Shim::new(&fx, port).probe(&["status"]);
    out.assert_ok();
    let proc = &out.json()["proc"];
    assert_eq!(proc["Uid"], "65534 65534 65534 65534");
    assert_eq!(proc["Gid"], "65534 65534 65534 65534");
    assert_eq!(proc["Groups"], "");
    for set in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert_eq!(proc[set], "0000000000000000", "{set}");
    }
    let ready = out.ready();
    assert_eq!(ready["uid"], 65534);
    assert_eq!(ready["gid"], 65534);
    assert_eq!(ready["groups"], serde_json::json!([]));
    assert_eq!(ready["cap_bounding_cleared"], true);
}

#[test]
fn explicit_ids_are_used() {
    require_root!();
    let fx = Fixture::new();
    let (_l, port) = listener();
    let out = Shim::new(&fx, port)
        .arg("--uid")
        .arg("4242")
        .arg("--gid")
        .arg("4343")
        .probe(&["status"]);
    out.assert_ok();
    assert_eq!(out.json()["proc"]["Uid"], "4242 4242 4242 4242");
    assert_eq!(out.json()["proc"]["Gid"], "4343 4343 4343 4343");
}

#[test]
fn no_new_privs_pdeathsig_core_limit_and_session_survive_exec() {
    require_root!();
    let fx = Fixture::new();
    let (_l, port) = listener();
    let out = Shim::new(&fx, port).probe(&["status"]);
    out.assert_ok();
    let json = out.json();
    assert_eq!(json["proc"]["NoNewPrivs"], "1");
    assert_eq!(json["no_new_privs"], 1);
    // Seccomp mode 2 (filter) with the three programs.
    assert_eq!(json["proc"]["Seccomp"], "2");
    assert_eq!(json["proc"]["Seccomp_filters"], "3");
    assert_eq!(json["pdeathsig"], libc::SIGKILL);
    assert_eq!(json["core_limit"], "0 0");
    // setsid(): the probe (the shim's pid) leads its own session.
    assert_eq!(json["session"], json["pid"]);
    let ready = out.ready();
    assert_eq!(ready["pdeathsig"], libc::SIGKILL);
    assert_eq!(ready["no_new_privs"], true);
    assert_eq!(ready["core_limit"], 0);
    assert_eq!(ready["session"], "new");
}

#[test]
fn inherited_descriptors_are_closed() {
    require_root!();
    let fx = Fixture::new();
    let (_l, port) = listener();
    let secret = fx.ro.join("file");
    let fd: OwnedFd = File::open(&secret).unwrap().into();
    let out = Shim::new(&fx, port).leak_fd(fd).probe(&["fds"]);
    out.assert_ok();
    // fd 3 (status, close-on-exec) and fd 7 (leaked) are gone; only stdio remains.
    assert_eq!(out.json()["fds"], serde_json::json!([0, 1, 2]));
}

#[test]
fn environment_is_built_from_scratch() {
    require_root!();
    let fx = Fixture::new();
    let (_l, port) = listener();
    let bundle = fx.ro.join("file");
    let out = Shim::new(&fx, port)
        .shim_env("SECRET_TOKEN", "s3cret-value")
        .shim_env("HTTPS_PROXY", "http://attacker:1")
        .shim_env("LANG", "C.UTF-8")
        .arg("--ca-bundle")
        .arg(&bundle)
        .arg("--ca-cert")
        .arg(&bundle)
        .arg("--env")
        .arg("API_KEY=openshell:resolve:env:API_KEY")
        .arg("--workdir")
        .arg(&fx.rw)
        .probe(&["env"]);
    out.assert_ok();
    let env = &out.json()["env"];
    assert!(env.get("SECRET_TOKEN").is_none(), "{env}");
    assert!(!out.stdout.contains("s3cret-value"));
    let proxy = format!("http://127.0.0.1:{port}");
    for key in ["HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy"] {
        assert_eq!(env[key], proxy.as_str(), "{key}");
    }
    assert_eq!(env["NO_PROXY"], "localhost,127.0.0.1,::1");
    assert_eq!(env["no_proxy"], "localhost,127.0.0.1,::1");
    assert_eq!(env["NODE_USE_ENV_PROXY"], "1");
    let bundle = bundle.to_str().unwrap();
    for key in [
        "SSL_CERT_FILE",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "GIT_SSL_CAINFO",
        "PIP_CERT",
        "CARGO_HTTP_CAINFO",
        "AWS_CA_BUNDLE",
        "NODE_EXTRA_CA_CERTS",
    ] {
        assert_eq!(env[key], bundle, "{key}");
    }
    assert_eq!(env["API_KEY"], "openshell:resolve:env:API_KEY");
    assert_eq!(env["LANG"], "C.UTF-8");
    let rw = fx.rw.to_str().unwrap();
    assert_eq!(env["HOME"], rw);
    assert_eq!(env["USER"], "nobody");
    assert_eq!(env["PATH"], "/usr/local/bin:/usr/bin:/bin");
    let allowed = [
        "HTTP_PROXY",
        "http_proxy",
        "HTTPS_PROXY",
        "https_proxy",
        "NO_PROXY",
        "no_proxy",
        "NODE_USE_ENV_PROXY",
        "SSL_CERT_FILE",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "GIT_SSL_CAINFO",
        "PIP_CERT",
        "CARGO_HTTP_CAINFO",
        "AWS_CA_BUNDLE",
        "NODE_EXTRA_CA_CERTS",
        "API_KEY",
        "LANG",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "PATH",
        "TMPDIR",
        "XDG_CACHE_HOME",
    ];
    let passed_through = ["TERM", "TZ", "COLUMNS", "LINES"];
    for key in env.as_object().unwrap().keys() {
        let key = key.as_str();
        assert!(
            allowed.contains(&key) || passed_through.contains(&key) || key.starts_with("LC_"),
            "unexpected variable {key}"
        );
    }
}

#[test]
fn workdir_is_entered_as_the_target_user() {
    require_root!();
    let fx = Fixture::new();
    let (_l, port) = listener();
    let out = Shim::new(&fx, port)
        .arg("--workdir")
        .arg(&fx.rw)
        .probe(&["status"]);
    out.assert_ok();
    assert_eq!(out.json()["cwd"], fx.rw.to_str().unwrap());
}

#[test]
fn a_start_as_the_target_user_runs_in_strict_mode_and_reports_what_it_cannot_drop() {
    require_root!();
    let fx = Fixture::new();
    let (_l, port) = listener();
    // What `sluice exec` does when a user (not root) runs it: the shim starts as that user.
    let out = Shim::new(&fx, port)
        .wrapped_in(&[
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--groups=65533",
            "--",
        ])
        .probe(&["status"]);
    out.assert_ok();
    let ready = out.ready();
    assert_eq!(ready["compat"], "strict");
    assert_eq!(ready["uid"], 65534);
    assert_eq!(ready["no_new_privs"], true);
    assert_eq!(ready["cap_bounding_cleared"], false);
    let degraded = ready["degraded"].to_string();
    assert!(
        degraded.contains("cap_bounding_set") && degraded.contains("groups"),
        "{degraded}"
    );
    let proc = &out.json()["proc"];
    for set in ["CapInh", "CapPrm", "CapEff", "CapAmb"] {
        assert_eq!(proc[set], "0000000000000000", "{set}");
    }
    assert_eq!(proc["NoNewPrivs"], "1");
}
