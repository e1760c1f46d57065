//! Returns its payload as the result.

fn echo(
    job: boxcar_guest::Job<serde_json::Value>,
) -> Result<serde_json::Value, boxcar_guest::Error> {
    Ok(job.payload)
}

boxcar_guest::handler!(echo);
