//! cargo fuzz target `schedule`: see `boxcar_fuzz_targets::schedule`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| boxcar_fuzz_targets::schedule(data));
