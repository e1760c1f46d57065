//! Builds the hand-written WebAssembly text guests (`example-handlers/wat/
//! <name>.wat`, each with its manifest `<name>.toml`) into binary
//! components with the `wat` crate, and appends them to `ALL`, embedded.
//! Included by `build.rs`.
//!
//! These guests do what no language toolchain emits on purpose (e.g. many
//! core instances, each with its own memory), to test the host's limits.

use std::{fs, path::Path};

pub fn build(root: &Path, out_dir: &Path, code: &mut String) {
    let dir = root.join("example-handlers").join("wat");
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut sources: Vec<_> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "wat"))
        .collect();
    sources.sort();
    let target = out_dir.join("wat");
    fs::create_dir_all(&target)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", target.display()));
    for source in sources {
        let name = source
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_else(|| panic!("{}: the name is not UTF-8", source.display()))
            .to_string();
        let bytes = wat::parse_file(&source)
            .unwrap_or_else(|e| panic!("{}: not valid WebAssembly text: {e}", source.display()));
        let wasm = target.join(format!("{name}.wasm"));
        fs::write(&wasm, bytes).unwrap_or_else(|e| panic!("cannot write {}: {e}", wasm.display()));
        let manifest = dir.join(format!("{name}.toml"));
        assert!(
            manifest.is_file(),
            "{} has no manifest {}",
            source.display(),
            manifest.display()
        );
        code.push_str(&super::entry(
            &name,
            "WebAssemblyText",
            &wasm,
            &manifest,
            super::Embed::Component,
        ));
    }
}
