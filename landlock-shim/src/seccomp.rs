//! seccomp-BPF: the three programs of spec §1.8, built purely, installed last.
//!
//! Owns the deny-list (AF_UNIX and other socket families, MPTCP/SCTP/ICMP protocols,
//! io_uring, memfd_create, fd-based exec, namespaces, `CLONE_PARENT`, a shared fd table outside a thread, ptrace, bpf, the mount family, keys,
//! modules, TIOCSTI, TCP Fast Open), the `clone3` → ENOSYS program and the x32 guard. Default-allow with
//! EPERM denials, as OpenShell and codex do: an allow-list breaks arbitrary agent toolchains.
//! Does not own what Landlock covers (paths, TCP ports, scopes).
//!
//! Filters compose as "least permissive wins", so ENOSYS from the clone3 program beats ALLOW
//! from the main one. None of them uses TSYNC: the shim is single-threaded.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch, sock_filter,
};

#[cfg(target_arch = "x86_64")]
const ARCH: TargetArch = TargetArch::x86_64;
#[cfg(target_arch = "aarch64")]
const ARCH: TargetArch = TargetArch::aarch64;
#[cfg(target_arch = "riscv64")]
const ARCH: TargetArch = TargetArch::riscv64;

/// x32 syscalls carry `AUDIT_ARCH_X86_64` with this bit set in the number.
const X32_SYSCALL_BIT: u32 = 0x4000_0000;
/// `TIOCSTI`: push bytes into a terminal's input queue.
const TIOCSTI: u64 = 0x5412;
/// `TIOCLINUX`: console ioctls, including selection paste.
const TIOCLINUX: u64 = 0x541C;
/// `CLONE_NEWTIME` (only meaningful to `unshare`; in `clone` that bit is the exit signal).
const CLONE_NEWTIME: u64 = 0x80;
/// `MSG_FASTOPEN`: `sendto`/`sendmsg` on an unconnected TCP socket connects implicitly, past
/// Landlock's connect hook.
const MSG_FASTOPEN: u64 = 0x2000_0000;
/// `TCP_FASTOPEN_CONNECT` and `TCP_FASTOPEN` (linux/tcp.h): the socket-option spellings of
/// TCP Fast Open (client and listener).
const TCP_FASTOPEN_OPTIONS: [u64; 2] = [30, 23];

// Classic BPF opcodes (linux/bpf_common.h).
/// `BPF_LD | BPF_W | BPF_ABS` (0x00 | 0x00 | 0x20).
const BPF_LD_W_ABS: u16 = 0x20;
/// `BPF_JMP | BPF_JSET | BPF_K` (0x05 | 0x40 | 0x00).
const BPF_JMP_JSET_K: u16 = 0x45;
/// `BPF_RET | BPF_K` (0x06 | 0x00).
const BPF_RET_K: u16 = 0x06;
const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
/// Offset of `nr` in `struct seccomp_data`.
const SECCOMP_DATA_NR: u32 = 0;

/// Why a program could not be built or installed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SeccompError {
    /// seccompiler refused a rule or the filter.
    #[error("building the {program} seccomp program: {source}")]
    Build {
        /// Which program.
        program: &'static str,
        /// seccompiler's error.
        source: seccompiler::BackendError,
    },
    /// The kernel refused the program.
    #[error("installing the {program} seccomp program: {source}")]
    Install {
        /// Which program.
        program: &'static str,
        /// seccompiler's error.
        source: seccompiler::Error,
    },
}

/// A compiled program and its name in the status line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Program {
    /// `x32_guard`, `clone3_enosys` or `main`.
    pub name: &'static str,
    /// The BPF.
    pub bpf: BpfProgram,
}

/// The programs in installation order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Programs(pub Vec<Program>);

impl Programs {
    /// Names, in installation order.
    pub fn names(&self) -> Vec<&'static str> {
        self.0.iter().map(|p| p.name).collect()
    }

    /// Total BPF instructions.
    pub fn instructions(&self) -> usize {
        self.0.iter().map(|p| p.bpf.len()).sum()
    }

    /// FNV-1a 64 over every instruction, so the status line names the exact filter.
    pub fn hash(&self) -> String {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for insn in self.0.iter().flat_map(|p| &p.bpf) {
            let mut bytes = Vec::with_capacity(8);
            bytes.extend_from_slice(&insn.code.to_le_bytes());
            bytes.push(insn.jt);
            bytes.push(insn.jf);
            bytes.extend_from_slice(&insn.k.to_le_bytes());
            for b in bytes {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x0000_0100_0000_01b3);
            }
        }
        format!("fnv1a64:{h:016x}")
    }
}

fn insn(code: u16, jt: u8, jf: u8, k: u32) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

/// `ld [nr]; jset #X32_BIT → ERRNO(ENOSYS); ret ALLOW`. seccompiler checks `AUDIT_ARCH` but
/// x32 calls share x86_64's, with bit 30 set (spec §1.8, pitfall 13).
pub fn x32_guard() -> BpfProgram {
    let enosys = SECCOMP_RET_ERRNO | (libc::ENOSYS as u32);
    vec![
        insn(BPF_LD_W_ABS, 0, 0, SECCOMP_DATA_NR),
        insn(BPF_JMP_JSET_K, 0, 1, X32_SYSCALL_BIT),
        insn(BPF_RET_K, 0, 0, enosys),
        insn(BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),
    ]
}

fn build(
    program: &'static str,
    rules: BTreeMap<i64, Vec<SeccompRule>>,
    errno: i32,
) -> Result<BpfProgram, SeccompError> {
    let err = |source| SeccompError::Build { program, source };
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(errno as u32),
        ARCH,
    )
    .map_err(err)?;
    BpfProgram::try_from(filter).map_err(err)
}

/// `clone3` → ENOSYS: BPF cannot read `struct clone_args`, and glibc falls back to `clone`
/// (whose flags the main filter can see) on ENOSYS only.
pub fn clone3_enosys() -> Result<BpfProgram, SeccompError> {
    let rules = BTreeMap::from([(libc::SYS_clone3, Vec::new())]);
    build("clone3_enosys", rules, libc::ENOSYS)
}

fn cond(arg: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompCondition, SeccompError> {
    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value).map_err(|source| {
        SeccompError::Build {
            program: "main",
            source,
        }
    })
}

fn rule(conditions: Vec<SeccompCondition>) -> Result<SeccompRule, SeccompError> {
    SeccompRule::new(conditions).map_err(|source| SeccompError::Build {
        program: "main",
        source,
    })
}

fn bits_set(arg: u8, bit: u64) -> Result<SeccompRule, SeccompError> {
    rule(vec![cond(arg, SeccompCmpOp::MaskedEq(bit), bit)?])
}

/// Syscalls denied whatever their arguments.
const ALWAYS_DENIED: &[i64] = &[
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_memfd_create,
    libc::SYS_setns,
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_pidfd_getfd,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_userfaultfd,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_mount_setattr,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
];

/// Namespace flags refused in `clone` and `unshare` (one rule each: a deny-list cannot say
/// "any bit of a mask" in one condition).
const NAMESPACE_FLAGS: &[i32] = &[
    libc::CLONE_NEWUSER,
    libc::CLONE_NEWNS,
    libc::CLONE_NEWNET,
    libc::CLONE_NEWPID,
    libc::CLONE_NEWIPC,
    libc::CLONE_NEWUTS,
    libc::CLONE_NEWCGROUP,
];

/// `SOCK_TYPE_MASK`: the socket type is the low four bits of `socket()`'s second argument
/// (the rest are `SOCK_NONBLOCK`/`SOCK_CLOEXEC`).
const SOCK_TYPE_MASK: u64 = 0xf;

/// INET socket types the sandbox may create: stream always; datagram (UDP) only when
/// `datagram` is true, i.e. inside a network namespace fenced by the supervisor.
fn inet_types(datagram: bool) -> Vec<u64> {
    let mut types = vec![libc::SOCK_STREAM as u64];
    if datagram {
        types.push(libc::SOCK_DGRAM as u64);
    }
    types
}

fn socket_rules(datagram: bool) -> Result<Vec<SeccompRule>, SeccompError> {
    use SeccompCmpOp::{Eq, MaskedEq, Ne};
    let (inet, inet6, netlink) = (
        libc::AF_INET as u64,
        libc::AF_INET6 as u64,
        libc::AF_NETLINK as u64,
    );
    let (tcp, udp) = (libc::IPPROTO_TCP as u64, libc::IPPROTO_UDP as u64);
    let mut rules = vec![
        // Any family but INET, INET6 and NETLINK: AF_UNIX (pathname sockets are outside
        // Landlock before ABI 9), AF_PACKET, AF_VSOCK, AF_ALG, AF_XDP, AF_SMC...
        rule(vec![
            cond(0, Ne, inet)?,
            cond(0, Ne, inet6)?,
            cond(0, Ne, netlink)?,
        ])?,
        // NETLINK_ROUTE (0) only: getifaddrs() needs it; SOCK_DIAG, AUDIT... are refused.
        rule(vec![cond(0, Eq, netlink)?, cond(2, Ne, 0)?])?,
    ];
    // INET protocols other than the default, TCP and UDP: MPTCP and SCTP bypass Landlock's
    // TCP rules; ICMP ping sockets, IPPROTO_SMC...
    for family in [inet, inet6] {
        rules.push(rule(vec![
            cond(0, Eq, family)?,
            cond(2, Ne, 0)?,
            cond(2, Ne, tcp)?,
            cond(2, Ne, udp)?,
        ])?);
        // Socket types other than stream (and datagram inside a fence): SOCK_SEQPACKET with
        // protocol 0 is SCTP, SOCK_RAW and SOCK_PACKET bypass ports altogether, and UDP in
        // the host network namespace reaches any address (Landlock before ABI 10 does not
        // cover UDP). One rule per type value: a deny-list cannot say "masked != X".
        let allowed = inet_types(datagram);
        for ty in (0..=SOCK_TYPE_MASK).filter(|t| !allowed.contains(t)) {
            rules.push(rule(vec![
                cond(0, Eq, family)?,
                cond(1, MaskedEq(SOCK_TYPE_MASK), ty)?,
            ])?);
        }
    }
    Ok(rules)
}

/// The main deny-list (spec §1.8 table). EPERM for every denial. `datagram` allows UDP
/// sockets (only inside a fenced network namespace).
pub fn main_filter(datagram: bool) -> Result<BpfProgram, SeccompError> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for nr in ALWAYS_DENIED {
        rules.insert(*nr, Vec::new());
    }
    rules.insert(libc::SYS_socket, socket_rules(datagram)?);
    rules.insert(
        libc::SYS_ioctl,
        vec![
            rule(vec![cond(1, SeccompCmpOp::Eq, TIOCSTI)?])?,
            rule(vec![cond(1, SeccompCmpOp::Eq, TIOCLINUX)?])?,
        ],
    );
    // fd-based exec; the /proc/self/fd/N path is closed by the memfd_create ban.
    rules.insert(
        libc::SYS_execveat,
        vec![bits_set(4, libc::AT_EMPTY_PATH as u64)?],
    );
    let mut clone = Vec::new();
    let mut unshare = Vec::new();
    for flag in NAMESPACE_FLAGS {
        let bit = *flag as u64;
        clone.push(bits_set(0, bit)?);
        unshare.push(bits_set(0, bit)?);
    }
    unshare.push(bits_set(0, CLONE_NEWTIME)?);
    // A child made a sibling of its maker (`CLONE_PARENT`): a process that could hand its
    // sockets to a program outside its own descendants without that program running to
    // receive them, where sluice's per-request re-check of the caller does not look.
    clone.push(bits_set(0, libc::CLONE_PARENT as u64)?);
    // A process that shares its maker's fd table without being one of its threads
    // (`CLONE_FILES` without `CLONE_THREAD`): it can put a descriptor into that table while
    // every thread of the maker sleeps, which sluice's re-check of an ancestor that has not
    // run since its table was read takes to be impossible.
    let shared_table = (libc::CLONE_FILES | libc::CLONE_THREAD) as u64;
    clone.push(rule(vec![cond(
        0,
        SeccompCmpOp::MaskedEq(shared_table),
        libc::CLONE_FILES as u64,
    )?])?);
    rules.insert(libc::SYS_clone, clone);
    rules.insert(libc::SYS_unshare, unshare);
    insert_fast_open_rules(&mut rules)?;
    build("main", rules, libc::EPERM)
}

/// TCP Fast Open: `sendto`/`sendmsg`/`sendmmsg` with `MSG_FASTOPEN` connect without going
/// through `connect()`, so Landlock's TCP port rules never see the destination; the
/// `TCP_FASTOPEN*` options are the same door spelled as a socket option.
fn insert_fast_open_rules(rules: &mut BTreeMap<i64, Vec<SeccompRule>>) -> Result<(), SeccompError> {
    // (syscall, index of its flags argument)
    for (nr, flags) in [
        (libc::SYS_sendto, 3),
        (libc::SYS_sendmsg, 2),
        (libc::SYS_sendmmsg, 3),
    ] {
        rules.insert(nr, vec![bits_set(flags, MSG_FASTOPEN)?]);
    }
    let tcp = libc::IPPROTO_TCP as u64;
    let mut setsockopt = Vec::new();
    for option in TCP_FASTOPEN_OPTIONS {
        setsockopt.push(rule(vec![
            cond(1, SeccompCmpOp::Eq, tcp)?,
            cond(2, SeccompCmpOp::Eq, option)?,
        ])?);
    }
    rules.insert(libc::SYS_setsockopt, setsockopt);
    Ok(())
}

/// What to compile.
#[derive(Clone, Copy, Debug, Default)]
pub struct Request {
    /// Test builds: install nothing.
    pub disabled: bool,
    /// Allow `SOCK_DGRAM` INET sockets (UDP). Only inside a fenced network namespace or on
    /// explicit request: in the host namespace UDP reaches any address.
    pub datagram: bool,
}

/// Compiles the programs (spec §1.4 step 6), so errors surface before any state changes.
pub fn compile(request: Request) -> Result<Programs, SeccompError> {
    if request.disabled {
        return Ok(Programs::default());
    }
    let mut programs = Vec::new();
    if cfg!(target_arch = "x86_64") {
        programs.push(Program {
            name: "x32_guard",
            bpf: x32_guard(),
        });
    }
    programs.push(Program {
        name: "clone3_enosys",
        bpf: clone3_enosys()?,
    });
    programs.push(Program {
        name: "main",
        bpf: main_filter(request.datagram)?,
    });
    Ok(Programs(programs))
}

/// Installs the programs in order on this thread (spec §1.4 step 15). Last step before the
/// status line and exec, so it never blocks a syscall the shim itself needs.
pub fn install(programs: &Programs) -> Result<(), SeccompError> {
    for program in &programs.0 {
        seccompiler::apply_filter(&program.bpf).map_err(|source| SeccompError::Install {
            program: program.name,
            source,
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn x32_guard_is_four_instructions_returning_enosys() {
        let guard = x32_guard();
        assert_eq!(guard.len(), 4);
        assert_eq!(guard[1].k, X32_SYSCALL_BIT);
        assert_eq!(guard[2].k, SECCOMP_RET_ERRNO | libc::ENOSYS as u32);
        assert_eq!(guard[3].k, SECCOMP_RET_ALLOW);
    }

    #[test]
    fn programs_compile_in_order() {
        let programs = compile(Request::default()).unwrap();
        let expected: &[&str] = if cfg!(target_arch = "x86_64") {
            &["x32_guard", "clone3_enosys", "main"]
        } else {
            &["clone3_enosys", "main"]
        };
        assert_eq!(programs.names(), expected);
        assert!(programs.instructions() < 4096);
        assert!(programs.hash().starts_with("fnv1a64:"));
        assert_eq!(programs.hash(), compile(Request::default()).unwrap().hash());
    }

    #[test]
    fn disabled_request_installs_nothing() {
        let programs = compile(Request {
            disabled: true,
            datagram: false,
        })
        .unwrap();
        assert!(programs.0.is_empty());
    }

    #[test]
    fn the_datagram_choice_changes_the_main_program() {
        let deny = main_filter(false).unwrap();
        let allow = main_filter(true).unwrap();
        assert_ne!(deny, allow);
        assert!(deny.len() > allow.len());
    }

    #[test]
    fn clone3_program_returns_enosys() {
        let bpf = clone3_enosys().unwrap();
        let enosys = SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
        assert!(bpf.iter().any(|i| i.code == BPF_RET_K && i.k == enosys));
        assert!(
            !bpf.iter()
                .any(|i| i.k == SECCOMP_RET_ERRNO | libc::EPERM as u32)
        );
    }
}
