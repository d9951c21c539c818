//! libFuzzer target: `sluice::fuzz::provider_profile` on every input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice::fuzz::provider_profile(data));
