//! The launcher contract: exit codes 125/126/127, the status line, compat modes with the
//! test-only ABI override, and the network-namespace check.

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness::{Fixture, PROBE, SHIM, Shim, Victim, listener};
use crate::require_root;

#[test]
fn usage_errors_exit_125_before_anything_else() {
    let out = Command::new(SHIM)
        .args(["--proxy", "127.0.0.1:1", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&out.stderr).contains("empty filesystem allow-list"));
    let out = Command::new(SHIM)
        .args([
            "--exec",
            "/usr/bin",
            "--uid",
            "0",
            "--proxy",
            "127.0.0.1:1",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    let out = Command::new(SHIM).arg("--help").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("--compat strict|best-effort"));
}

#[test]
fn missing_command_exits_127() {
    require_root!();
    let fx = Fixture::new();
    let (_l, port) = listener();
    for cmd in ["/nonexistent/tool", "no-such-command-sluice"] {
        let out = Shim::new(&fx, port).run(&[cmd]);
        assert_eq!(out.code, Some(127), "{cmd}: {}", out.stderr);
        let line = out.status.last().unwrap();
        assert_eq!(line["status"], "failed");
        assert_eq!(line["stage"], "resolve");
        assert_eq!(line["exit"], 127);
    }
}

#[test]
fn non_executable_command_exits_126() {
    require_root!();
    let fx = Fixture::new();
    let (_l, port) = listener();
    let file = fx.rw.join("script");
    std::fs::write(&file, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = Shim::new(&fx, port).run(&[&file]);
    assert_eq!(out.code, Some(126), "{}", out.stderr);
    assert_eq!(out.status.last().unwrap()["exit"], 126);
}

#[test]
fn the_command_exit_status_is_passed_through() {
    require_root!();
    let fx = Fixture::new();
    let (_l, port) = listener();
    let out = Shim::new(&fx, port).probe(&["no-such-op"]);
    assert_eq!(out.code, Some(1));
    let out = Shim::new(&fx, port).probe(&["noop"]);
    assert_eq!(out.code, Some(0));
}

#[test]
fn status_line_says_what_was_enforced() {
    require_root!();
    let fx = Fixture::new();
    let (_l, port) = listener();
    let out = Shim::new(&fx, port).probe(&["noop"]);
    out.assert_ok();
    assert_eq!(out.status.len(), 1, "exactly one line, then EOF at exec");
    let ready = out.ready();
    assert_eq!(ready["compat"], "strict");
    let landlock = &ready["landlock"];
    assert!(landlock["abi"].as_u64().unwrap() >= 6, "{landlock}");
    assert_eq!(landlock["abi"], landlock["kernel_abi"]);
    assert_eq!(landlock["ruleset"], "fully_enforced");
    assert_eq!(landlock["fs"], true);
    assert_eq!(landlock["net"], true);
    assert_eq!(
        landlock["scopes"],
        serde_json::json!(["abstract_unix_socket", "signal"])
    );
    assert!(landlock["errata"].is_u64());
    let seccomp = &ready["seccomp"];
    assert_eq!(
        seccomp["programs"],
        serde_json::json!(["x32_guard", "clone3_enosys", "main"])
    );
    assert!(seccomp["hash"].as_str().unwrap().starts_with("fnv1a64:"));
    assert_eq!(ready["no_new_privs"], true);
    assert_eq!(ready["netns"], "host-allowed");
    assert_eq!(ready["degraded"], serde_json::json!([]));
    assert_eq!(ready["exec"], PROBE);
    assert_eq!(ready["test_disabled_layers"], serde_json::json!([]));
}

#[test]
fn strict_mode_refuses_an_abi_the_kernel_lacks() {
    require_root!();
    let fx = Fixture::new();
    let (_l, port) = listener();
    let out = Shim::new(&fx, port)
        .arg("--min-abi")
        .arg("99")
        .probe(&["noop"]);
    assert_eq!(out.code, Some(125));
    assert!(
        out.stderr
            .contains("Landlock ABI 99 required by --min-abi 99"),
        "{}",
        out.stderr
    );
    assert!(out.stdout.is_empty(), "the command must not run");
    assert_eq!(out.status[0]["stage"], "landlock");

    let out = Shim::new(&fx, port)
        .shim_env("SLUICE_SHIM_TEST_MAX_ABI", "5")
        .probe(&["noop"]);
    assert_eq!(out.code, Some(125));
    assert!(
        out.stderr.contains("Landlock ABI 6 required"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("capped to 5"), "{}", out.stderr);

    // --min-abi 9: this ABI-7 host (or any kernel below 9) must refuse, naming ABI 9.
    let out = Shim::new(&fx, port)
        .shim_env("SLUICE_SHIM_TEST_MAX_ABI", "8")
        .arg("--min-abi")
        .arg("9")
        .probe(&["noop"]);
    assert_eq!(out.code, Some(125));
    assert!(out.stderr.contains("ABI 9"), "{}", out.stderr);
}

#[test]
fn best_effort_runs_degraded_and_reports_it() {
    require_root!();
    let fx = Fixture::new();
    let (_l, port) = listener();
    let victim = Victim::start();
    let out = Shim::new(&fx, port)
        .arg("--compat")
        .arg("best-effort")
        .shim_env("SLUICE_SHIM_TEST_MAX_ABI", "5")
        .probe(&["kill", &victim.pid().to_string()]);
    // ABI 5 has no signal scope: the degradation is real, and reported.
    out.assert_ok();
    let ready = out.ready();
    assert_eq!(ready["landlock"]["abi"], 5);
    assert_eq!(ready["landlock"]["scopes"], serde_json::json!([]));
    let features: Vec<&str> = ready["degraded"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["feature"].as_str().unwrap())
        .collect();
    assert_eq!(features, ["landlock_scope"]);

    let out = Shim::new(&fx, port)
        .arg("--compat")
        .arg("best-effort")
        .shim_env("SLUICE_SHIM_TEST_MAX_ABI", "3")
        .probe(&["noop"]);
    out.assert_ok();
    let ready = out.ready();
    assert_eq!(ready["landlock"]["net"], false);
    let features: Vec<&str> = ready["degraded"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["feature"].as_str().unwrap())
        .collect();
    assert_eq!(
        features,
        ["landlock_net", "landlock_ioctl_dev", "landlock_scope"]
    );
}

#[test]
fn audit_denials_ask_landlock_to_log_after_exec() {
    require_root!();
    let fx = Fixture::new();
    let (_l, port) = listener();
    let out = Shim::new(&fx, port).arg("--audit-denials").probe(&["noop"]);
    out.assert_ok();
    assert_eq!(out.ready()["landlock"]["log_new_exec"], true);
    let out = Shim::new(&fx, port).probe(&["noop"]);
    assert_eq!(out.ready()["landlock"]["log_new_exec"], false);
}

#[test]
fn best_effort_without_landlock_needs_allow_unconfined() {
    require_root!();
    let fx = Fixture::new();
    let (_l, port) = listener();
    let base = || {
        Shim::new(&fx, port)
            .arg("--compat")
            .arg("best-effort")
            .shim_env("SLUICE_SHIM_TEST_MAX_ABI", "0")
    };
    let out = base().probe(&["noop"]);
    assert_eq!(out.code, Some(125));
    assert!(out.stderr.contains("--allow-unconfined"), "{}", out.stderr);
    let out = base().arg("--allow-unconfined").probe(&["noop"]);
    out.assert_ok();
    let ready = out.ready();
    assert_eq!(ready["landlock"]["ruleset"], "none");
    assert_eq!(ready["degraded"][0]["feature"], "landlock");
    // seccomp and the privilege drop still apply.
    assert_eq!(ready["uid"], 65534);
    assert_eq!(ready["seccomp"]["programs"][2], "main");
}

/// Whether the tests run in the host network namespace, by the shim's own definition.
fn in_host_netns() -> Option<bool> {
    use std::os::unix::fs::MetadataExt;
    let ours = std::fs::metadata("/proc/self/ns/net").ok()?;
    match std::fs::metadata("/proc/1/ns/net") {
        Ok(init) => Some((ours.dev(), ours.ino()) == (init.dev(), init.ino())),
        // pid 1 out of reach: only the fixed init inode (Linux >= 6.18) is conclusive.
        Err(_) => (ours.ino() == 0xEFFF_FFF9).then_some(true),
    }
}

#[test]
fn strict_mode_refuses_the_host_network_namespace() {
    require_root!();
    let (_l, port) = listener();
    let without_allow = || {
        Shim::bare(port)
            .arg("--ro")
            .arg("/usr")
            .arg("--exec")
            .arg(crate::harness::probe_dir())
    };
    match in_host_netns() {
        Some(true) => {
            let out = without_allow().probe(&["noop"]);
            assert_eq!(out.code, Some(125), "{}", out.stderr);
            assert!(
                out.stderr.contains("host network namespace"),
                "{}",
                out.stderr
            );
            assert!(out.stdout.is_empty());
            assert_eq!(out.status[0]["stage"], "process");
            // Best-effort runs, and reports it.
            let out = without_allow()
                .arg("--compat")
                .arg("best-effort")
                .probe(&["noop"]);
            out.assert_ok();
            assert_eq!(out.ready()["netns"], "host");
            assert_eq!(out.ready()["degraded"][0]["feature"], "netns");
        }
        _ => crate::harness::loud(
            "SKIPPED host-netns refusal: the tests do not run in the host netns",
        ),
    }
}

#[test]
fn strict_mode_runs_in_a_fresh_network_namespace() {
    require_root!();
    let fx = Fixture::new();
    let out = Shim::bare(3128)
        .arg("--ro")
        .arg("/usr")
        .arg("--ro")
        .arg("/proc")
        .arg("--rw")
        .arg(&fx.rw)
        .arg("--exec")
        .arg(crate::harness::probe_dir())
        .wrapped_in(&["unshare", "--net", "--"])
        .probe(&["noop"]);
    out.assert_ok();
    assert_eq!(out.ready()["netns"], "isolated");
}

#[test]
fn netns_path_is_entered_before_the_check() {
    require_root!();
    let fx = Fixture::new();
    let mut holder = Command::new("unshare")
        .args(["--net", "--", "sleep", "30"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let ns = format!("/proc/{}/ns/net", holder.id());
    let ours = std::fs::read_link("/proc/self/ns/net").unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::fs::read_link(&ns).ok().is_none_or(|l| l == ours) {
        assert!(Instant::now() < deadline, "unshare did not create a netns");
        std::thread::sleep(Duration::from_millis(5));
    }
    let out = Shim::bare(3128)
        .arg("--ro")
        .arg("/usr")
        .arg("--exec")
        .arg(crate::harness::probe_dir())
        .arg("--rw")
        .arg(&fx.rw)
        .arg("--netns-path")
        .arg(&ns)
        .probe(&["noop"]);
    let _ = holder.kill();
    let _ = holder.wait();
    out.assert_ok();
    assert_eq!(out.ready()["netns"], "isolated");
}
