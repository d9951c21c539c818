//! libFuzzer target: `sluice::fuzz::request_body` on every input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice::fuzz::request_body(data));
