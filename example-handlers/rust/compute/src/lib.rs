//! CPU-bound: runs `iterations` rounds of xorshift without calling the
//! host, and returns the final state. Payload: `{"iterations": 100000000}`.

use boxcar_guest::{Error, Job};
use serde::Deserialize;

#[derive(Deserialize)]
struct Params {
    iterations: u64,
}

fn compute(job: Job<Params>) -> Result<u64, Error> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for _ in 0..job.payload.iterations {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    Ok(x)
}

boxcar_guest::handler!(compute);
