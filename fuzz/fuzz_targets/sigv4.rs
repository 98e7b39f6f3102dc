#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| shoal_node::fuzzing::sigv4(data));
