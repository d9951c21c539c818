//! libFuzzer target: `sluice::fuzz::audit_lines` on every input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice::fuzz::audit_lines(data));
