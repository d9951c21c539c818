//! libFuzzer target: `sluice::fuzz::tenants_file` on every input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice::fuzz::tenants_file(data));
