//! Compiles the example guests (`example-handlers/rust`, its own cargo
//! workspace) for `wasm32-wasip2` in release, and writes their table into
//! `$OUT_DIR/examples.rs`; hand-written `.wat` guests are compiled with the
//! `wat` crate (`wat_guests.rs`), Python and JavaScript ones with their
//! toolchains (`polyglot.rs`).
//!
//! Invariants:
//! - Every manifest is embedded (`include_str!`), and so is every Rust and
//!   `.wat` component (`include_bytes!`, about 2.4 MB together): a binary
//!   built with this crate needs nothing of the build tree at run time.
//!   Python and JavaScript components (12–20 MB each) are not embedded;
//!   their entries carry only their path and size (see [`Embed`]).
//! - The guests get their own target dir, `<root target dir>/guests`, shared
//!   by debug and release host builds; the inner cargo therefore never waits
//!   on the outer build's lock.
//! - Cargo's build-script environment (flags, target, wrappers, jobserver) is
//!   not passed on: the inner build is a plain `cargo build` for wasm.
//! - A missing `wasm32-wasip2` target is installed with rustup (the
//!   environment may disable rustup's auto-install).

use std::{
    env,
    ffi::OsString,
    fs,
    path::{Path, PathBuf},
    process::Command,
};

const TARGET: &str = "wasm32-wasip2";

#[path = "polyglot.rs"]
mod polyglot;
#[path = "wat_guests.rs"]
mod wat_guests;

fn main() {
    let manifest_dir =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let root = manifest_dir.join("..").join("..");
    let guests = manifest_dir.join("..").join("rust");
    for watched in [guests.clone(), root.join("guest-sdk"), root.join("wit")] {
        println!("cargo:rerun-if-changed={}", watched.display());
    }
    println!("cargo:rerun-if-env-changed=CARGO_TARGET_DIR");

    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let target_dir = guest_target_dir(&root, &out_dir);
    let rustc = env::var_os("RUSTC").unwrap_or_else(|| OsString::from("rustc"));
    ensure_target(&rustc);

    let names = guest_names(&guests);
    build_guests(&guests, &target_dir);

    let release = target_dir.join(TARGET).join("release");
    let mut code = String::from(
        "/// Every example guest, built for `wasm32-wasip2`.\npub const ALL: &[Example] = &[\n",
    );
    for name in &names {
        let wasm = release.join(format!("{}.wasm", name.replace('-', "_")));
        assert!(
            wasm.is_file(),
            "the guest build succeeded but {} is missing",
            wasm.display()
        );
        let manifest = guests.join(name).join(format!("{name}.toml"));
        code.push_str(&entry(name, "Rust", &wasm, &manifest, Embed::Component));
    }
    wat_guests::build(&root, &out_dir, &mut code);
    polyglot::build(&root, &target_dir, &mut code);
    code.push_str("];\n");
    fs::write(out_dir.join("examples.rs"), code).expect("cannot write $OUT_DIR/examples.rs");
}

/// Whether an entry carries its component's bytes or only its path.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Embed {
    /// `include_bytes!` of the component.
    Component,
    /// The manifest only: the component stays in the build tree.
    ManifestOnly,
}

/// One `Example { .. }` line of `ALL` (manifest text always embedded).
pub fn entry(name: &str, language: &str, wasm: &Path, manifest: &Path, embed: Embed) -> String {
    let wasm = fs::canonicalize(wasm).unwrap_or_else(|_| wasm.to_path_buf());
    let manifest = fs::canonicalize(manifest).unwrap_or_else(|_| manifest.to_path_buf());
    let size = fs::metadata(&wasm)
        .unwrap_or_else(|e| panic!("cannot stat {}: {e}", wasm.display()))
        .len();
    let wasm = wasm.display().to_string();
    let manifest = manifest.display().to_string();
    let embedded = match embed {
        Embed::Component => format!("Some(include_bytes!({wasm:?}))"),
        Embed::ManifestOnly => "None".to_string(),
    };
    format!(
        "    Example {{ name: {name:?}, language: Language::{language}, wasm: {wasm:?}, \
         manifest: {manifest:?}, manifest_text: include_str!({manifest:?}), \
         embedded: {embedded}, size: {size} }},\n"
    )
}

/// `<root target dir>/guests`: CARGO_TARGET_DIR if set, else the ancestor of
/// OUT_DIR that cargo marked with CACHEDIR.TAG.
fn guest_target_dir(root: &Path, out_dir: &Path) -> PathBuf {
    if let Some(dir) = env::var_os("CARGO_TARGET_DIR") {
        let dir = PathBuf::from(dir);
        let dir = if dir.is_absolute() {
            dir
        } else {
            root.join(dir)
        };
        return dir.join("guests");
    }
    let tagged = out_dir
        .ancestors()
        .find(|a| a.join("CACHEDIR.TAG").is_file());
    match tagged {
        Some(dir) => dir.join("guests"),
        // OUT_DIR is <target>/<profile>/build/<pkg>/out.
        None => out_dir.ancestors().nth(4).unwrap_or(out_dir).join("guests"),
    }
}

/// Installs the wasm target with rustup when the toolchain lacks it.
fn ensure_target(rustc: &OsString) {
    let sysroot = Command::new(rustc)
        .args(["--print", "sysroot"])
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run `{} --print sysroot`: {e}",
                rustc.to_string_lossy()
            )
        });
    let sysroot = String::from_utf8_lossy(&sysroot.stdout).trim().to_string();
    if Path::new(&sysroot)
        .join("lib/rustlib")
        .join(TARGET)
        .is_dir()
    {
        return;
    }
    println!("cargo:warning=installing the {TARGET} target with rustup (needed to build the example guests)");
    let status = Command::new("rustup")
        .args(["target", "add", TARGET])
        .env_remove("RUSTC")
        .status();
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => panic!(
            "`rustup target add {TARGET}` failed ({s}); install the target by hand, then rebuild"
        ),
        Err(e) => panic!(
            "the {TARGET} target is missing from {sysroot} and rustup could not be run ({e}); \
             install rustup or add the target to this toolchain, then rebuild"
        ),
    }
}

/// The guest crates: directories under `rust/` with a Cargo.toml.
fn guest_names(guests: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(guests)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", guests.display()))
        .filter_map(Result::ok)
        .filter(|e| e.path().join("Cargo.toml").is_file())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    names
}

/// Variables cargo sets for build scripts (or users set for the host build)
/// that must not leak into the guest build.
fn leaks(key: &str) -> bool {
    const EXACT: [&str; 16] = [
        "RUSTFLAGS",
        "RUSTDOCFLAGS",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "RUSTC_LINKER",
        "MAKEFLAGS",
        "MFLAGS",
        "TARGET",
        "HOST",
        "OUT_DIR",
        "PROFILE",
        "OPT_LEVEL",
        "DEBUG",
        "NUM_JOBS",
        "RUSTC",
        "RUSTDOC",
    ];
    const KEEP: [&str; 5] = [
        "CARGO_HOME",
        "CARGO_NET_",
        "CARGO_HTTP_",
        "CARGO_REGISTRIES_",
        "CARGO_REGISTRY_",
    ];
    if EXACT.contains(&key) {
        return true;
    }
    key.starts_with("CARGO") && !KEEP.iter().any(|k| key.starts_with(k))
}

fn build_guests(guests: &Path, target_dir: &Path) {
    let cargo = env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let mut cmd = Command::new(cargo);
    cmd.arg("build")
        .arg("--release")
        .arg("--target")
        .arg(TARGET)
        .arg("--manifest-path")
        .arg(guests.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(target_dir)
        .current_dir(guests);
    for (key, _) in env::vars_os() {
        if let Some(k) = key.to_str() {
            if leaks(k) {
                cmd.env_remove(k);
            }
        }
    }
    let output = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run cargo to build the example guests: {e}"));
    if !output.status.success() {
        panic!(
            "building the example guests ({}) failed:\n{}",
            guests.display(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}
