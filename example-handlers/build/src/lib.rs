//! The example handler components, built for `wasm32-wasip2` by this
//! crate's build script (see `build.rs`), for tests, benchmarks, the demo
//! and `boxcar examples`.
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
//!
//! Invariant: what a shipped binary uses — [`Example::component`] and
//! [`Example::manifest_text`] — is compiled into it (every manifest, and the
//! Rust and `.wat` components: about 2.4 MB), so it works moved, installed,
//! or with `target/` cleaned. Python and JavaScript components are 12–20 MB
//! each (about 190 MB for the twelve, 4–7 MB each even compressed), so they
//! are not embedded: [`Example::component`] says so, and they are read from
//! the build tree ([`Example::bytes`]) by tests only.

use std::{fmt, path::Path};

/// The language an example is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Language {
    /// A guest crate over the Rust SDK.
    Rust,
    /// Hand-written WebAssembly text.
    WebAssemblyText,
    /// componentize-py over the Python SDK.
    Python,
    /// componentize-js over the JavaScript SDK.
    JavaScript,
}

impl Language {
    /// The language's name, e.g. `Rust`.
    pub fn as_str(self) -> &'static str {
        match self {
            Language::Rust => "Rust",
            Language::WebAssemblyText => "WebAssembly text",
            Language::Python => "Python",
            Language::JavaScript => "JavaScript",
        }
    }
}

/// One built example guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Example {
    /// The guest's name, which is also its job type (e.g. `echo`).
    pub name: &'static str,
    /// What it is written in.
    pub language: Language,
    /// Absolute path of the compiled component in the build tree.
    pub wasm: &'static str,
    /// Absolute path of its manifest (`<name>.toml`) in the source tree.
    pub manifest: &'static str,
    /// The manifest's text, embedded.
    pub manifest_text: &'static str,
    /// The component's bytes, when embedded (Rust and `.wat` examples).
    pub embedded: Option<&'static [u8]>,
    /// The component's size in bytes at build time.
    pub size: u64,
}

/// An example whose component this build does not carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotEmbedded {
    /// The example.
    pub example: &'static Example,
}

impl fmt::Display for NotEmbedded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let e = self.example;
        write!(
            f,
            "example `{}` ({}, {:.1} MB) is not embedded in this build: {} components are too large to carry in the binary; \
             the build wrote it to {} on the build machine",
            e.name,
            e.language.as_str(),
            e.size as f64 / 1e6,
            e.language.as_str(),
            e.wasm
        )
    }
}

impl std::error::Error for NotEmbedded {}

impl Example {
    /// The component's path in the build tree.
    pub fn wasm_path(&self) -> &'static Path {
        Path::new(self.wasm)
    }

    /// The manifest's path in the source tree.
    pub fn manifest_path(&self) -> &'static Path {
        Path::new(self.manifest)
    }

    /// The component's bytes as compiled into this binary.
    ///
    /// # Errors
    /// The example's component is not embedded (Python and JavaScript).
    pub fn component(&'static self) -> Result<&'static [u8], NotEmbedded> {
        self.embedded.ok_or(NotEmbedded { example: self })
    }

    /// The component's bytes: the embedded ones, else read from the build
    /// tree (for tests of the Python and JavaScript examples).
    ///
    /// # Errors
    /// The component is not embedded and its file was removed since the build.
    pub fn bytes(&self) -> std::io::Result<Vec<u8>> {
        match self.embedded {
            Some(bytes) => Ok(bytes.to_vec()),
            None => std::fs::read(self.wasm),
        }
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
    ALL.iter().any(|e| e.language == Language::Python)
}

/// Whether the JavaScript examples (`js.*`) were built (componentize-js found).
pub fn js_built() -> bool {
    ALL.iter().any(|e| e.language == Language::JavaScript)
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
            assert_eq!(manifest, e.manifest_text, "{} is embedded as built", e.name);
            assert!(
                manifest.contains(&format!("job_type = \"{}\"", e.name)),
                "{} must name its job type",
                e.manifest
            );
        }
        assert!(path("echo").is_some());
        assert!(path("nope").is_none());
    }

    #[test]
    fn rust_and_wat_components_are_embedded_as_built_and_polyglot_ones_are_not() {
        for e in ALL {
            let on_disk = std::fs::read(e.wasm).expect("component readable");
            assert_eq!(e.size, on_disk.len() as u64, "{}", e.name);
            match e.language {
                Language::Rust | Language::WebAssemblyText => {
                    assert_eq!(e.component().ok(), Some(on_disk.as_slice()), "{}", e.name);
                }
                Language::Python | Language::JavaScript => {
                    let refused = e.component().expect_err("not embedded");
                    assert!(refused.to_string().contains("not embedded"), "{refused}");
                    assert_eq!(e.bytes().expect("read from the build tree"), on_disk);
                }
            }
        }
        assert!(get("many-memories").is_some_and(|e| e.embedded.is_some()));
    }
}
