//! The bodies of boxcar's fuzz targets: each takes the fuzzer's bytes,
//! runs the real parser or validator on them and checks what must hold for
//! every input. `fuzz/` (cargo fuzz, libFuzzer) calls them once per input;
//! this crate's test replays the committed seeds and crash regressions
//! (`fuzz/corpus/<target>`, `fuzz/regressions/<target>`) and a bounded
//! number of mutated inputs, so `cargo test --workspace` runs every target
//! briefly without an instrumented build.
//!
//! Invariants: a target panics only when it found a bug (a panic in the
//! code it calls, or a broken property it asserts); it never touches the
//! network or writes a file. The WIT target calls the host's boundary
//! functions with the values a guest could pass; it does not run a guest.

mod api;
mod guest;
mod parsers;
mod queue;
mod wit;

pub use api::api;
pub use guest::guest_payload;
pub use parsers::{config, manifest, payload_schema, schedule, units};
pub use wit::wit_boundary;

/// A target's body: called once per input.
pub type Target = fn(&[u8]);

/// Every target by name, as `fuzz/fuzz_targets/<name>.rs` calls it.
pub const TARGETS: &[(&str, Target)] = &[
    ("manifest", manifest),
    ("config", config),
    ("units", units),
    ("schedule", schedule),
    ("payload_schema", payload_schema),
    ("api", api),
    ("guest_payload", guest_payload),
    ("wit_boundary", wit_boundary),
];
