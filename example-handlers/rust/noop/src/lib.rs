//! Returns at once with no result: the benchmark handler.

fn noop(_job: boxcar_guest::Job<serde_json::Value>) -> Result<(), boxcar_guest::Error> {
    Ok(())
}

boxcar_guest::handler!(noop);
