//! cargo fuzz target `units`: see `boxcar_fuzz_targets::units`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| boxcar_fuzz_targets::units(data));
