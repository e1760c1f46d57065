//! Fails with a retryable error until attempt `succeed_on`, asking for at
//! least `retry_after_ms` before the next try; then succeeds.
//!
//! Payload: `{"succeed_on": 3, "retry_after_ms": 100, "keep_attempt": false,
//! "log_lines": 3}`. With `log_lines` every attempt logs that many info
//! lines (`attempt A line I`); without it a failing attempt logs one warning.

use std::time::Duration;

use boxcar_guest::{retry, Error, Job};
use serde::{Deserialize, Serialize};

#[derive(Deserialize)]
struct Flaky {
    succeed_on: u32,
    #[serde(default)]
    retry_after_ms: Option<u64>,
    #[serde(default)]
    keep_attempt: bool,
    #[serde(default)]
    log_lines: Option<u32>,
}

#[derive(Serialize)]
struct Done {
    attempt: u32,
}

fn flaky(job: Job<Flaky>) -> Result<Done, Error> {
    let p = &job.payload;
    for line in 0..p.log_lines.unwrap_or(0) {
        boxcar_guest::info!("attempt {} line {}", job.attempt, line);
    }
    if job.attempt >= p.succeed_on {
        return Ok(Done {
            attempt: job.attempt,
        });
    }
    if p.log_lines.is_none() {
        boxcar_guest::warn!(
            "attempt {} of {}: failing on purpose",
            job.attempt,
            job.max_attempts
        );
    }
    let mut e = retry(format!("flaky: attempt {} < {}", job.attempt, p.succeed_on));
    if let Some(ms) = p.retry_after_ms {
        e = e.after(Duration::from_millis(ms));
    }
    if p.keep_attempt {
        e = e.keep_attempt();
    }
    Err(e.into())
}

boxcar_guest::handler!(flaky);
