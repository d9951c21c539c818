//! sluice-shim: confines itself, then execs the sandboxed command.
//!
//! The supervisor starts the shim as root inside the sandbox network namespace. The shim
//! builds a Landlock ruleset (filesystem, TCP ports, scopes) and seccomp programs, drops to an
//! unprivileged uid, enforces both, writes a JSON status line and execs the command, so the
//! shim's pid becomes the agent's. It is small, single-threaded and synchronous; it never
//! forks a helper and never sets up networking (spec `landlock-shim.md` §1.1).
//!
//! Modules follow the kernel concepts, and [`launch`] strings them together in the spec's
//! order: [`cli`] (flags → [`cli::Policy`]), [`env`] (the child environment, pure),
//! [`landlock`], [`seccomp`] (pure program builders + install), [`privilege`] (drop and
//! verify), [`process`] (descriptors, session, PDEATHSIG, rlimits, no_new_privs, netns),
//! [`exec`] (resolution, ELF interpreter, exit codes), [`status`] (the JSON line), and
//! [`degradation`] (what best-effort mode left out, shared by them). Raw syscalls live in
//! `sys`, the only place with `unsafe`.
#![deny(unsafe_code)]

pub mod cli;
pub mod degradation;
pub mod elf;
pub mod env;
pub mod exec;
pub mod landlock;
pub mod launch;
pub mod privilege;
pub mod process;
pub mod seccomp;
pub mod status;
mod sys;

pub use launch::run;
