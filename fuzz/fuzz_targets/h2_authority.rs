#![no_main]

#[path = "../src/h2_authority.rs"]
mod entries;

libfuzzer_sys::fuzz_target!(|data: &[u8]| entries::h2_authority(data));
