//! libFuzzer target: `sluice::fuzz::credential_rewrite` on every input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice::fuzz::credential_rewrite(data));
