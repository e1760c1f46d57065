//! Sleeps `ms` milliseconds in `step_ms` steps (default 5), checking
//! `cancelled()` between steps; on cancel it returns a retryable error at
//! once. With `busy: true` it busy-waits on the clock instead of sleeping.
//! With `log_steps: true` it logs a line after every step (`step N`).
//!
//! Payload: `{"ms": 1000, "step_ms": 5, "busy": false, "log_steps": false}`.

use std::time::{Duration, Instant};

use boxcar_guest::{retry, Error, Job};
use serde::{Deserialize, Serialize};

#[derive(Deserialize)]
struct Params {
    ms: u64,
    #[serde(default)]
    step_ms: Option<u64>,
    #[serde(default)]
    busy: bool,
    #[serde(default)]
    log_steps: bool,
}

#[derive(Serialize)]
struct Slept {
    slept_ms: u64,
    steps: u64,
}

fn cooperative_sleep(job: Job<Params>) -> Result<Slept, Error> {
    let p = job.payload;
    let step = Duration::from_millis(p.step_ms.unwrap_or(5).max(1));
    let total = Duration::from_millis(p.ms);
    let start = Instant::now();
    let mut steps = 0;
    while start.elapsed() < total {
        if boxcar_guest::cancelled() {
            boxcar_guest::info!("cancelled after {} steps", steps);
            return Err(retry("cancelled").into());
        }
        let this = step.min(total.saturating_sub(start.elapsed()));
        if p.busy {
            let t = Instant::now();
            while t.elapsed() < this {
                std::hint::spin_loop();
            }
        } else {
            std::thread::sleep(this);
        }
        steps += 1;
        if p.log_steps {
            boxcar_guest::info!("step {}", steps);
        }
    }
    Ok(Slept {
        slept_ms: p.ms,
        steps,
    })
}

boxcar_guest::handler!(cooperative_sleep);
