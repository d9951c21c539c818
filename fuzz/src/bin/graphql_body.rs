//! libFuzzer target: `sluice::fuzz::graphql_body` on every input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice::fuzz::graphql_body(data));
