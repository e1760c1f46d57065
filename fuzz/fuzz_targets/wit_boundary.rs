//! cargo fuzz target `wit_boundary`: see `boxcar_fuzz_targets::wit_boundary`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| boxcar_fuzz_targets::wit_boundary(data));
