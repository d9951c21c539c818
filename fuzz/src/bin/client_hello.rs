//! libFuzzer target: `sluice::fuzz::client_hello` on every input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice::fuzz::client_hello(data));
