//! cargo fuzz target `manifest`: see `boxcar_fuzz_targets::manifest`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| boxcar_fuzz_targets::manifest(data));
