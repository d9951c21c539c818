//! libFuzzer target: `sluice::fuzz::connect_authority` on every input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice::fuzz::connect_authority(data));
