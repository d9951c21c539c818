//! The `sluice` binary: parses the command line and hands over to `sluice::cli`.
#![forbid(unsafe_code)]

use std::process::ExitCode;

fn main() -> ExitCode {
    sluice::cli::main()
}
