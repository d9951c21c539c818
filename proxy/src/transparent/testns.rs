//! Test support: run a closure on a thread inside a fresh network namespace (loopback up,
//! nothing else), so tests can apply real nftables rules and open real sockets without
//! touching the machine's own network. Needs root.

use std::fs::File;
use std::os::fd::AsFd;
use std::process::{Command, Stdio};

/// True when the test may run (root); otherwise skips loudly, or fails when
/// `SLUICE_REQUIRE_PRIVILEGED=1` (CI).
pub fn privileged(test: &str) -> bool {
    if rustix::process::geteuid().is_root() {
        return true;
    }
    assert!(
        std::env::var("SLUICE_REQUIRE_PRIVILEGED").as_deref() != Ok("1"),
        "{test} needs root and SLUICE_REQUIRE_PRIVILEGED=1 is set"
    );
    eprintln!(
        "!!! SKIPPED {test}: needs root (set SLUICE_REQUIRE_PRIVILEGED=1 to make this fatal)"
    );
    false
}

/// Runs `f` on a new thread that entered a fresh network namespace; commands it spawns start
/// there too. The namespace is held by a placeholder process killed afterwards.
pub fn in_fresh_netns<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let mut holder = Command::new("unshare")
        .args(["--net", "sleep", "infinity"])
        .stdin(Stdio::null())
        .spawn()
        .expect("unshare --net");
    let path = format!("/proc/{}/ns/net", holder.id());
    let own = std::fs::metadata("/proc/self/ns/net").unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        use std::os::unix::fs::MetadataExt;
        let theirs = std::fs::metadata(&path).unwrap();
        if theirs.ino() != own.ino() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no namespace");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let result = std::thread::spawn(move || {
        let ns = File::open(&path).unwrap();
        rustix::thread::move_into_link_name_space(
            ns.as_fd(),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )
        .unwrap();
        run(&["ip", "link", "set", "lo", "up"]);
        f()
    })
    .join();
    let _ = holder.kill();
    let _ = holder.wait();
    match result {
        Ok(v) => v,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// Runs a command (in the calling thread's namespace) and panics with its stderr on failure.
pub fn run(args: &[&str]) {
    let out = Command::new(args[0]).args(&args[1..]).output().unwrap();
    assert!(
        out.status.success(),
        "{}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Loads an nftables ruleset (`nft -f -`) in the calling thread's namespace.
pub fn nft(rules: &str) {
    use std::io::Write;
    let mut child = Command::new("nft")
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(rules.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "nft -f -: {}\n{rules}",
        String::from_utf8_lossy(&out.stderr)
    );
}
