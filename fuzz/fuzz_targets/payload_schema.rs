//! cargo fuzz target `payload_schema`: see `boxcar_fuzz_targets::payload_schema`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| boxcar_fuzz_targets::payload_schema(data));
