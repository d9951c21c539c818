//! Command line → [`Policy`]: parse, don't validate (spec §1.4 step 0).
//!
//! Owns the flag names (the CLI contract of `DESIGN.md`), their syntax, and the invariants a
//! [`Policy`] guarantees once built: absolute normalized paths, a non-empty filesystem
//! allow-list, non-root ids, a proxy socket address, a compat mode, a command. Does not touch
//! the system: nothing here opens a path or makes a syscall.

use std::ffi::{OsStr, OsString};
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::path::{Component, Path, PathBuf};

/// The user and group a dropped sandbox runs as when `--uid`/`--gid` are not given.
pub const DEFAULT_ID: u32 = 65534;

/// Usage text for `--help` and usage errors.
pub const USAGE: &str = "\
usage: sluice-shim --proxy ADDR [--ca-bundle FILE] [--ca-cert FILE]
                   [--ro PATH]... [--rw PATH]... [--exec PATH]...
                   [--uid N] [--gid N] [--compat strict|best-effort]
                   [--status-fd N] [--env KEY=VALUE]... [--workdir PATH]
                   [--allow-host-netns] [--netns-path PATH] [--min-abi N]
                   [--audit-denials] [--transparent-port N]... [--no-interp-grant]
                   [--allow-unconfined] [--allow-udp]
                   -- CMD ARGS...

Confines itself (Landlock, seccomp, no_new_privs, privilege drop) and execs CMD.
UDP sockets (and every INET socket type but stream) are refused unless the supervisor's
fenced network namespace is given with --netns-path, or --allow-udp is.
Exit codes: 125 setup or policy failure, 126 CMD cannot be executed, 127 CMD not found;
otherwise CMD's own status.
";

/// What the command line asks for.
#[derive(Debug)]
pub enum Parsed {
    /// Confine and run a command.
    Run(Box<Policy>),
    /// Print [`USAGE`].
    Help,
    /// Print the version.
    Version,
}

/// An absolute path without `.` or `..` components, `//` runs, or a trailing slash.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AbsPath(PathBuf);

impl AbsPath {
    /// Parses a path given on the command line.
    pub fn parse(raw: &OsStr) -> Result<Self, PathError> {
        let path = Path::new(raw);
        if !path.is_absolute() {
            return Err(PathError::Relative);
        }
        let mut normalized = PathBuf::new();
        for component in path.components() {
            match component {
                Component::RootDir => normalized.push("/"),
                Component::Normal(part) => normalized.push(part),
                Component::CurDir => {}
                Component::ParentDir => return Err(PathError::ParentComponent),
                Component::Prefix(_) => return Err(PathError::Relative),
            }
        }
        Ok(Self(normalized))
    }

    /// The path.
    pub fn as_path(&self) -> &Path {
        &self.0
    }

    /// Whether `self` is `root` or lies beneath it (lexically).
    pub fn is_within(&self, root: &AbsPath) -> bool {
        self.0.starts_with(&root.0)
    }
}

impl AsRef<Path> for AbsPath {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

/// Why a path argument was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PathError {
    /// Not absolute.
    #[error("must be absolute")]
    Relative,
    /// Contains `..`, which the shim refuses rather than resolves.
    #[error("must not contain `..`")]
    ParentComponent,
}

/// `--compat`: what to do when a requested protection is unavailable (spec §1.12).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Compat {
    /// Refuse to run (exit 125) naming the missing feature.
    #[default]
    Strict,
    /// Run with what the kernel offers and report every degradation.
    BestEffort,
}

impl Compat {
    /// The flag value.
    pub fn as_str(self) -> &'static str {
        match self {
            Compat::Strict => "strict",
            Compat::BestEffort => "best-effort",
        }
    }
}

/// Confinement layers a test build can switch off to prove the others are load-bearing.
///
/// Only settable with the `test-hooks` feature (`--test-disable-layer`); in a release build
/// every field stays false.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DisabledLayers {
    /// Landlock filesystem rights are not handled.
    pub landlock_fs: bool,
    /// Landlock TCP rights are not handled.
    pub landlock_net: bool,
    /// Landlock scopes (signals, abstract UNIX sockets) are not requested.
    pub landlock_scope: bool,
    /// No seccomp program is installed.
    pub seccomp: bool,
}

impl DisabledLayers {
    /// Names of the disabled layers, for the status line.
    pub fn names(&self) -> Vec<&'static str> {
        let mut names = Vec::new();
        for (on, name) in [
            (self.landlock_fs, "landlock-fs"),
            (self.landlock_net, "landlock-net"),
            (self.landlock_scope, "scope"),
            (self.seccomp, "seccomp"),
        ] {
            if on {
                names.push(name);
            }
        }
        names
    }
}

/// Filesystem grants (spec §1.5).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FsGrants {
    /// Read files and list directories.
    pub ro: Vec<AbsPath>,
    /// Read, write, create, remove, rename, truncate, device ioctls; no execute.
    pub rw: Vec<AbsPath>,
    /// Execute, read files and list directories.
    pub exec: Vec<AbsPath>,
}

/// The command to exec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandLine {
    /// `argv[0]` as given (a name looked up in the child's PATH, or a path).
    pub program: OsString,
    /// The remaining arguments.
    pub args: Vec<OsString>,
}

/// A validated request: everything the launch sequence needs, nothing it must re-check.
#[derive(Clone, Debug)]
pub struct Policy {
    /// The proxy; its port is the only TCP connect destination Landlock allows.
    pub proxy: SocketAddr,
    /// Extra TCP connect ports for transparent interception (spec §1.6).
    pub transparent_ports: Vec<u16>,
    /// Combined CA bundle (system roots + proxy CA) for the replacing CA variables.
    pub ca_bundle: Option<AbsPath>,
    /// The proxy CA alone, for `NODE_EXTRA_CA_CERTS`.
    pub ca_cert: Option<AbsPath>,
    /// Filesystem grants.
    pub fs: FsGrants,
    /// Grant execute on the command's ELF interpreter when it lies under a granted root.
    pub interp_grant: bool,
    /// Target user id (never 0).
    pub uid: u32,
    /// Target group id (never 0).
    pub gid: u32,
    /// Strict or best-effort.
    pub compat: Compat,
    /// Refuse kernels below this Landlock ABI, in either compat mode.
    pub min_abi: Option<u8>,
    /// Descriptor that receives the JSON status line.
    pub status_fd: Option<RawFd>,
    /// `KEY=VALUE` entries that override the built environment.
    pub env: Vec<(OsString, OsString)>,
    /// Directory to run the command in.
    pub workdir: Option<AbsPath>,
    /// Run in the host network namespace even in strict mode.
    pub allow_host_netns: bool,
    /// Network namespace to enter (while still root) before anything else is prepared.
    pub netns_path: Option<AbsPath>,
    /// Ask Landlock to log denials after exec (ABI 7).
    pub audit_denials: bool,
    /// Best-effort only: run even if Landlock is entirely unavailable.
    pub allow_unconfined: bool,
    /// Allow UDP sockets in the host network namespace (where they reach any address).
    pub allow_udp: bool,
    /// Test builds only: layers switched off.
    pub disabled: DisabledLayers,
    /// Test builds only: pretend the kernel's Landlock ABI is at most this.
    pub test_max_abi: Option<u8>,
    /// What to run.
    pub command: CommandLine,
}

impl Policy {
    /// TCP ports Landlock lets the child connect to: the proxy port first.
    pub fn connect_ports(&self) -> Vec<u16> {
        let mut ports = vec![self.proxy.port()];
        for port in &self.transparent_ports {
            if !ports.contains(port) {
                ports.push(*port);
            }
        }
        ports
    }
}

/// Why the command line was refused. Every variant exits 125.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CliError {
    /// lexopt could not split the arguments.
    #[error("{0}")]
    Syntax(#[from] lexopt::Error),
    /// A flag value did not parse.
    #[error("{flag} {value:?}: {reason}")]
    InvalidValue {
        /// The flag.
        flag: &'static str,
        /// What was given.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A required flag is absent.
    #[error("missing required {0}")]
    Missing(&'static str),
    /// A flag that may appear once appeared twice.
    #[error("{0} given more than once")]
    Repeated(&'static str),
    /// No `--ro`, `--rw` or `--exec` at all: the shim refuses a deny-everything ruleset.
    #[error("empty filesystem allow-list: give at least one --ro, --rw or --exec path")]
    EmptyAllowList,
    /// No `--exec` path: nothing could be executed, not even the command.
    #[error("no --exec path: the command itself needs one")]
    NoExecPath,
    /// No command after the flags.
    #[error("missing command (put it after `--`)")]
    MissingCommand,
    /// `--allow-unconfined` only makes sense in best-effort mode.
    #[error("--allow-unconfined requires --compat best-effort")]
    UnconfinedInStrict,
}

fn invalid(flag: &'static str, value: &OsStr, reason: impl ToString) -> CliError {
    CliError::InvalidValue {
        flag,
        value: value.to_string_lossy().into_owned(),
        reason: reason.to_string(),
    }
}

fn utf8<'a>(flag: &'static str, value: &'a OsStr) -> Result<&'a str, CliError> {
    value
        .to_str()
        .ok_or_else(|| invalid(flag, value, "not valid UTF-8"))
}

fn path(flag: &'static str, value: &OsStr) -> Result<AbsPath, CliError> {
    AbsPath::parse(value).map_err(|e| invalid(flag, value, e))
}

fn id(flag: &'static str, value: &OsStr) -> Result<u32, CliError> {
    let n: u32 = utf8(flag, value)?
        .parse()
        .map_err(|e| invalid(flag, value, e))?;
    if n == 0 {
        return Err(invalid(flag, value, "the sandbox never runs as root"));
    }
    Ok(n)
}

fn port(flag: &'static str, value: &OsStr) -> Result<u16, CliError> {
    let n: u16 = utf8(flag, value)?
        .parse()
        .map_err(|e| invalid(flag, value, e))?;
    if n == 0 {
        return Err(invalid(flag, value, "port 0"));
    }
    Ok(n)
}

fn env_entry(value: &OsStr) -> Result<(OsString, OsString), CliError> {
    let text = utf8("--env", value)?;
    let (key, val) = text
        .split_once('=')
        .ok_or_else(|| invalid("--env", value, "expected KEY=VALUE"))?;
    if key.is_empty() || key.contains('\0') || val.contains('\0') {
        return Err(invalid("--env", value, "empty key or NUL byte"));
    }
    Ok((key.into(), val.into()))
}

fn once<T>(slot: &mut Option<T>, flag: &'static str, value: T) -> Result<(), CliError> {
    if slot.replace(value).is_some() {
        return Err(CliError::Repeated(flag));
    }
    Ok(())
}

#[cfg(feature = "test-hooks")]
fn disable_layer(layers: &mut DisabledLayers, value: &OsStr) -> Result<(), CliError> {
    match utf8("--test-disable-layer", value)? {
        "landlock" => {
            layers.landlock_fs = true;
            layers.landlock_net = true;
            layers.landlock_scope = true;
        }
        "landlock-fs" => layers.landlock_fs = true,
        "landlock-net" => layers.landlock_net = true,
        "scope" => layers.landlock_scope = true,
        "seccomp" => layers.seccomp = true,
        _ => {
            return Err(invalid(
                "--test-disable-layer",
                value,
                "expected landlock, landlock-fs, landlock-net, scope or seccomp",
            ));
        }
    }
    Ok(())
}

/// Parses the arguments after the program name.
///
/// `test_max_abi` is the raw `SLUICE_SHIM_TEST_MAX_ABI` value; it is ignored unless the crate
/// is built with the `test-hooks` feature.
pub fn parse<I>(args: I, test_max_abi: Option<OsString>) -> Result<Parsed, CliError>
where
    I: IntoIterator<Item = OsString>,
{
    use lexopt::prelude::*;

    let mut parser = lexopt::Parser::from_args(args);
    let mut proxy = None;
    let mut ca_bundle = None;
    let mut ca_cert = None;
    let mut fs = FsGrants::default();
    let mut uid = None;
    let mut gid = None;
    let mut compat = None;
    let mut min_abi = None;
    let mut status_fd = None;
    let mut env = Vec::new();
    let mut workdir = None;
    let mut netns_path = None;
    let mut transparent_ports = Vec::new();
    let (mut allow_host_netns, mut audit_denials, mut allow_unconfined) = (false, false, false);
    let mut allow_udp = false;
    let mut interp_grant = true;
    // Only `--test-disable-layer` (a test-hooks flag) mutates it.
    #[cfg_attr(not(feature = "test-hooks"), allow(unused_mut))]
    let mut disabled = DisabledLayers::default();
    let mut command: Option<CommandLine> = None;

    while let Some(arg) = parser.next()? {
        match arg {
            Long("help") | Short('h') => return Ok(Parsed::Help),
            Long("version") => return Ok(Parsed::Version),
            Long("proxy") => {
                let v = parser.value()?;
                let addr = utf8("--proxy", &v)?
                    .parse::<SocketAddr>()
                    .map_err(|e| invalid("--proxy", &v, e))?;
                if addr.port() == 0 {
                    return Err(invalid("--proxy", &v, "port 0"));
                }
                once(&mut proxy, "--proxy", addr)?;
            }
            Long("ca-bundle") => {
                let v = parser.value()?;
                once(&mut ca_bundle, "--ca-bundle", path("--ca-bundle", &v)?)?;
            }
            Long("ca-cert") => {
                let v = parser.value()?;
                once(&mut ca_cert, "--ca-cert", path("--ca-cert", &v)?)?;
            }
            Long("ro") => fs.ro.push(path("--ro", &parser.value()?)?),
            Long("rw") => fs.rw.push(path("--rw", &parser.value()?)?),
            Long("exec") => fs.exec.push(path("--exec", &parser.value()?)?),
            Long("uid") => once(&mut uid, "--uid", id("--uid", &parser.value()?)?)?,
            Long("gid") => once(&mut gid, "--gid", id("--gid", &parser.value()?)?)?,
            Long("compat") => {
                let v = parser.value()?;
                let mode = match utf8("--compat", &v)? {
                    "strict" => Compat::Strict,
                    "best-effort" => Compat::BestEffort,
                    _ => return Err(invalid("--compat", &v, "expected strict or best-effort")),
                };
                once(&mut compat, "--compat", mode)?;
            }
            Long("min-abi") => {
                let v = parser.value()?;
                let n: u8 = utf8("--min-abi", &v)?
                    .parse()
                    .map_err(|e| invalid("--min-abi", &v, e))?;
                once(&mut min_abi, "--min-abi", n)?;
            }
            Long("status-fd") => {
                let v = parser.value()?;
                let fd: RawFd = utf8("--status-fd", &v)?
                    .parse()
                    .map_err(|e| invalid("--status-fd", &v, e))?;
                if fd < 3 {
                    return Err(invalid("--status-fd", &v, "must be 3 or above"));
                }
                once(&mut status_fd, "--status-fd", fd)?;
            }
            Long("env") => env.push(env_entry(&parser.value()?)?),
            Long("workdir") => {
                let v = parser.value()?;
                once(&mut workdir, "--workdir", path("--workdir", &v)?)?;
            }
            Long("netns-path") => {
                let v = parser.value()?;
                once(&mut netns_path, "--netns-path", path("--netns-path", &v)?)?;
            }
            Long("transparent-port") => {
                transparent_ports.push(port("--transparent-port", &parser.value()?)?);
            }
            Long("allow-host-netns") => allow_host_netns = true,
            Long("audit-denials") => audit_denials = true,
            Long("allow-unconfined") => allow_unconfined = true,
            Long("allow-udp") => allow_udp = true,
            Long("no-interp-grant") => interp_grant = false,
            #[cfg(feature = "test-hooks")]
            Long("test-disable-layer") => disable_layer(&mut disabled, &parser.value()?)?,
            Value(program) => {
                command = Some(CommandLine {
                    program,
                    args: parser.raw_args()?.collect(),
                });
                break;
            }
            _ => return Err(arg.unexpected().into()),
        }
    }

    let command = command.ok_or(CliError::MissingCommand)?;
    let proxy = proxy.ok_or(CliError::Missing("--proxy ADDR"))?;
    if fs.ro.is_empty() && fs.rw.is_empty() && fs.exec.is_empty() {
        return Err(CliError::EmptyAllowList);
    }
    if fs.exec.is_empty() {
        return Err(CliError::NoExecPath);
    }
    let compat = compat.unwrap_or_default();
    if allow_unconfined && compat == Compat::Strict {
        return Err(CliError::UnconfinedInStrict);
    }
    Ok(Parsed::Run(Box::new(Policy {
        proxy,
        transparent_ports,
        ca_bundle,
        ca_cert,
        fs,
        interp_grant,
        uid: uid.unwrap_or(DEFAULT_ID),
        gid: gid.unwrap_or(DEFAULT_ID),
        compat,
        min_abi,
        status_fd,
        env,
        workdir,
        allow_host_netns,
        netns_path,
        audit_denials,
        allow_unconfined,
        allow_udp,
        disabled,
        test_max_abi: test_abi_override(test_max_abi)?,
        command,
    })))
}

#[cfg(feature = "test-hooks")]
fn test_abi_override(raw: Option<OsString>) -> Result<Option<u8>, CliError> {
    raw.map(|v| {
        utf8("SLUICE_SHIM_TEST_MAX_ABI", &v)?
            .parse()
            .map_err(|e| invalid("SLUICE_SHIM_TEST_MAX_ABI", &v, e))
    })
    .transpose()
}

#[cfg(not(feature = "test-hooks"))]
fn test_abi_override(_raw: Option<OsString>) -> Result<Option<u8>, CliError> {
    Ok(None)
}

#[cfg(test)]
mod tests;
