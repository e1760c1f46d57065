//! Returns `{"vars": {name: value}}`: every environment variable the guest
//! sees (exactly the manifest's `capabilities.env`). A test guest: a real
//! handler must not return secrets in its result.

use std::collections::BTreeMap;

use serde::Serialize;

#[derive(Serialize)]
struct Vars {
    vars: BTreeMap<String, String>,
}

fn env_dump(_job: boxcar_guest::Job<serde_json::Value>) -> Result<Vars, boxcar_guest::Error> {
    Ok(Vars {
        vars: std::env::vars().collect(),
    })
}

boxcar_guest::handler!(env_dump);
