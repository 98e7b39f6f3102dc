#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| shoal_fuzz::endpoint_slices(data));
