//! libFuzzer target: `sluice::fuzz::sigv4_request` on every input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice::fuzz::sigv4_request(data));
