//! libFuzzer target: `sluice::fuzz::websocket_frames` on every input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice::fuzz::websocket_frames(data));
