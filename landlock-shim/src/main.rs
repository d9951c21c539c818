//! sluice-shim: confines a command (Landlock, seccomp, privilege drop) and execs it.
//!
//! The confinement steps are built with the shim issue; until then the binary refuses to run
//! anything, with the documented setup-failure exit code, rather than exec a command
//! unconfined.
#![forbid(unsafe_code)]

use std::process::ExitCode;

fn main() -> ExitCode {
    eprintln!("sluice-shim: confinement is not built yet; refusing to run a command unconfined");
    ExitCode::from(125)
}
