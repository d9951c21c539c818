//! libFuzzer target: `sluice::fuzz::proxy_protocol` on every input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice::fuzz::proxy_protocol(data));
