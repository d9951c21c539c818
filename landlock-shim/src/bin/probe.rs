//! sluice-shim-probe: tries one operation and prints what the kernel said, as one JSON line.
//!
//! Test-only (built with the `test-hooks` feature). The integration tests run
//! `sluice-shim ... -- sluice-shim-probe OP ARGS` and assert the errno of each confinement
//! layer (spec §1.13): `{"op":"connect","stage":"connect","errno":"EACCES"}`, with `errno`
//! null on success. Ops that exec something print nothing when the exec succeeds. Does not
//! judge anything: the tests do.

use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::process::ExitCode;

use serde_json::{Map, Value, json};
use sluice_shim::status::errno_name;

/// The result of one op: which step failed, and how.
type Outcome = Result<Map<String, Value>, (&'static str, io::Error)>;

fn ok() -> Outcome {
    Ok(Map::new())
}

fn at(stage: &'static str) -> impl FnOnce(io::Error) -> (&'static str, io::Error) {
    move |e| (stage, e)
}

fn last(stage: &'static str) -> (&'static str, io::Error) {
    (stage, io::Error::last_os_error())
}

fn cvt(ret: libc::c_long, stage: &'static str) -> Result<libc::c_long, (&'static str, io::Error)> {
    if ret < 0 { Err(last(stage)) } else { Ok(ret) }
}

fn arg(args: &[String], i: usize) -> Result<&str, (&'static str, io::Error)> {
    args.get(i)
        .map(String::as_str)
        .ok_or_else(|| ("args", io::Error::other("missing argument")))
}

fn addr(args: &[String]) -> Result<SocketAddr, (&'static str, io::Error)> {
    arg(args, 0)?
        .parse()
        .map_err(|e| ("args", io::Error::other(format!("{e}"))))
}

// === raw syscalls (test tool: each wrapper states why it is sound) ===

#[allow(unsafe_code)]
fn raw_socket(domain: i32, ty: i32, proto: i32) -> Result<OwnedFd, (&'static str, io::Error)> {
    // SAFETY: integer arguments; a non-negative return is a fresh descriptor we own.
    let fd = unsafe { libc::socket(domain, ty | libc::SOCK_CLOEXEC, proto) };
    if fd < 0 {
        return Err(last("socket"));
    }
    // SAFETY: fd was just returned by socket() and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[allow(unsafe_code)]
fn raw_connect_unix(fd: &OwnedFd, path: &[u8], abstract_name: bool) -> io::Result<()> {
    // SAFETY: sockaddr_un is plain old data; all-zero is a valid value.
    let mut sa: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    sa.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let offset = usize::from(abstract_name);
    if path.len() + offset >= sa.sun_path.len() {
        return Err(io::Error::from_raw_os_error(libc::ENAMETOOLONG));
    }
    for (i, b) in path.iter().enumerate() {
        sa.sun_path[i + offset] = *b as libc::c_char;
    }
    let base = size_of::<libc::sa_family_t>();
    let len = base + offset + path.len() + usize::from(!abstract_name);
    // SAFETY: sa is initialised and len does not exceed its size.
    let ret = unsafe {
        libc::connect(
            fd.as_raw_fd(),
            (&sa as *const libc::sockaddr_un).cast(),
            len as libc::socklen_t,
        )
    };
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

#[allow(unsafe_code)]
fn raw_connect_inet(fd: &OwnedFd, to: SocketAddr) -> io::Result<()> {
    let SocketAddr::V4(v4) = to else {
        return Err(io::Error::other("IPv4 only"));
    };
    let sa = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: v4.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*v4.ip()).to_be(),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: sa is a fully initialised sockaddr_in of the length passed.
    let ret = unsafe {
        libc::connect(
            fd.as_raw_fd(),
            (&sa as *const libc::sockaddr_in).cast(),
            size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    };
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

#[allow(unsafe_code)]
fn raw_syscall(nr: libc::c_long, a: [libc::c_long; 5]) -> libc::c_long {
    // SAFETY: the callers pass integer arguments or pointers to live locals of the layout the
    // syscall expects (or NULL); the probe is single-threaded.
    unsafe { libc::syscall(nr, a[0], a[1], a[2], a[3], a[4]) }
}

#[allow(unsafe_code)]
fn fork_like_child_exits(ret: libc::c_long, stage: &'static str) -> Outcome {
    if ret == 0 {
        // SAFETY: in the child of a raw clone: leave immediately without running destructors.
        unsafe { libc::_exit(0) };
    }
    let pid = cvt(ret, stage)? as libc::pid_t;
    let mut status = 0;
    // SAFETY: waiting for our own child with a pointer to a live local.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    ok()
}

#[allow(unsafe_code)]
fn prctl_get(option: libc::c_int) -> i64 {
    let zero: libc::c_ulong = 0;
    if option == libc::PR_GET_PDEATHSIG {
        let mut value: libc::c_int = 0;
        // SAFETY: PR_GET_PDEATHSIG writes one int through the pointer to a live local.
        unsafe { libc::prctl(option, &mut value as *mut libc::c_int, zero, zero, zero) };
        return i64::from(value);
    }
    // SAFETY: the other PR_GET_* options used here take no pointer and return the value.
    i64::from(unsafe { libc::prctl(option, zero, zero, zero, zero) })
}

#[allow(unsafe_code)]
fn fd_open(fd: RawFd) -> bool {
    // SAFETY: F_GETFD only reads flags.
    unsafe { libc::fcntl(fd, libc::F_GETFD) != -1 }
}

fn libc_call(stage: &'static str, f: impl FnOnce() -> libc::c_int) -> Outcome {
    let ret = f();
    if ret < 0 { Err(last(stage)) } else { ok() }
}

// === ops ===

fn op_socket(kind: &str) -> Outcome {
    let (d, t, p) = match kind {
        "unix" => (libc::AF_UNIX, libc::SOCK_STREAM, 0),
        "unix_dgram" => (libc::AF_UNIX, libc::SOCK_DGRAM, 0),
        "tcp" => (libc::AF_INET, libc::SOCK_STREAM, libc::IPPROTO_TCP),
        "tcp6" => (libc::AF_INET6, libc::SOCK_STREAM, 0),
        "udp" => (libc::AF_INET, libc::SOCK_DGRAM, 0),
        "udp_nonblock" => (libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_NONBLOCK, 0),
        "udp6" => (libc::AF_INET6, libc::SOCK_DGRAM, libc::IPPROTO_UDP),
        "seqpacket" => (libc::AF_INET, libc::SOCK_SEQPACKET, 0),
        "raw_udp" => (libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_UDP),
        "mptcp" => (libc::AF_INET, libc::SOCK_STREAM, 262),
        "mptcp6" => (libc::AF_INET6, libc::SOCK_STREAM, 262),
        "sctp" => (libc::AF_INET, libc::SOCK_STREAM, libc::IPPROTO_SCTP),
        "icmp" => (libc::AF_INET, libc::SOCK_DGRAM, libc::IPPROTO_ICMP),
        "alg" => (libc::AF_ALG, libc::SOCK_SEQPACKET, 0),
        "packet" => (libc::AF_PACKET, libc::SOCK_RAW, 0),
        "vsock" => (libc::AF_VSOCK, libc::SOCK_STREAM, 0),
        "netlink_route" => (libc::AF_NETLINK, libc::SOCK_RAW, 0),
        "netlink_diag" => (libc::AF_NETLINK, libc::SOCK_RAW, 4),
        _ => return Err(("args", io::Error::other("unknown socket kind"))),
    };
    raw_socket(d, t, p).map(|_| Map::new())
}

#[allow(unsafe_code)]
fn op_socketpair() -> Outcome {
    let mut fds = [0; 2];
    // SAFETY: fds is a two-int array the kernel fills.
    libc_call("socketpair", || unsafe {
        libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, fds.as_mut_ptr())
    })
}

fn op_memfd_exec() -> Outcome {
    let fd = cvt(
        raw_syscall(libc::SYS_memfd_create, [c"probe".as_ptr() as _, 0, 0, 0, 0]),
        "memfd_create",
    )?;
    let fd = fd as RawFd;
    let bytes = std::fs::read("/usr/bin/true").map_err(at("read /usr/bin/true"))?;
    #[allow(unsafe_code)]
    // SAFETY: fd was just returned by memfd_create and is owned by nobody else.
    let mut file = unsafe { File::from_raw_fd(fd) };
    file.write_all(&bytes).map_err(at("write"))?;
    let path = format!("/proc/self/fd/{fd}");
    let err = std::process::Command::new(path).exec();
    Err(("execve", err))
}

#[allow(unsafe_code)]
fn op_execveat_empty() -> Outcome {
    let exe = File::open("/proc/self/exe").map_err(at("open"))?;
    let argv0 = CString::new("probe").map_err(|e| ("args", io::Error::other(e)))?;
    let argv1 = CString::new("noop").map_err(|e| ("args", io::Error::other(e)))?;
    let argv = [argv0.as_ptr(), argv1.as_ptr(), std::ptr::null()];
    let envp = [std::ptr::null::<libc::c_char>()];
    // SAFETY: NUL-terminated argv/envp arrays of C strings that outlive the call.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_execveat,
            exe.as_raw_fd(),
            c"".as_ptr(),
            argv.as_ptr(),
            envp.as_ptr(),
            libc::AT_EMPTY_PATH,
        )
    };
    cvt(ret, "execveat").map(|_| Map::new())
}

fn op_clone3() -> Outcome {
    // struct clone_args v0 (64 bytes): flags, pidfd, child_tid, parent_tid, exit_signal, ...
    let mut args = [0u64; 8];
    args[4] = libc::SIGCHLD as u64;
    let ret = raw_syscall(libc::SYS_clone3, [args.as_mut_ptr() as _, 64, 0, 0, 0]);
    fork_like_child_exits(ret, "clone3")
}

/// A raw `clone` with `flags` (and `SIGCHLD`) whose child exits at once.
fn op_clone(flags: libc::c_int) -> Outcome {
    let flags = (flags | libc::SIGCHLD) as libc::c_long;
    let ret = raw_syscall(libc::SYS_clone, [flags, 0, 0, 0, 0]);
    fork_like_child_exits(ret, "clone")
}

fn op_thread() -> Outcome {
    std::thread::spawn(|| ())
        .join()
        .map_err(|_| ("thread", io::Error::other("the thread panicked")))?;
    ok()
}

fn op_abstract_connect(name: &str) -> Outcome {
    let fd = raw_socket(libc::AF_UNIX, libc::SOCK_STREAM, 0)?;
    raw_connect_unix(&fd, name.as_bytes(), true).map_err(at("connect"))?;
    ok()
}

fn op_unix_connect(path: &str) -> Outcome {
    let fd = raw_socket(libc::AF_UNIX, libc::SOCK_STREAM, 0)?;
    raw_connect_unix(&fd, path.as_bytes(), false).map_err(at("connect"))?;
    ok()
}

fn op_mptcp_connect(to: SocketAddr) -> Outcome {
    let fd = raw_socket(libc::AF_INET, libc::SOCK_STREAM, 262)?;
    raw_connect_inet(&fd, to).map_err(at("connect"))?;
    ok()
}

/// TCP Fast Open's implicit connect: `sendto(MSG_FASTOPEN)` (or `sendmsg`) on an unconnected
/// stream socket, which never calls `connect()`.
#[allow(unsafe_code)]
fn op_tfo_send(to: SocketAddr, via_sendmsg: bool) -> Outcome {
    let SocketAddr::V4(v4) = to else {
        return Err(("args", io::Error::other("IPv4 only")));
    };
    let fd = raw_socket(libc::AF_INET, libc::SOCK_STREAM, 0)?;
    let mut sa = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: v4.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*v4.ip()).to_be(),
        },
        sin_zero: [0; 8],
    };
    let len = size_of::<libc::sockaddr_in>() as libc::socklen_t;
    let mut data = *b"probe";
    let (ret, stage) = if via_sendmsg {
        let mut iov = libc::iovec {
            iov_base: data.as_mut_ptr().cast(),
            iov_len: data.len(),
        };
        // SAFETY: msghdr is plain old data; all-zero is a valid value.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_name = (&mut sa as *mut libc::sockaddr_in).cast();
        msg.msg_namelen = len;
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        // SAFETY: msg points at sa and iov, both live and initialised for the call.
        let ret = unsafe { libc::sendmsg(fd.as_raw_fd(), &msg, libc::MSG_FASTOPEN) };
        (ret, "sendmsg")
    } else {
        // SAFETY: data and sa are live, initialised buffers of the lengths passed.
        let ret = unsafe {
            libc::sendto(
                fd.as_raw_fd(),
                data.as_ptr().cast(),
                data.len(),
                libc::MSG_FASTOPEN,
                (&sa as *const libc::sockaddr_in).cast(),
                len,
            )
        };
        (ret, "sendto")
    };
    cvt(ret as libc::c_long, stage)?;
    ok()
}

/// `setsockopt(IPPROTO_TCP, option, 1)` on a fresh TCP socket.
#[allow(unsafe_code)]
fn op_tcp_setsockopt(option: i32) -> Outcome {
    let fd = raw_socket(libc::AF_INET, libc::SOCK_STREAM, 0)?;
    let one: libc::c_int = 1;
    // SAFETY: one is a live c_int of the length passed.
    let ret = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            option,
            (&one as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    cvt(ret as libc::c_long, "setsockopt")?;
    ok()
}

fn proc_status_fields() -> Map<String, Value> {
    let text = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let mut map = Map::new();
    for line in text.lines() {
        if let Some((k, v)) = line.split_once(':') {
            let wanted = [
                "Uid",
                "Gid",
                "Groups",
                "NoNewPrivs",
                "Seccomp",
                "Seccomp_filters",
                "CapInh",
                "CapPrm",
                "CapEff",
                "CapBnd",
                "CapAmb",
            ];
            if wanted.contains(&k) {
                map.insert(
                    k.into(),
                    json!(v.split_whitespace().collect::<Vec<_>>().join(" ")),
                );
            }
        }
    }
    map
}

fn op_status() -> Outcome {
    let mut out = Map::new();
    out.insert("proc".into(), Value::Object(proc_status_fields()));
    out.insert("pdeathsig".into(), json!(prctl_get(libc::PR_GET_PDEATHSIG)));
    out.insert(
        "no_new_privs".into(),
        json!(prctl_get(libc::PR_GET_NO_NEW_PRIVS)),
    );
    out.insert("dumpable".into(), json!(prctl_get(libc::PR_GET_DUMPABLE)));
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    let core = limits
        .lines()
        .find(|l| l.starts_with("Max core file size"))
        .map(|l| {
            l.split_whitespace()
                .skip(4)
                .take(2)
                .collect::<Vec<_>>()
                .join(" ")
        });
    out.insert("core_limit".into(), json!(core));
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the ")" of comm: state ppid pgrp session ...
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = after.split_whitespace().collect();
    out.insert("pid".into(), json!(std::process::id()));
    out.insert(
        "session".into(),
        json!(fields.get(3).and_then(|s| s.parse::<u32>().ok())),
    );
    let cwd = std::env::current_dir()
        .map(|p| p.display().to_string())
        .ok();
    out.insert("cwd".into(), json!(cwd));
    Ok(out)
}

fn run(op: &str, args: &[String]) -> Outcome {
    match op {
        "noop" => ok(),
        "write" => {
            let mut f = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o644)
                .open(arg(args, 0)?)
                .map_err(at("open"))?;
            f.write_all(b"probe\n").map_err(at("write"))?;
            ok()
        }
        "truncate" => {
            let f = OpenOptions::new()
                .write(true)
                .open(arg(args, 0)?)
                .map_err(at("open"));
            match f {
                Ok(f) => f.set_len(0).map_err(at("ftruncate")).map(|_| Map::new()),
                Err(e) => Err(e),
            }
        }
        "read" => {
            let mut buf = Vec::new();
            File::open(arg(args, 0)?)
                .map_err(at("open"))?
                .read_to_end(&mut buf)
                .map_err(at("read"))?;
            Ok(Map::from_iter([("bytes".into(), json!(buf.len()))]))
        }
        "readdir" => {
            let n = std::fs::read_dir(arg(args, 0)?)
                .map_err(at("opendir"))?
                .count();
            Ok(Map::from_iter([("entries".into(), json!(n))]))
        }
        "mkdir" => std::fs::create_dir(arg(args, 0)?)
            .map_err(at("mkdir"))
            .map(|_| Map::new()),
        "exec" => {
            let err = std::process::Command::new(arg(args, 0)?)
                .args(&args[1..])
                .exec();
            Err(("execve", err))
        }
        "connect" => TcpStream::connect(addr(args)?)
            .map_err(at("connect"))
            .map(|_| Map::new()),
        "bind" => TcpListener::bind(addr(args)?)
            .map_err(at("bind"))
            .map(|_| Map::new()),
        "udp_send" => {
            let sock = UdpSocket::bind("0.0.0.0:0").map_err(at("bind"))?;
            sock.send_to(b"probe", addr(args)?).map_err(at("sendto"))?;
            ok()
        }
        "socket" => op_socket(arg(args, 0)?),
        "socketpair_unix" => op_socketpair(),
        "mptcp_connect" => op_mptcp_connect(addr(args)?),
        "tfo_sendto" => op_tfo_send(addr(args)?, false),
        "tfo_sendmsg" => op_tfo_send(addr(args)?, true),
        "tcp_fastopen_connect" => op_tcp_setsockopt(libc::TCP_FASTOPEN_CONNECT),
        "tcp_fastopen" => op_tcp_setsockopt(libc::TCP_FASTOPEN),
        "unix_connect" => op_unix_connect(arg(args, 0)?),
        "abstract_connect" => op_abstract_connect(arg(args, 0)?),
        "io_uring_setup" => {
            let mut params = [0u8; 120];
            let fd = cvt(
                raw_syscall(
                    libc::SYS_io_uring_setup,
                    [1, params.as_mut_ptr() as _, 0, 0, 0],
                ),
                "io_uring_setup",
            )?;
            Ok(Map::from_iter([("fd".into(), json!(fd))]))
        }
        "memfd_create" => cvt(
            raw_syscall(libc::SYS_memfd_create, [c"probe".as_ptr() as _, 0, 0, 0, 0]),
            "memfd_create",
        )
        .map(|_| Map::new()),
        "memfd_exec" => op_memfd_exec(),
        "execveat_empty" => op_execveat_empty(),
        "ptrace_traceme" => cvt(
            raw_syscall(libc::SYS_ptrace, [libc::PTRACE_TRACEME as _, 0, 0, 0, 0]),
            "ptrace",
        )
        .map(|_| Map::new()),
        "process_vm_readv" => cvt(
            raw_syscall(
                libc::SYS_process_vm_readv,
                [std::process::id() as _, 0, 0, 0, 0],
            ),
            "process_vm_readv",
        )
        .map(|_| Map::new()),
        "bpf" => cvt(raw_syscall(libc::SYS_bpf, [0, 0, 0, 0, 0]), "bpf").map(|_| Map::new()),
        "userfaultfd" => cvt(
            raw_syscall(libc::SYS_userfaultfd, [libc::O_CLOEXEC as _, 0, 0, 0, 0]),
            "userfaultfd",
        )
        .map(|_| Map::new()),
        "perf_event_open" => {
            let mut attr = [0u8; 128];
            cvt(
                raw_syscall(
                    libc::SYS_perf_event_open,
                    [attr.as_mut_ptr() as _, 0, -1, -1, 0],
                ),
                "perf_event_open",
            )
            .map(|_| Map::new())
        }
        "unshare_user" => cvt(
            raw_syscall(libc::SYS_unshare, [libc::CLONE_NEWUSER as _, 0, 0, 0, 0]),
            "unshare",
        )
        .map(|_| Map::new()),
        "unshare_net" => cvt(
            raw_syscall(libc::SYS_unshare, [libc::CLONE_NEWNET as _, 0, 0, 0, 0]),
            "unshare",
        )
        .map(|_| Map::new()),
        "clone_newuser" => op_clone(libc::CLONE_NEWUSER),
        "clone_parent" => op_clone(libc::CLONE_PARENT),
        "fork" => op_clone(0),
        "clone_files" => op_clone(libc::CLONE_FILES),
        "thread" => op_thread(),
        "clone3" => op_clone3(),
        "setns" => {
            let ns = File::open("/proc/self/ns/net").map_err(at("open"))?;
            cvt(
                raw_syscall(
                    libc::SYS_setns,
                    [ns.as_raw_fd() as _, libc::CLONE_NEWNET as _, 0, 0, 0],
                ),
                "setns",
            )
            .map(|_| Map::new())
        }
        "mount" => cvt(
            raw_syscall(
                libc::SYS_mount,
                [
                    c"none".as_ptr() as _,
                    c"/tmp".as_ptr() as _,
                    c"tmpfs".as_ptr() as _,
                    0,
                    0,
                ],
            ),
            "mount",
        )
        .map(|_| Map::new()),
        "keyctl" => {
            cvt(raw_syscall(libc::SYS_keyctl, [0, -3, 0, 0, 0]), "keyctl").map(|_| Map::new())
        }
        "tiocsti" => {
            let byte = b'x';
            cvt(
                raw_syscall(
                    libc::SYS_ioctl,
                    [0, libc::TIOCSTI as _, &byte as *const u8 as _, 0, 0],
                ),
                "ioctl",
            )
            .map(|_| Map::new())
        }
        "seccomp_filter" => {
            let allow = vec![seccompiler::sock_filter {
                code: 0x06,
                jt: 0,
                jf: 0,
                k: 0x7fff_0000,
            }];
            seccompiler::apply_filter(&allow)
                .map_err(|e| ("seccomp", io::Error::other(e.to_string())))
                .map(|_| Map::new())
        }
        "kill" => {
            let pid: libc::c_long = arg(args, 0)?
                .parse()
                .map_err(|e| ("args", io::Error::other(format!("{e}"))))?;
            cvt(raw_syscall(libc::SYS_kill, [pid, 0, 0, 0, 0]), "kill").map(|_| Map::new())
        }
        "read_environ" => {
            let bytes =
                std::fs::read(format!("/proc/{}/environ", arg(args, 0)?)).map_err(at("open"))?;
            let text = String::from_utf8_lossy(&bytes).replace('\0', "\n");
            Ok(Map::from_iter([("environ".into(), json!(text))]))
        }
        "status" => op_status(),
        "env" => {
            let env: Map<String, Value> = std::env::vars_os()
                .map(|(k, v)| (k.to_string_lossy().into_owned(), json!(v.to_string_lossy())))
                .collect();
            Ok(Map::from_iter([("env".into(), Value::Object(env))]))
        }
        "fds" => {
            let open: Vec<RawFd> = (0..1024).filter(|fd| fd_open(*fd)).collect();
            Ok(Map::from_iter([("fds".into(), json!(open))]))
        }
        "sleep" => {
            let secs: u64 = arg(args, 0)?.parse().unwrap_or(30);
            std::thread::sleep(std::time::Duration::from_secs(secs));
            ok()
        }
        _ => Err(("args", io::Error::other(format!("unknown op {op}")))),
    }
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args_os()
        .skip(1)
        .map(|a| String::from_utf8_lossy(a.as_bytes()).into_owned())
        .collect();
    let Some((op, args)) = argv.split_first() else {
        eprintln!("usage: sluice-shim-probe OP [ARGS...]");
        return ExitCode::from(2);
    };
    let mut line = Map::new();
    line.insert("op".into(), json!(op));
    let code = match run(op, args) {
        Ok(extra) => {
            line.insert("errno".into(), Value::Null);
            line.extend(extra);
            0
        }
        Err((stage, err)) => {
            line.insert("stage".into(), json!(stage));
            line.insert("errno".into(), json!(err.raw_os_error().map(errno_name)));
            line.insert("error".into(), json!(err.to_string()));
            1
        }
    };
    println!("{}", Value::Object(line));
    ExitCode::from(code)
}
