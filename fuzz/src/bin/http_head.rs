//! libFuzzer target: `sluice::fuzz::http_head` on every input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice::fuzz::http_head(data));
