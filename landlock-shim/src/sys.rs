//! Raw system calls the shim needs, each behind a small safe wrapper.
//!
//! Owns every `unsafe` block of the library: one function per kernel call, with a `// SAFETY:`
//! note on why the call is sound. Does not own *when* a call happens (that is `launch`) nor any
//! policy decision (the calling modules decide; these wrappers only report what the kernel
//! said). Everything here is Linux-only.

use std::fs::OpenOptions;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;

/// `landlock_create_ruleset` flag: return the highest supported ABI version.
const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1 << 0;

/// `_LINUX_CAPABILITY_VERSION_3`: 64-bit capability sets in two 32-bit words.
const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn cvt_long(ret: libc::c_long) -> io::Result<libc::c_long> {
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

// === Landlock ===

/// The Landlock ABI version of the running kernel, or the errno that says why there is none
/// (ENOSYS: not built in; EOPNOTSUPP: disabled at boot; EPERM: blocked by a seccomp profile).
#[allow(unsafe_code)]
pub fn landlock_abi_version() -> io::Result<i32> {
    // SAFETY: a NULL attribute pointer with size 0 and the VERSION flag is the documented ABI
    // query; the kernel reads no user memory.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    cvt_long(ret).map(|v| i32::try_from(v).unwrap_or(i32::MAX))
}

// === File descriptors ===

/// Whether `fd` is an open descriptor of this process.
#[allow(unsafe_code)]
pub fn fd_is_open(fd: RawFd) -> bool {
    // SAFETY: F_GETFD only reads the descriptor flags; an invalid fd yields EBADF.
    unsafe { libc::fcntl(fd, libc::F_GETFD) != -1 }
}

/// Sets or clears `FD_CLOEXEC` on `fd`.
#[allow(unsafe_code)]
pub fn set_cloexec(fd: RawFd, on: bool) -> io::Result<()> {
    // SAFETY: F_GETFD/F_SETFD take and return plain integers.
    let flags = cvt(unsafe { libc::fcntl(fd, libc::F_GETFD) })?;
    let flags = if on {
        flags | libc::FD_CLOEXEC
    } else {
        flags & !libc::FD_CLOEXEC
    };
    // SAFETY: as above.
    cvt(unsafe { libc::fcntl(fd, libc::F_SETFD, flags) }).map(drop)
}

/// Takes ownership of an inherited descriptor (the `--status-fd`), marking it close-on-exec so
/// that a successful exec closes it and the reader sees EOF.
#[allow(unsafe_code)]
pub fn adopt_fd(fd: RawFd) -> io::Result<OwnedFd> {
    if fd < 3 || !fd_is_open(fd) {
        return Err(io::Error::from_raw_os_error(libc::EBADF));
    }
    set_cloexec(fd, true)?;
    // SAFETY: the descriptor is open (checked above), was inherited rather than created by any
    // Rust object in this process, and is adopted exactly once (the CLI owns the number).
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `close_range(first, last, 0)`.
#[allow(unsafe_code)]
pub fn close_range(first: u32, last: u32) -> io::Result<()> {
    if first > last {
        return Ok(());
    }
    // SAFETY: closing descriptors cannot violate memory safety; no Rust object in this
    // single-threaded process owns a descriptor ≥ 3 at this point except the one the caller
    // keeps out of the range.
    let ret = unsafe { libc::syscall(libc::SYS_close_range, first, last, 0u32) };
    cvt_long(ret).map(drop)
}

/// Makes sure `fd` (0, 1 or 2) is open, pointing it at `/dev/null` if it is not.
pub fn ensure_open_std_fd(fd: RawFd) -> io::Result<()> {
    if fd_is_open(fd) {
        return Ok(());
    }
    // All lower descriptors are open (the caller goes 0, 1, 2), so open() returns `fd`.
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")?;
    let got = file.into_raw_fd();
    if got != fd {
        return Err(io::Error::other(format!(
            "opened /dev/null as fd {got} while filling fd {fd}"
        )));
    }
    // std opens with O_CLOEXEC; a standard stream must survive exec.
    set_cloexec(got, false)
}

// === Session ===

/// `setsid()`: a new session without a controlling terminal.
#[allow(unsafe_code)]
pub fn setsid() -> io::Result<()> {
    // SAFETY: no arguments, no memory.
    cvt(unsafe { libc::setsid() }).map(drop)
}

/// Gives up the controlling terminal with `TIOCNOTTY` (for a process-group leader, which
/// cannot `setsid`). Returns false when there was no controlling terminal.
#[allow(unsafe_code)]
pub fn detach_controlling_tty() -> io::Result<bool> {
    let tty = match OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOCTTY)
        .open("/dev/tty")
    {
        Ok(tty) => tty,
        Err(e) if e.raw_os_error() == Some(libc::ENXIO) => return Ok(false),
        Err(e) => return Err(e),
    };
    // SAFETY: TIOCNOTTY takes no argument; the fd is open for the duration of the call.
    cvt(unsafe { libc::ioctl(tty.as_raw_fd(), libc::TIOCNOTTY) })?;
    Ok(true)
}

// === prctl ===

#[allow(unsafe_code)]
fn prctl(option: libc::c_int, arg2: libc::c_ulong) -> io::Result<libc::c_int> {
    let zero: libc::c_ulong = 0;
    // SAFETY: every option used here takes integer arguments only (no pointers).
    cvt(unsafe { libc::prctl(option, arg2, zero, zero, zero) })
}

/// `PR_CAPBSET_DROP`.
pub fn capbset_drop(cap: u32) -> io::Result<()> {
    prctl(libc::PR_CAPBSET_DROP, cap.into()).map(drop)
}

/// `PR_CAPBSET_READ`: whether `cap` is still in the bounding set.
pub fn capbset_read(cap: u32) -> io::Result<bool> {
    prctl(libc::PR_CAPBSET_READ, cap.into()).map(|v| v == 1)
}

/// `PR_CAP_AMBIENT_CLEAR_ALL`.
#[allow(unsafe_code)]
pub fn ambient_clear_all() -> io::Result<()> {
    let zero: libc::c_ulong = 0;
    // SAFETY: integer arguments only.
    cvt(unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            zero,
            zero,
            zero,
        )
    })
    .map(drop)
}

/// `PR_SET_PDEATHSIG`.
pub fn set_parent_death_signal(signal: libc::c_int) -> io::Result<()> {
    let signal = libc::c_ulong::try_from(signal).map_err(|_| io::Error::other("bad signal"))?;
    prctl(libc::PR_SET_PDEATHSIG, signal).map(drop)
}

/// `PR_GET_PDEATHSIG`.
#[allow(unsafe_code)]
pub fn parent_death_signal() -> io::Result<libc::c_int> {
    let mut signal: libc::c_int = 0;
    let zero: libc::c_ulong = 0;
    // SAFETY: the kernel writes one int through the pointer, which points at a live local.
    cvt(unsafe {
        libc::prctl(
            libc::PR_GET_PDEATHSIG,
            &mut signal as *mut libc::c_int,
            zero,
            zero,
            zero,
        )
    })?;
    Ok(signal)
}

/// `PR_SET_NO_NEW_PRIVS`.
pub fn set_no_new_privs() -> io::Result<()> {
    prctl(libc::PR_SET_NO_NEW_PRIVS, 1).map(drop)
}

/// `PR_GET_NO_NEW_PRIVS`.
pub fn no_new_privs() -> io::Result<bool> {
    prctl(libc::PR_GET_NO_NEW_PRIVS, 0).map(|v| v == 1)
}

// === Capabilities ===

/// The three capability sets of this thread, as 64-bit masks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CapSets {
    pub effective: u64,
    pub permitted: u64,
    pub inheritable: u64,
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// `capget` for the calling thread.
#[allow(unsafe_code)]
pub fn capget() -> io::Result<CapSets> {
    let mut header = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    // SAFETY: header and a two-element data array are the layout version 3 requires; both
    // live across the call.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_capget,
            &mut header as *mut CapHeader,
            data.as_mut_ptr(),
        )
    };
    cvt_long(ret)?;
    let join = |lo: u32, hi: u32| u64::from(lo) | (u64::from(hi) << 32);
    Ok(CapSets {
        effective: join(data[0].effective, data[1].effective),
        permitted: join(data[0].permitted, data[1].permitted),
        inheritable: join(data[0].inheritable, data[1].inheritable),
    })
}

/// `capset` for the calling thread.
#[allow(unsafe_code)]
pub fn capset(sets: CapSets) -> io::Result<()> {
    let mut header = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let split = |v: u64| ((v & 0xffff_ffff) as u32, (v >> 32) as u32);
    let (e0, e1) = split(sets.effective);
    let (p0, p1) = split(sets.permitted);
    let (i0, i1) = split(sets.inheritable);
    let data = [
        CapData {
            effective: e0,
            permitted: p0,
            inheritable: i0,
        },
        CapData {
            effective: e1,
            permitted: p1,
            inheritable: i1,
        },
    ];
    // SAFETY: as for capget; the kernel only reads `data`.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_capset,
            &mut header as *mut CapHeader,
            data.as_ptr(),
        )
    };
    cvt_long(ret).map(drop)
}

// === Credentials ===

/// `geteuid()`.
#[allow(unsafe_code)]
pub fn geteuid() -> u32 {
    // SAFETY: always succeeds, no memory.
    unsafe { libc::geteuid() }
}

/// `setgroups(0, NULL)`.
#[allow(unsafe_code)]
pub fn clear_groups() -> io::Result<()> {
    // SAFETY: a zero-length list with a NULL pointer is valid; the kernel reads nothing.
    cvt(unsafe { libc::setgroups(0, std::ptr::null()) }).map(drop)
}

/// `setresgid(g, g, g)` (glibc applies it to every thread; there is only one).
#[allow(unsafe_code)]
pub fn setresgid(gid: u32) -> io::Result<()> {
    // SAFETY: integer arguments only.
    cvt(unsafe { libc::setresgid(gid, gid, gid) }).map(drop)
}

/// `setresuid(u, u, u)`.
#[allow(unsafe_code)]
pub fn setresuid(uid: u32) -> io::Result<()> {
    // SAFETY: integer arguments only.
    cvt(unsafe { libc::setresuid(uid, uid, uid) }).map(drop)
}

/// `setuid(uid)`, used only to prove that regaining root fails.
#[allow(unsafe_code)]
pub fn setuid(uid: u32) -> io::Result<()> {
    // SAFETY: integer argument only.
    cvt(unsafe { libc::setuid(uid) }).map(drop)
}

/// `getresuid()` as (real, effective, saved).
#[allow(unsafe_code)]
pub fn getresuid() -> io::Result<(u32, u32, u32)> {
    let (mut r, mut e, mut s) = (0, 0, 0);
    // SAFETY: three pointers to live locals.
    cvt(unsafe { libc::getresuid(&mut r, &mut e, &mut s) })?;
    Ok((r, e, s))
}

/// `getresgid()` as (real, effective, saved).
#[allow(unsafe_code)]
pub fn getresgid() -> io::Result<(u32, u32, u32)> {
    let (mut r, mut e, mut s) = (0, 0, 0);
    // SAFETY: three pointers to live locals.
    cvt(unsafe { libc::getresgid(&mut r, &mut e, &mut s) })?;
    Ok((r, e, s))
}

/// `getgroups()`.
#[allow(unsafe_code)]
pub fn getgroups() -> io::Result<Vec<u32>> {
    // SAFETY: size 0 with NULL asks for the count only.
    let n = cvt(unsafe { libc::getgroups(0, std::ptr::null_mut()) })?;
    let mut groups = vec![0; usize::try_from(n).unwrap_or(0)];
    // SAFETY: the buffer holds exactly `n` gids.
    let got = cvt(unsafe { libc::getgroups(n, groups.as_mut_ptr()) })?;
    groups.truncate(usize::try_from(got).unwrap_or(0));
    Ok(groups)
}

// === Resource limits ===

/// Sets `RLIMIT_CORE` to 0 (soft and hard); survives exec, unlike `PR_SET_DUMPABLE`.
#[allow(unsafe_code)]
pub fn disable_core_dumps() -> io::Result<()> {
    let limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: pointer to a live, initialised rlimit.
    cvt(unsafe { libc::setrlimit(libc::RLIMIT_CORE, &limit) }).map(drop)
}

/// The hard `RLIMIT_CORE`.
#[allow(unsafe_code)]
pub fn core_limit() -> io::Result<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: pointer to a live rlimit the kernel fills in.
    cvt(unsafe { libc::getrlimit(libc::RLIMIT_CORE, &mut limit) })?;
    Ok(limit.rlim_max)
}

// === Namespaces ===

/// `setns(fd, CLONE_NEWNET)`.
#[allow(unsafe_code)]
pub fn enter_net_namespace(fd: &OwnedFd) -> io::Result<()> {
    // SAFETY: the fd is open for the duration of the call; integer flag.
    cvt(unsafe { libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNET) }).map(drop)
}
