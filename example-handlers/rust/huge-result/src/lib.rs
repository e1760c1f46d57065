//! Hostile: returns a result of `mib` MiB (payload, default 8).

use boxcar_guest::{Error, Job};
use serde::Deserialize;

#[derive(Deserialize)]
struct Params {
    #[serde(default)]
    mib: Option<usize>,
}

fn huge_result(job: Job<Params>) -> Result<String, Error> {
    let size = job.payload.mib.unwrap_or(8) << 20;
    Ok("x".repeat(size))
}

boxcar_guest::handler!(huge_result);
