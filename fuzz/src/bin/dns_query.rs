//! libFuzzer target: `sluice::fuzz::dns_query` on every input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice::fuzz::dns_query(data));
