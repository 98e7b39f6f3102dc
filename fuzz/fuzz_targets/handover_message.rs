#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| shoal_fuzz::handover_message(data));
