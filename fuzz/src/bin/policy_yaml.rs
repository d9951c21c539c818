//! libFuzzer target: `sluice::fuzz::policy_yaml` on every input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice::fuzz::policy_yaml(data));
