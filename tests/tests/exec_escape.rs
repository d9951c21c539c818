//! End-to-end attacks on `sluice exec` from the confined side, and its start-up refusals:
//! UDP around sluice, a planted CA path, the host's /tmp, secrets and audit within reach,
//! and the one-binary, invoking-user and user-PATH behaviour a new user relies on. The real
//! sluice binary runs real programs (sh, python3). Needs root (the shim drops privileges;
//! the fence is a network namespace).
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

use std::net::UdpSocket;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use sluice_e2e::proxy::{TempDir, privileged};
use sluice_e2e::sluice_bin;

const POLICY: &str = "version: 1\nnetwork_policies: {}\n";

/// A test directory the confined command (another uid) may enter, with a writable `work/`
/// owned by uid 65534 (whom sluice exec, as root, runs the command as: `--user 65534`, since
/// sluice chooses only a normal user's directory by itself).
fn setup(tag: &str) -> (TempDir, PathBuf) {
    let dir = TempDir::new(tag);
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::set_permissions(&work, std::fs::Permissions::from_mode(0o777)).unwrap();
    if sluice_e2e::proxy::is_root() {
        std::os::unix::fs::chown(&work, Some(65534), Some(65534)).unwrap();
    }
    (dir, work)
}

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

/// `sluice exec [--policy P] --audit-log dir/audit.jsonl FLAGS -- CMD` in `cwd`; with `policy`
/// `None`, no `--policy` (the embedded default).
fn exec_in(
    bin: &Path,
    dir: &TempDir,
    cwd: &Path,
    flags: &[&str],
    env: &[(&str, &str)],
    cmd: &[&str],
    policy: Option<&str>,
) -> Out {
    let mut c = Command::new(bin);
    c.arg("exec");
    if let Some(text) = policy {
        c.arg("--policy").arg(dir.write("policy.yaml", text));
    }
    if !flags.contains(&"--audit-log") {
        c.arg("--audit-log").arg(dir.path().join("audit.jsonl"));
    }
    // As root (not through sudo), nobody by name: sluice chooses only a normal user's
    // directory by itself.
    let sudo = env.iter().any(|(k, _)| *k == "SUDO_UID");
    if sluice_e2e::proxy::is_root() && !sudo && !flags.contains(&"--user") {
        c.args(["--user", "65534"]);
    }
    c.args(flags).arg("--").args(cmd).current_dir(cwd);
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().expect("run sluice exec");
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn exec(dir: &TempDir, cwd: &Path, flags: &[&str], cmd: &[&str]) -> Out {
    exec_in(&sluice_bin(), dir, cwd, flags, &[], cmd, Some(POLICY))
}

/// Python that sends one datagram to `addr` and prints `sent` or `refused <errno>`.
fn udp_probe(port: u16) -> String {
    format!(
        "import socket\ntry:\n    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'escaped', ('127.0.0.1', {port}))\n    print('sent')\nexcept OSError as e:\n    print('refused', e.errno)\n"
    )
}

#[test]
fn udp_from_the_command_never_reaches_a_host_listener() {
    if !privileged("udp_from_the_command_never_reaches_a_host_listener") {
        return;
    }
    let (dir, work) = setup("exec-udp");
    let listener = UdpSocket::bind("127.0.0.1:0").unwrap();
    listener
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    std::fs::write(work.join("udp.py"), udp_probe(port)).unwrap();
    // Without the fence the shim refuses the socket; with it (the default as root) the
    // datagram stays in the namespace.
    for flags in [&["--no-netns"][..], &[][..]] {
        let out = exec(&dir, &work, flags, &["/usr/bin/python3", "udp.py"]);
        assert_eq!(out.code, 0, "{flags:?}\n{}\n{}", out.stdout, out.stderr);
        if flags.is_empty() {
            assert!(
                out.stderr
                    .contains("inside the command's network namespace"),
                "{}",
                out.stderr
            );
        } else {
            assert_eq!(out.stdout.trim(), "refused 1", "{}", out.stderr);
            assert!(
                out.stderr.contains("WARNING: no network fence"),
                "{}",
                out.stderr
            );
        }
        let mut buf = [0u8; 64];
        assert!(
            listener.recv_from(&mut buf).is_err(),
            "a datagram from the sandbox arrived ({flags:?})"
        );
    }
    // The explicit opt-out is loud, and does let it through.
    let out = exec(
        &dir,
        &work,
        &["--no-netns", "--allow-udp"],
        &["/usr/bin/python3", "udp.py"],
    );
    assert_eq!(out.stdout.trim(), "sent", "{}", out.stderr);
    assert!(out.stderr.contains("--allow-udp"), "{}", out.stderr);
    let mut buf = [0u8; 64];
    let (n, _) = listener.recv_from(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"escaped");
}

/// Python that tries TCP Fast Open's implicit connect (`sendto` with `MSG_FASTOPEN`, no
/// `connect()`) to `port` and prints `sent` or `refused <errno>`.
fn fast_open_probe(port: u16) -> String {
    format!(
        "import socket\ns = socket.socket()\ntry:\n    s.sendto(b'escaped', socket.MSG_FASTOPEN, ('127.0.0.1', {port}))\n    print('sent')\nexcept OSError as e:\n    print('refused', e.errno)\n"
    )
}

#[test]
fn tcp_fast_open_from_the_command_never_reaches_a_host_listener() {
    if !privileged("tcp_fast_open_from_the_command_never_reaches_a_host_listener") {
        return;
    }
    let (dir, work) = setup("exec-tfo");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    std::fs::write(work.join("tfo.py"), fast_open_probe(port)).unwrap();
    // Without the fence, the implicit connect must be refused and no connection may arrive.
    // Which layer refuses depends on the kernel: the shim's seccomp filter refuses
    // MSG_FASTOPEN everywhere (EPERM, 1); a Landlock whose connect hook sees Fast Open's
    // implicit connect (newer kernels) refuses it first (EACCES, 13). Either is the property.
    let out = exec(
        &dir,
        &work,
        &["--no-netns"],
        &["/usr/bin/python3", "tfo.py"],
    );
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    let layer = match out.stdout.trim() {
        "refused 1" => "seccomp (EPERM)",
        "refused 13" => "Landlock (EACCES)",
        other => panic!("Fast Open was not refused: {other}\n{}", out.stderr),
    };
    eprintln!("tcp_fast_open: refused by {layer}");
    match listener.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("a connection from the sandbox arrived: {other:?}"),
    }
}

#[test]
fn planted_ca_paths_are_never_written_through() {
    if !privileged("planted_ca_paths_are_never_written_through") {
        return;
    }
    let (dir, work) = setup("exec-ca-plant");
    let host_tmp = dir.path().join("host-tmp");
    std::fs::create_dir_all(&host_tmp).unwrap();
    std::fs::set_permissions(&host_tmp, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let victim = dir.write("victim", "precious\n");
    // What a sandboxed process could do before: a directory with ca.pem and ca-bundle.pem
    // links for every pid sluice is likely to get next.
    let next: u32 = std::fs::read_to_string("/proc/sys/kernel/ns_last_pid")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    for pid in next..next + 400 {
        let d = host_tmp.join(format!("sluice-exec-{pid}"));
        std::fs::create_dir_all(&d).unwrap();
        for f in ["ca.pem", "ca-bundle.pem"] {
            std::os::unix::fs::symlink(&victim, d.join(f)).unwrap();
        }
    }
    let out = exec_in(
        &sluice_bin(),
        &dir,
        &work,
        &[],
        &[("TMPDIR", host_tmp.to_str().unwrap())],
        &[
            "/bin/sh",
            "-c",
            "cat \"$SSL_CERT_FILE\" | head -1; echo \"TMPDIR=$TMPDIR\"",
        ],
        Some(POLICY),
    );
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    assert!(
        out.stdout.contains("-----BEGIN CERTIFICATE-----"),
        "{}",
        out.stdout
    );
    // The directory it used: unpredictable, and gone afterwards.
    let used = out
        .stderr
        .lines()
        .find_map(|l| l.strip_prefix("sluice: CA certificate in "))
        .and_then(|l| l.split_whitespace().next())
        .map(PathBuf::from)
        .unwrap();
    let root = used.parent().and_then(Path::parent).unwrap();
    let name = root.file_name().unwrap().to_string_lossy().into_owned();
    let suffix = name.strip_prefix("sluice-exec-").unwrap();
    assert_eq!(suffix.len(), 32, "{name}");
    assert!(suffix.chars().all(|c| c.is_ascii_hexdigit()), "{name}");
    assert!(!root.exists(), "{} was left behind", root.display());
    // The command's TMPDIR was inside it, not the host's temporary directory.
    assert!(
        out.stdout
            .contains(&format!("TMPDIR={}/tmp", root.display())),
        "{}",
        out.stdout
    );
}

#[test]
fn run_ca_dir_replaces_planted_links_and_refuses_a_linked_directory() {
    let dir = TempDir::new("run-ca-plant");
    let victim = dir.write("victim", "precious\n");
    let ca_dir = dir.path().join("ca");
    std::fs::create_dir_all(&ca_dir).unwrap();
    for f in ["ca.pem", "ca-bundle.pem"] {
        std::os::unix::fs::symlink(&victim, ca_dir.join(f)).unwrap();
    }
    let mut sluice =
        sluice_e2e::proxy::Sluice::start(POLICY, &["--ca-dir", ca_dir.to_str().unwrap()]);
    sluice.stop();
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    for f in ["ca.pem", "ca-bundle.pem"] {
        let meta = std::fs::symlink_metadata(ca_dir.join(f)).unwrap();
        assert!(meta.file_type().is_file(), "{f} is still a link");
        assert_eq!(meta.mode() & 0o777, 0o644);
        assert!(
            std::fs::read_to_string(ca_dir.join(f))
                .unwrap()
                .contains("BEGIN CERTIFICATE")
        );
    }
    // A link as the directory itself: refused, nothing written through it.
    let real = dir.path().join("elsewhere");
    std::fs::create_dir_all(&real).unwrap();
    let linked = dir.path().join("linked-ca");
    std::os::unix::fs::symlink(&real, &linked).unwrap();
    // (sluice does not start, as for any CA directory it cannot write.)
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, POLICY).unwrap();
    let out = Command::new(sluice_bin())
        .args([
            "run",
            "--listen",
            "127.0.0.1:0",
            "--audit-log",
            "/dev/null",
            "--policy",
        ])
        .arg(&policy)
        .args(["--ca-dir", linked.to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("--ca-dir {}", linked.display())),
        "{stderr}"
    );
    assert_eq!(std::fs::read_dir(&real).unwrap().count(), 0);
}

#[test]
fn the_command_cannot_write_the_hosts_tmp_but_has_its_own() {
    if !privileged("the_command_cannot_write_the_hosts_tmp_but_has_its_own") {
        return;
    }
    let (dir, work) = setup("exec-tmp");
    let marker = format!("/tmp/sluice-e2e-escape-{}", std::process::id());
    let _ = std::fs::remove_file(&marker);
    let script = format!(
        "touch {marker} 2>/dev/null && echo host-tmp-written; echo private > \"$TMPDIR/f\" && cat \"$TMPDIR/f\"; echo \"$TMPDIR\""
    );
    // A policy file that grants nothing, and the embedded default (no --policy).
    for policy in [Some(POLICY), None] {
        let cmd = ["/bin/sh", "-c", &script];
        let out = exec_in(&sluice_bin(), &dir, &work, &[], &[], &cmd, policy);
        assert_eq!(out.code, 0, "{policy:?}\n{}\n{}", out.stdout, out.stderr);
        assert!(!out.stdout.contains("host-tmp-written"), "{}", out.stdout);
        assert!(!Path::new(&marker).exists(), "{policy:?}");
        assert!(out.stdout.contains("private\n"), "{}", out.stdout);
        assert!(!out.stdout.lines().any(|l| l == "/tmp"), "{}", out.stdout);
    }
}

#[test]
fn secrets_or_audit_within_the_commands_reach_refuse_to_start() {
    if !privileged("secrets_or_audit_within_the_commands_reach_refuse_to_start") {
        return;
    }
    let (dir, work) = setup("exec-reach");
    let secrets = work.join("secrets.env");
    std::fs::write(&secrets, "TEST_API_KEY=s3cr3t-REACH-5521\n").unwrap();
    std::fs::set_permissions(&secrets, std::fs::Permissions::from_mode(0o600)).unwrap();
    let ran = work.join("ran");
    let touch = format!("touch {}", ran.display());
    let cmd = ["/bin/sh", "-c", touch.as_str()];
    let secrets_flag = secrets.to_str().unwrap();
    let out = exec(&dir, &work, &["--secrets-file", secrets_flag], &cmd);
    assert_eq!(out.code, 125, "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stderr.contains("the secrets file")
            && out.stderr.contains(secrets_flag)
            && out.stderr.contains("filesystem_policy.include_workdir"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("s3cr3t-REACH-5521"));
    assert!(!ran.exists(), "the command ran");
    // The audit log in the working directory, and one under an --rw grant reached by a link.
    let audit = work.join("sluice-audit.jsonl");
    let out = exec(&dir, &work, &["--audit-log", audit.to_str().unwrap()], &cmd);
    assert_eq!(out.code, 125, "{}", out.stderr);
    assert!(out.stderr.contains("the audit log"), "{}", out.stderr);
    let shared = dir.path().join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    let link = dir.path().join("shared-link");
    std::os::unix::fs::symlink(&shared, &link).unwrap();
    let via_link = link.join("audit.jsonl");
    let out = exec(
        &dir,
        &work,
        &[
            "--audit-log",
            via_link.to_str().unwrap(),
            "--rw",
            shared.to_str().unwrap(),
        ],
        &cmd,
    );
    assert_eq!(out.code, 125, "{}", out.stderr);
    assert!(out.stderr.contains("--rw"), "{}", out.stderr);
    assert!(!ran.exists(), "the command ran");
    // Outside every grant: it runs.
    let outside = dir.path().join("secrets.env");
    std::fs::rename(&secrets, &outside).unwrap();
    let out = exec(
        &dir,
        &work,
        &["--secrets-file", outside.to_str().unwrap()],
        &cmd,
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(ran.exists());
}

#[test]
fn the_sluice_binary_alone_runs_exec() {
    if !privileged("the_sluice_binary_alone_runs_exec") {
        return;
    }
    let (dir, work) = setup("exec-alone");
    let bin_dir = dir.path().join("bin");
    std::fs::create_dir_all(&bin_dir).unwrap();
    let alone = bin_dir.join("sluice");
    std::fs::copy(sluice_bin(), &alone).unwrap();
    assert!(!bin_dir.join("sluice-shim").exists());
    let out = exec_in(
        &alone,
        &dir,
        &work,
        &[],
        &[("PATH", "/usr/bin:/bin")],
        &["/bin/sh", "-c", "echo confined as $(id -u)"],
        Some(POLICY),
    );
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert_eq!(out.stdout.trim(), "confined as 65534", "{}", out.stderr);
}

#[test]
fn the_command_runs_as_the_invoking_user_with_their_path() {
    if !privileged("the_command_runs_as_the_invoking_user_with_their_path") {
        return;
    }
    let (dir, work) = setup("exec-user");
    // A toolchain outside the system directories, as under a user's home.
    let tools = dir.path().join("home/.local/toolchain/bin");
    std::fs::create_dir_all(&tools).unwrap();
    for d in tools.ancestors().take_while(|d| d.starts_with(dir.path())) {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let tool = tools.join("greet");
    std::fs::write(
        &tool,
        "#!/bin/sh\necho \"hello from the user's toolchain as $(id -u):$(id -g)\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:/usr/bin:/bin", tools.display());
    // Through sudo: SUDO_UID/SUDO_GID name the user.
    let out = exec_in(
        &sluice_bin(),
        &dir,
        &work,
        &[],
        &[("PATH", &path), ("SUDO_UID", "4242"), ("SUDO_GID", "4343")],
        &["greet"],
        Some(POLICY),
    );
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert_eq!(
        out.stdout.trim(),
        "hello from the user's toolchain as 4242:4343"
    );
    // As the user itself (not root): no namespace, a loud warning, UDP refused.
    let home = dir.path().join("home");
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o777)).unwrap();
    let policy = dir.write("policy.yaml", POLICY);
    std::fs::set_permissions(&policy, std::fs::Permissions::from_mode(0o644)).unwrap();
    let audit = home.join("audit.jsonl");
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(sluice_bin())
        .args(["exec", "--policy"])
        .arg(&policy)
        .arg("--audit-log")
        .arg(&audit)
        .args(["--", "/bin/sh", "-c", "greet; /usr/bin/python3 -c \"import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\" 2>&1 | tail -1"])
        .env("PATH", &path)
        .env("HOME", &home)
        .current_dir(&work)
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        stdout.contains("hello from the user's toolchain as 65534:65534"),
        "{stdout}\n{stderr}"
    );
    assert!(stdout.contains("PermissionError"), "{stdout}\n{stderr}");
    assert!(stderr.contains("WARNING: no network fence"), "{stderr}");
}

/// Whatever keeps the proxy from starting (a policy that does not load, a secrets file
/// others may read), `sluice exec` exits 125 without starting the command: its status is
/// never one the command could have returned.
#[test]
fn exec_exits_125_when_it_cannot_start_the_command() {
    let (dir, work) = setup("exec-125");
    let ran = work.join("ran");
    let touch = format!("touch {}", ran.display());
    let cmd = ["/bin/sh", "-c", touch.as_str()];
    let out = exec_in(
        &sluice_bin(),
        &dir,
        &work,
        &[],
        &[],
        &cmd,
        Some("version: 1\nnetwork_policies: [\n"),
    );
    assert_eq!(out.code, 125, "{}", out.stderr);
    assert!(out.stderr.contains("policy.yaml"), "{}", out.stderr);
    // A secrets file others may read is refused (kept outside the command's reach, so that
    // this refusal is the one that counts).
    let secrets = dir.path().join("secrets.env");
    std::fs::write(&secrets, "TEST_API_KEY=x\n").unwrap();
    std::fs::set_permissions(&secrets, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = exec(
        &dir,
        &work,
        &["--secrets-file", secrets.to_str().unwrap()],
        &cmd,
    );
    assert_eq!(out.code, 125, "{}", out.stderr);
    assert!(out.stderr.contains("secrets.env"), "{}", out.stderr);
    assert!(!ran.exists(), "the command ran");
}
