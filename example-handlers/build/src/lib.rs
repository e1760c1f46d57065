//! Paths to the example handler components, built for `wasm32-wasip2` by
//! this crate's build script (see `build.rs`), for tests, benchmarks and the
//! demo.
//!
//! Each Rust example is a guest crate in `example-handlers/rust/<name>/` with
//! its manifest `<name>.toml` beside its `Cargo.toml`.
//!
//! Hand-written WebAssembly text guests (`example-handlers/wat/<name>.wat`
//! with `<name>.toml`) are compiled with the `wat` crate; they are hostile
//! test guests no toolchain would emit (e.g. `many-memories`).
//!
//! Python and JavaScript examples (`example-handlers/python/<name>.py`,
//! `example-handlers/js/<name>.js`, each with `<name>.toml`) are in [`ALL`]
//! only when their toolchain (componentize-py, componentize-js) was found
//! at build time (see `polyglot.rs`); they are named by job type, e.g.
//! `py.echo`, `js.echo`. Use [`has`], [`python_built`] and [`js_built`].

use std::path::Path;

/// One built example guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Example {
    /// The guest's name, which is also its job type (e.g. `echo`).
    pub name: &'static str,
    /// Absolute path of the compiled component (`.wasm`).
    pub wasm: &'static str,
    /// Absolute path of its manifest (`<name>.toml`).
    pub manifest: &'static str,
}

impl Example {
    /// The component's path.
    pub fn wasm_path(&self) -> &'static Path {
        Path::new(self.wasm)
    }

    /// The manifest's path.
    pub fn manifest_path(&self) -> &'static Path {
        Path::new(self.manifest)
    }

    /// Reads the component's bytes.
    ///
    /// # Errors
    /// When the file was removed since the build.
    pub fn bytes(&self) -> std::io::Result<Vec<u8>> {
        std::fs::read(self.wasm)
    }
}

include!(concat!(env!("OUT_DIR"), "/examples.rs"));

/// The example called `name`, if there is one.
pub fn get(name: &str) -> Option<&'static Example> {
    ALL.iter().find(|e| e.name == name)
}

/// Whether an example called `name` was built (Python and JavaScript
/// examples exist only when their toolchain was found).
pub fn has(name: &str) -> bool {
    get(name).is_some()
}

/// Whether the Python examples (`py.*`) were built (componentize-py found).
pub fn python_built() -> bool {
    ALL.iter().any(|e| e.name.starts_with("py."))
}

/// Whether the JavaScript examples (`js.*`) were built (componentize-js found).
pub fn js_built() -> bool {
    ALL.iter().any(|e| e.name.starts_with("js."))
}

/// The component path of the example called `name`, if there is one.
pub fn path(name: &str) -> Option<&'static Path> {
    get(name).map(Example::wasm_path)
}

/// The component bytes of the example called `name`.
///
/// # Panics
/// When no example has that name or its file is unreadable: for tests.
pub fn bytes(name: &str) -> Vec<u8> {
    let example = get(name).unwrap_or_else(|| panic!("no example guest named `{name}`"));
    example
        .bytes()
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", example.wasm))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_example_is_built_with_a_manifest() {
        assert!(ALL.len() >= 12);
        for e in ALL {
            assert!(e.wasm_path().is_file(), "{} missing", e.wasm);
            let manifest = std::fs::read_to_string(e.manifest).expect("manifest readable");
            assert!(
                manifest.contains(&format!("job_type = \"{}\"", e.name)),
                "{} must name its job type",
                e.manifest
            );
        }
        assert!(path("echo").is_some());
        assert!(path("nope").is_none());
    }
}
