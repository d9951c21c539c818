//! libFuzzer target: `sluice::fuzz::rpc_body` on every input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice::fuzz::rpc_body(data));
