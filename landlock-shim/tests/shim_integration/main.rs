//! Integration tests for sluice-shim: the real binary around a probe process, one process per
//! assertion, asserting the exact errno of each layer and, for each layer, a canary showing the
//! same probe succeeds without it (spec `landlock-shim.md` §1.13). Most tests need root; they
//! fail instead of skipping when `SLUICE_REQUIRE_PRIVILEGED=1`.
#![allow(clippy::expect_used, clippy::unwrap_used)] // a failed expectation is a failed test

mod harness;

mod clients;
mod contract;
mod filesystem;
mod network;
mod process;
mod scoping;
mod syscalls;
