//! Hostile: panics with a message (payload `message`, optional).

use boxcar_guest::{Error, Job};
use serde::Deserialize;

#[derive(Deserialize)]
struct Params {
    #[serde(default)]
    message: Option<String>,
}

fn trap(job: Job<Params>) -> Result<(), Error> {
    let message = job
        .payload
        .message
        .unwrap_or_else(|| "boom: the trap handler panicked".into());
    panic!("{message}");
}

boxcar_guest::handler!(trap);
