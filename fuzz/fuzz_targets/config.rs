//! cargo fuzz target `config`: see `boxcar_fuzz_targets::config`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| boxcar_fuzz_targets::config(data));
