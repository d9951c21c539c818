//! libFuzzer target: `sluice::fuzz::transparent_sniff` on every input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice::fuzz::transparent_sniff(data));
