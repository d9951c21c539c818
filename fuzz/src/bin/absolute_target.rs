//! libFuzzer target: `sluice::fuzz::absolute_target` on every input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice::fuzz::absolute_target(data));
