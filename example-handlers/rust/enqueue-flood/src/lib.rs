//! Hostile: enqueues `noop` jobs until the host refuses (or `max` calls);
//! returns how many were accepted and the first refusal.

use boxcar_guest::{EnqueueOptions, Error, Job};
use serde::{Deserialize, Serialize};

#[derive(Deserialize)]
struct Params {
    #[serde(default)]
    max: Option<u32>,
    #[serde(default)]
    job_type: Option<String>,
}

#[derive(Serialize)]
struct Flooded {
    accepted: u32,
    refused: Option<String>,
}

fn enqueue_flood(job: Job<Params>) -> Result<Flooded, Error> {
    let job_type = job.payload.job_type.unwrap_or_else(|| "noop".into());
    let max = job.payload.max.unwrap_or(1_000_000);
    let mut accepted = 0;
    for i in 0..max {
        match boxcar_guest::enqueue(
            &job_type,
            &serde_json::json!({ "i": i }),
            EnqueueOptions::default(),
        ) {
            Ok(_) => accepted += 1,
            Err(e) => {
                return Ok(Flooded {
                    accepted,
                    refused: Some(format!("{e:?}")),
                });
            }
        }
    }
    Ok(Flooded {
        accepted,
        refused: None,
    })
}

boxcar_guest::handler!(enqueue_flood);
