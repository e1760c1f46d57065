//! Works through `steps` steps of `step_ms` milliseconds each, reporting
//! `{"done": n, "of": steps}` as progress before every step, so inspection
//! can watch a running job advance. Stops early (retryable) when cancelled.
//!
//! Payload: `{"steps": 10, "step_ms": 200}`.

use std::time::Duration;

use boxcar_guest::{retry, Error, Job};
use serde::{Deserialize, Serialize};

#[derive(Deserialize)]
struct Params {
    steps: u32,
    step_ms: u64,
}

#[derive(Serialize)]
struct Done {
    steps: u32,
}

fn progress(job: Job<Params>) -> Result<Done, Error> {
    let p = job.payload;
    for done in 0..p.steps {
        if boxcar_guest::cancelled() {
            return Err(retry("cancelled").into());
        }
        let _ = boxcar_guest::progress(&serde_json::json!({ "done": done, "of": p.steps }));
        std::thread::sleep(Duration::from_millis(p.step_ms));
    }
    Ok(Done { steps: p.steps })
}

boxcar_guest::handler!(progress);
