//! Runs the filesystem operations in `{"ops": [...]}` and reports each
//! outcome, without failing the job: the sandbox tests use it to try path
//! escapes from preopened directories and writes to read-only ones.
//!
//! Ops: `{"op": "read", "path"}`, `{"op": "write", "path", "data"}`,
//! `{"op": "list", "path"}`, `{"op": "mkdir", "path"}`,
//! `{"op": "remove", "path"}`, `{"op": "fill", "path", "bytes"}` (writes
//! `bytes` zero bytes in 64 KiB chunks), `{"op": "sleep", "ms"}`.

use std::io::Write;

use serde::{Deserialize, Serialize};

#[derive(Deserialize)]
struct Probe {
    ops: Vec<Op>,
}

#[derive(Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
enum Op {
    Read { path: String },
    Write { path: String, data: String },
    List { path: String },
    Mkdir { path: String },
    Remove { path: String },
    Fill { path: String, bytes: u64 },
    Sleep { ms: u64 },
}

#[derive(Serialize)]
struct Report {
    ok: bool,
    /// File text, or sorted entry names, on success.
    #[serde(skip_serializing_if = "Option::is_none")]
    value: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

fn run(op: &Op) -> std::io::Result<Option<serde_json::Value>> {
    match op {
        Op::Read { path } => Ok(Some(std::fs::read_to_string(path)?.into())),
        Op::Write { path, data } => std::fs::write(path, data).map(|()| None),
        Op::List { path } => {
            let mut names = std::fs::read_dir(path)?
                .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
                .collect::<Result<Vec<_>, _>>()?;
            names.sort();
            Ok(Some(names.into()))
        }
        Op::Mkdir { path } => std::fs::create_dir(path).map(|()| None),
        Op::Remove { path } => std::fs::remove_file(path).map(|()| None),
        Op::Fill { path, bytes } => {
            let mut file = std::fs::File::create(path)?;
            let chunk = vec![0u8; 64 << 10];
            let mut left = *bytes;
            while left > 0 {
                let n = left.min(chunk.len() as u64) as usize;
                file.write_all(&chunk[..n])?;
                left -= n as u64;
            }
            Ok(None)
        }
        Op::Sleep { ms } => {
            std::thread::sleep(std::time::Duration::from_millis(*ms));
            Ok(None)
        }
    }
}

fn fs_probe(job: boxcar_guest::Job<Probe>) -> Result<Vec<Report>, boxcar_guest::Error> {
    Ok(job
        .payload
        .ops
        .iter()
        .map(|op| match run(op) {
            Ok(value) => Report {
                ok: true,
                value,
                error: None,
            },
            Err(e) => Report {
                ok: false,
                value: None,
                error: Some(e.to_string()),
            },
        })
        .collect())
}

boxcar_guest::handler!(fs_probe);
