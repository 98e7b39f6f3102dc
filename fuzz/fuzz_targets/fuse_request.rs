#![no_main]

#[path = "../src/fuse_request.rs"]
mod entries;

libfuzzer_sys::fuzz_target!(|data: &[u8]| entries::fuse_request(data));
