//! sluice-shim binary: parses the command line and runs the launch sequence of the library.
//!
//! Exit codes: 125 setup or policy failure, 126 the command cannot be executed, 127 the
//! command was not found; on success the process *is* the command.
#![forbid(unsafe_code)]

use std::process::ExitCode;

fn main() -> ExitCode {
    sluice_shim::run(std::env::args_os().skip(1))
}
