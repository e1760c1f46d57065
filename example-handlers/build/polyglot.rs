//! Builds the Python and JavaScript example handlers
//! (`example-handlers/python/*.py`, `example-handlers/js/*.js`) into
//! components when their toolchains are present, and appends them to `ALL`
//! with the same shape as the Rust entries. Included by `build.rs`.
//!
//! - Python: `componentize-py` (0.25) — `$COMPONENTIZE_PY`, else on `PATH`.
//! - JavaScript: `componentize-js` (0.23) — `$COMPONENTIZE_JS`, else the one
//!   `npm ci` installs in `example-handlers/js/node_modules` (or
//!   `guest-sdk/js/node_modules`), else on `PATH`; `jco componentize` from the
//!   same places is the fallback. Built with `-d http fetch-event` so a
//!   handler without the HTTP capability needs no `wasi:http` import.
//! - A missing tool is a `cargo:warning` and that language is skipped; with
//!   `CI=true` it fails the build instead.
//! - Components (12–20 MB, 10–15 s each) go to `<guests>/polyglot/<lang>/`
//!   under the shared guest target dir and are rebuilt only when a
//!   fingerprint of their inputs (language sources, SDK, WIT, tool version)
//!   changes: the build script also reruns when the Rust guests change.
//! - The two languages build in parallel, one component at a time each.
//! - Their components are not embedded in the binary (12–20 MB each, about
//!   190 MB for all twelve; 4–7 MB each even gzip-compressed): their
//!   entries carry the manifest text, the component's path and its size.
//! - Each example is `<dir>/<name>.{py,js}` with its manifest
//!   `<dir>/<name>.toml`; its `ALL` name is the manifest's job type
//!   (`py.<name>`, `js.<name>`).
//! - An example whose manifest grants `http` is built against the
//!   `handler-http` world (`handler` plus `wasi:http/outgoing-handler`),
//!   which the SDKs' HTTP helpers import.

use std::{
    collections::hash_map::DefaultHasher,
    env,
    ffi::OsString,
    fs,
    hash::{Hash, Hasher},
    path::{Path, PathBuf},
    process::Command,
};

/// Part of every fingerprint: bump it when the build commands below change,
/// so existing components are rebuilt.
const RECIPE: u32 = 3;

/// One language's toolchain, found on this machine.
struct Tool {
    /// Program and leading arguments (e.g. `node`, `…/cli.js`).
    argv: Vec<OsString>,
    /// `--version` output, part of the fingerprint.
    version: String,
}

#[derive(Clone, Copy)]
enum Lang {
    Python,
    Js,
}

impl Lang {
    fn label(self) -> &'static str {
        match self {
            Lang::Python => "Python",
            Lang::Js => "JavaScript",
        }
    }
    /// Job type prefix and output subdirectory.
    fn prefix(self) -> &'static str {
        match self {
            Lang::Python => "py",
            Lang::Js => "js",
        }
    }
    fn ext(self) -> &'static str {
        match self {
            Lang::Python => "py",
            Lang::Js => "js",
        }
    }
    fn examples_dir(self, root: &Path) -> PathBuf {
        match self {
            Lang::Python => root.join("example-handlers").join("python"),
            Lang::Js => root.join("example-handlers").join("js"),
        }
    }
    fn sdk_dir(self, root: &Path) -> PathBuf {
        match self {
            Lang::Python => root.join("guest-sdk").join("python"),
            Lang::Js => root.join("guest-sdk").join("js"),
        }
    }
    fn install_hint(self) -> &'static str {
        match self {
            Lang::Python => "install it with `pip install componentize-py==0.25.1`",
            Lang::Js => "install it with `npm ci --prefix example-handlers/js`",
        }
    }
}

/// Builds what it can and appends one `Example { .. }` line per built
/// component to `code` (the body of `ALL`).
pub fn build(root: &Path, guest_target_dir: &Path, code: &mut String) {
    let root = fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
    watch(&root);
    let ci = env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1");
    let out_root = guest_target_dir.join("polyglot");

    let langs = [Lang::Python, Lang::Js];
    let results: Vec<Result<Vec<String>, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = langs
            .iter()
            .map(|&lang| {
                let root = &root;
                let out_root = &out_root;
                s.spawn(move || build_lang(lang, root, out_root))
            })
            .collect();
        handles
            .into_iter()
            // A failed build (not a missing tool) fails this script.
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });

    for (lang, result) in langs.iter().zip(results) {
        match result {
            Ok(entries) => {
                for entry in entries {
                    code.push_str(&entry);
                }
            }
            Err(missing) if ci => panic!(
                "CI=true and the {} example handlers cannot be built: {missing}",
                lang.label()
            ),
            Err(missing) => println!(
                "cargo:warning=skipping the {} example handlers: {missing}",
                lang.label()
            ),
        }
    }
}

fn watch(root: &Path) {
    // node_modules lives in example-handlers/js: watching the directory also
    // notices `npm ci` (a newly installed componentize-js).
    for dir in [
        Lang::Python.examples_dir(root),
        Lang::Js.examples_dir(root),
        Lang::Python.sdk_dir(root),
        Lang::Js.sdk_dir(root),
    ] {
        println!("cargo:rerun-if-changed={}", dir.display());
    }
    println!(
        "cargo:rerun-if-changed={}",
        root.join("example-handlers")
            .join("build")
            .join("polyglot.rs")
            .display()
    );
    for var in ["CI", "COMPONENTIZE_PY", "COMPONENTIZE_JS"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
}

/// `Err` only when the tool is missing; a tool that fails on a present
/// example is a build failure (panic), as for the Rust guests.
fn build_lang(lang: Lang, root: &Path, out_root: &Path) -> Result<Vec<String>, String> {
    let tool = find_tool(lang, root)?;
    let dir = lang.examples_dir(root);
    let out_dir = out_root.join(lang.prefix());
    fs::create_dir_all(&out_dir)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", out_dir.display()));
    let fingerprint_inputs = fingerprint_inputs(lang, root, &tool);

    let mut entries = Vec::new();
    for name in example_names(lang, &dir) {
        let manifest = dir.join(format!("{name}.toml"));
        let text = fs::read_to_string(&manifest).unwrap_or_else(|e| {
            panic!(
                "the {} example `{name}` has no readable manifest {}: {e}",
                lang.label(),
                manifest.display()
            )
        });
        let job_type = job_type(&text).unwrap_or_else(|| {
            panic!(
                "{} must set `job_type = \"…\"` under [handler]",
                manifest.display()
            )
        });
        let http = grants_http(&text);
        let wasm = out_dir.join(format!("{name}.wasm"));
        let stamp = out_dir.join(format!("{name}.fingerprint"));
        let mut h = DefaultHasher::new();
        RECIPE.hash(&mut h);
        fingerprint_inputs.hash(&mut h);
        name.hash(&mut h);
        let fingerprint = format!("{:016x}", h.finish());
        let fresh =
            wasm.is_file() && fs::read_to_string(&stamp).is_ok_and(|s| s.trim() == fingerprint);
        if !fresh {
            compile(lang, &tool, root, &name, http, &wasm);
            fs::write(&stamp, &fingerprint)
                .unwrap_or_else(|e| panic!("cannot write {}: {e}", stamp.display()));
        }
        entries.push(super::entry(
            &job_type,
            lang.label(),
            &wasm,
            &manifest,
            super::Embed::ManifestOnly,
        ));
    }
    Ok(entries)
}

/// Example names: `<name>.<ext>` files beside a `<name>.toml`, sorted.
fn example_names(lang: Lang, dir: &Path) -> Vec<String> {
    let Ok(read) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = read
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == lang.ext()))
        .filter(|p| p.with_extension("toml").is_file())
        .filter_map(|p| p.file_stem().and_then(|s| s.to_str()).map(str::to_string))
        .collect();
    names.sort();
    names
}

/// The `job_type = "…"` of a manifest (a line scan: build scripts have no
/// TOML parser here, and the manifests are ours).
fn job_type(manifest: &str) -> Option<String> {
    manifest.lines().find_map(|line| {
        let rest = line
            .trim()
            .strip_prefix("job_type")?
            .trim_start()
            .strip_prefix('=')?;
        let rest = rest.trim().strip_prefix('"')?;
        Some(rest[..rest.find('"')?].to_string())
    })
}

/// True when the manifest's `[capabilities]` grants a non-empty `http`
/// list (a line scan, like [`job_type`]).
fn grants_http(manifest: &str) -> bool {
    manifest.lines().any(|line| {
        line.trim()
            .strip_prefix("http")
            .and_then(|rest| rest.trim_start().strip_prefix('='))
            .is_some_and(|list| {
                list.trim()
                    .trim_start_matches('[')
                    .trim_start()
                    .starts_with('"')
            })
    })
}

/// Everything a component of `lang` depends on besides its name: tool
/// version, the language's example sources, its SDK, the WIT.
fn fingerprint_inputs(lang: Lang, root: &Path, tool: &Tool) -> Vec<(String, Vec<u8>)> {
    let mut inputs = vec![("tool".to_string(), tool.version.clone().into_bytes())];
    let sdk_ext: &[&str] = match lang {
        Lang::Python => &["py"],
        Lang::Js => &["js", "mjs"],
    };
    collect(
        &lang.examples_dir(root),
        &[lang.ext(), "mjs", "toml"],
        &mut inputs,
    );
    collect(&lang.sdk_dir(root), sdk_ext, &mut inputs);
    collect(&root.join("wit"), &["wit"], &mut inputs);
    inputs.sort();
    inputs
}

fn collect(dir: &Path, exts: &[&str], into: &mut Vec<(String, Vec<u8>)>) {
    let Ok(read) = fs::read_dir(dir) else { return };
    for entry in read.filter_map(Result::ok) {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if path.is_dir() {
            if name != "node_modules" && name != "__pycache__" && !name.starts_with('.') {
                collect(&path, exts, into);
            }
        } else if path
            .extension()
            .is_some_and(|x| exts.iter().any(|e| x == *e))
        {
            let bytes = fs::read(&path).unwrap_or_default();
            into.push((path.display().to_string(), bytes));
        }
    }
}

fn find_tool(lang: Lang, root: &Path) -> Result<Tool, String> {
    let mut tried = Vec::new();
    let candidates: Vec<Vec<OsString>> = match lang {
        Lang::Python => {
            let mut c = Vec::new();
            if let Some(p) = env::var_os("COMPONENTIZE_PY") {
                c.push(vec![p]);
            }
            c.push(vec!["componentize-py".into()]);
            c
        }
        Lang::Js => {
            let mut c = Vec::new();
            if let Some(p) = env::var_os("COMPONENTIZE_JS") {
                c.push(vec![p]);
            }
            for base in [Lang::Js.examples_dir(root), Lang::Js.sdk_dir(root)] {
                let bin = base.join("node_modules").join(".bin");
                c.push(vec![bin.join("componentize-js").into()]);
                c.push(vec![bin.join("jco").into(), "componentize".into()]);
            }
            c.push(vec!["componentize-js".into()]);
            c.push(vec!["jco".into(), "componentize".into()]);
            c
        }
    };
    for argv in candidates {
        let shown = argv
            .iter()
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" ");
        // For `jco componentize`, ask `jco --version`.
        match Command::new(&argv[0])
            .arg("--version")
            .current_dir(root)
            .output()
        {
            Ok(out) if out.status.success() => {
                let version = String::from_utf8_lossy(&out.stdout).trim().to_string();
                return Ok(Tool {
                    argv,
                    version: format!("{shown} {version}"),
                });
            }
            Ok(out) => tried.push(format!("`{shown} --version` exited with {}", out.status)),
            Err(_) => tried.push(format!("`{shown}` not found")),
        }
    }
    Err(format!("{} ({})", lang.install_hint(), tried.join("; ")))
}

/// Builds one component into `wasm`, via a temporary file renamed into place.
/// Debug and release host builds share the output dir and may run this at
/// the same time: scratch paths are per process, the rename is atomic.
fn compile(lang: Lang, tool: &Tool, root: &Path, name: &str, http: bool, wasm: &Path) {
    let pid = std::process::id();
    let tmp = wasm.with_extension(format!("wasm.{pid}.tmp"));
    let mut cmd = Command::new(&tool.argv[0]);
    cmd.args(&tool.argv[1..]).current_dir(root);
    match lang {
        Lang::Python => {
            // componentize-py's interpreter writes __pycache__ beside the
            // modules it imports; the sources are watched by cargo, so that
            // would rerun this script on every build. Build from a copy.
            let stage = wasm.with_extension(format!("{pid}.src"));
            let _ = fs::remove_dir_all(&stage);
            let handlers = stage.join("handlers");
            let sdk = stage.join("sdk");
            copy_tree(&lang.examples_dir(root), &handlers, "py");
            copy_tree(&lang.sdk_dir(root), &sdk, "py");
            cmd.arg("-d")
                .arg(root.join("wit"))
                .arg("-w")
                .arg(if http { "handler-http" } else { "handler" })
                .args(["componentize", name, "-p"])
                .arg(&handlers)
                .arg("-p")
                .arg(&sdk)
                .arg("-o")
                .arg(&tmp)
                .env("PYTHONDONTWRITEBYTECODE", "1");
        }
        Lang::Js => {
            // Relative to the repository root: componentize-js resolves
            // `import "../../guest-sdk/js/boxcar.js"` inside its working
            // directory only.
            cmd.arg(format!("example-handlers/js/{name}.js"))
                .args(["--wit", "wit", "-n"])
                .arg(if http { "handler-http" } else { "handler" })
                .args(["-d", "http", "fetch-event", "-o"])
                .arg(&tmp);
        }
    }
    let started = std::time::Instant::now();
    let output = cmd.output().unwrap_or_else(|e| {
        panic!(
            "cannot run {} to build {name}: {e}",
            tool.argv[0].to_string_lossy()
        )
    });
    if !output.status.success() || !tmp.is_file() {
        let _ = fs::remove_file(&tmp);
        panic!(
            "building the {} example `{name}` failed ({}):\n{}\n{}",
            lang.label(),
            tool.version,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    if matches!(lang, Lang::Python) {
        let _ = fs::remove_dir_all(wasm.with_extension(format!("{pid}.src")));
    }
    fs::rename(&tmp, wasm)
        .unwrap_or_else(|e| panic!("cannot move {} into place: {e}", wasm.display()));
    eprintln!(
        "built {} example {name} in {:.1?} -> {}",
        lang.label(),
        started.elapsed(),
        wasm.display()
    );
}

/// Copies the `.{ext}` files of `from` (recursively, skipping caches and
/// node_modules) to `to`.
fn copy_tree(from: &Path, to: &Path, ext: &str) {
    fs::create_dir_all(to).unwrap_or_else(|e| panic!("cannot create {}: {e}", to.display()));
    let read = fs::read_dir(from).unwrap_or_else(|e| panic!("cannot read {}: {e}", from.display()));
    for entry in read.filter_map(Result::ok) {
        let path = entry.path();
        let name = entry.file_name();
        let shown = name.to_string_lossy();
        if path.is_dir() {
            if shown != "node_modules" && shown != "__pycache__" && !shown.starts_with('.') {
                copy_tree(&path, &to.join(&name), ext);
            }
        } else if path.extension().is_some_and(|x| x == ext) {
            fs::copy(&path, to.join(&name))
                .unwrap_or_else(|e| panic!("cannot copy {}: {e}", path.display()));
        }
    }
}
