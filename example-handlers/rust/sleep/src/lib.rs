//! Sleeps `ms` milliseconds (WASI monotonic clock), then returns
//! `{"slept_ms": ms}`. Does not check `cancelled()`: the host stops it.
//!
//! Payload: `{"ms": 500}`.

use boxcar_guest::{Error, Job};
use serde::{Deserialize, Serialize};

#[derive(Deserialize)]
struct Sleep {
    ms: u64,
}

#[derive(Serialize)]
struct Slept {
    slept_ms: u64,
}

fn sleep(job: Job<Sleep>) -> Result<Slept, Error> {
    std::thread::sleep(std::time::Duration::from_millis(job.payload.ms));
    Ok(Slept {
        slept_ms: job.payload.ms,
    })
}

boxcar_guest::handler!(sleep);
