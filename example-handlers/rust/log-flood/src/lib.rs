//! Hostile: writes `lines` log lines of `line_len` bytes (defaults: 1
//! million lines of 1 KiB), alternating the log import and stderr.

use boxcar_guest::{Error, Job};
use serde::Deserialize;

#[derive(Deserialize)]
struct Params {
    #[serde(default)]
    lines: Option<u64>,
    #[serde(default)]
    line_len: Option<usize>,
    #[serde(default)]
    stderr: bool,
}

fn log_flood(job: Job<Params>) -> Result<u64, Error> {
    let p = job.payload;
    let line = "y".repeat(p.line_len.unwrap_or(1024));
    let lines = p.lines.unwrap_or(1_000_000);
    for _ in 0..lines {
        if p.stderr {
            eprintln!("{line}");
        } else {
            boxcar_guest::info!("{line}");
        }
    }
    Ok(lines)
}

boxcar_guest::handler!(log_flood);
