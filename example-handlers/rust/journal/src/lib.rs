//! Records its own run for the chaos harness: at start it creates
//! `/journal/{job id}.{attempt}.{HOST}.{start ns}` holding `start NS`,
//! sleeps `ms` milliseconds, then appends `end NS` and returns
//! `{"attempt", "host", "start"}`. A run cut short (its host killed,
//! terminated or stopped) leaves a file without an `end` line; the stored
//! result names the run whose completion the queue accepted.
//!
//! Payload: `{"ms": 50}`. Grants: `dirs` read-write at `/journal`, env `HOST`.

use std::io::Write;

use boxcar_guest::{retry, Error, Job};
use serde::{Deserialize, Serialize};

#[derive(Deserialize)]
struct Run {
    ms: u64,
}

#[derive(Serialize)]
struct Ran {
    attempt: u32,
    host: String,
    start: u128,
}

fn now_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

fn journal(job: Job<Run>) -> Result<Ran, Error> {
    let host = std::env::var("HOST").unwrap_or_default();
    let start = now_ns();
    let path = format!("/journal/{}.{}.{host}.{start}", job.id, job.attempt);
    let io = |e: std::io::Error| retry(format!("journal {path}: {e}"));
    std::fs::write(&path, format!("start {start}\n")).map_err(io)?;
    std::thread::sleep(std::time::Duration::from_millis(job.payload.ms));
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .map_err(io)?;
    writeln!(file, "end {}", now_ns()).map_err(io)?;
    Ok(Ran {
        attempt: job.attempt,
        host,
        start,
    })
}

boxcar_guest::handler!(journal);
