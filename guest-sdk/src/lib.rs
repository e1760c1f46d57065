//! boxcar-guest: the Rust guest SDK.
