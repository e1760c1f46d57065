//! `boxcar examples`: the example handlers bundled with this build, ready to
//! drop into a handlers directory.
//!
//! Invariant: everything here comes from the binary itself (the components
//! and manifests `boxcar-examples` embeds), never from the build tree, so it
//! works wherever the binary is. Examples this build lists but does not
//! carry (Python and JavaScript: too large to embed) are named as such by
//! `list` and skipped by `export`.

use std::path::Path;

use boxcar_examples::{Example, ALL};
use serde_json::json;

use super::context::Context;
use crate::error::usage;
use crate::{cli::ExamplesCommand, output::table, units::ByteSize};

pub fn run(context: Context, command: ExamplesCommand) -> anyhow::Result<()> {
    match command {
        ExamplesCommand::List => {
            list(context.json);
            Ok(())
        }
        ExamplesCommand::Export { dir } => {
            let written = export(&dir)?;
            let skipped: Vec<&str> = not_embedded().map(|e| e.name).collect();
            if context.json {
                println!(
                    "{}",
                    json!({"dir": dir.display().to_string(), "handlers": written, "not_in_this_build": skipped})
                );
            } else {
                println!(
                    "wrote {} handlers to {}: {}",
                    written.len(),
                    dir.display(),
                    written.join(", ")
                );
                if !skipped.is_empty() {
                    println!(
                        "not in this build (see `boxcar examples list`): {}",
                        skipped.join(", ")
                    );
                }
            }
            Ok(())
        }
    }
}

/// The examples this build lists but does not carry.
fn not_embedded() -> impl Iterator<Item = &'static Example> {
    ALL.iter().filter(|e| e.embedded.is_none())
}

fn list(json: bool) {
    if json {
        let entries: Vec<_> = ALL
            .iter()
            .map(|e| {
                json!({
                    "name": e.name,
                    "language": e.language.as_str(),
                    "bytes": e.size,
                    "in_this_build": e.embedded.is_some(),
                    "why_not": e.component().err().map(|why| why.to_string()),
                })
            })
            .collect();
        println!("{}", json!(entries));
        return;
    }
    let rows: Vec<Vec<String>> = ALL
        .iter()
        .map(|e| {
            vec![
                e.name.to_string(),
                e.language.as_str().to_string(),
                ByteSize(e.size).to_string(),
                if e.embedded.is_some() { "yes" } else { "no" }.to_string(),
            ]
        })
        .collect();
    print!(
        "{}",
        table(&["NAME", "LANGUAGE", "SIZE", "IN THIS BUILD"], &rows)
    );
    let missing: Vec<&Example> = not_embedded().collect();
    let sizes = missing.iter().map(|e| e.size);
    if let (Some(least), Some(most)) = (sizes.clone().min(), sizes.clone().max()) {
        let names: Vec<&str> = missing.iter().map(|e| e.name).collect();
        println!(
            "\nnot in this build: {}.\nTheir components are {}–{} each ({} together), too large to embed in the binary;\n\
             `cargo build` writes them under target/guests/polyglot/ (deploy them from there with their manifests).",
            names.join(", "),
            ByteSize(least),
            ByteSize(most),
            ByteSize(sizes.sum()),
        );
    }
}

/// Writes every embedded example into `dir` (module first, then the
/// manifest, each renamed into place so a watching host never sees half a
/// file).
///
/// # Errors
/// The directory cannot be created or written.
pub fn export(dir: &Path) -> anyhow::Result<Vec<String>> {
    std::fs::create_dir_all(dir)
        .map_err(|e| usage(format!("cannot create {}: {e}", dir.display())))?;
    let mut written = Vec::new();
    for example in ALL {
        let Ok(bytes) = example.component() else {
            continue;
        };
        write_atomically(&dir.join(format!("{}.wasm", example.name)), bytes)?;
        write_atomically(
            &dir.join(format!("{}.toml", example.name)),
            example.manifest_text.as_bytes(),
        )?;
        written.push(example.name.to_string());
    }
    Ok(written)
}

/// Writes `bytes` to a hidden temporary file beside `path`, then renames it.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let temp = path.with_file_name(format!(".{name}.tmp"));
    std::fs::write(&temp, bytes)?;
    std::fs::rename(&temp, path)
}
