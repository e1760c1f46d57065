//! cargo fuzz target `api`: see `boxcar_fuzz_targets::api`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| boxcar_fuzz_targets::api(data));
