//! `boxcar examples`: the example handlers bundled with this build, ready to
//! drop into a handlers directory.

use std::path::Path;

use serde_json::json;

use super::{usage, Context};
use crate::cli::ExamplesCommand;

pub fn run(context: Context, command: ExamplesCommand) -> anyhow::Result<()> {
    match command {
        ExamplesCommand::List => {
            if context.json {
                let names: Vec<_> = boxcar_examples::ALL.iter().map(|e| e.name).collect();
                println!("{}", json!(names));
            } else {
                for example in boxcar_examples::ALL {
                    println!("{}", example.name);
                }
            }
            Ok(())
        }
        ExamplesCommand::Export { dir } => {
            let written = export(&dir, |_| true)?;
            if context.json {
                println!(
                    "{}",
                    json!({"dir": dir.display().to_string(), "handlers": written})
                );
            } else {
                println!(
                    "wrote {} handlers to {}: {}",
                    written.len(),
                    dir.display(),
                    written.join(", ")
                );
            }
            Ok(())
        }
    }
}

/// Writes the examples that `keep` accepts into `dir` (module first, then the
/// manifest, each renamed into place so a watching host never sees half a file).
///
/// # Errors
/// The directory cannot be created or written.
pub fn export(dir: &Path, keep: impl Fn(&str) -> bool) -> anyhow::Result<Vec<String>> {
    std::fs::create_dir_all(dir)
        .map_err(|e| usage(format!("cannot create {}: {e}", dir.display())))?;
    let mut written = Vec::new();
    for example in boxcar_examples::ALL.iter().filter(|e| keep(e.name)) {
        let bytes = example.bytes().map_err(|e| {
            anyhow::anyhow!(
                "example `{}` is missing from this build ({e}); rebuild with cargo build",
                example.name
            )
        })?;
        let manifest = std::fs::read(example.manifest_path())?;
        write_atomically(&dir.join(format!("{}.wasm", example.name)), &bytes)?;
        write_atomically(&dir.join(format!("{}.toml", example.name)), &manifest)?;
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
