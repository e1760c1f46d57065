//! cargo fuzz target `guest_payload`: see `boxcar_fuzz_targets::guest_payload`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| boxcar_fuzz_targets::guest_payload(data));
