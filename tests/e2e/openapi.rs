//! The HTTP API against its own OpenAPI document: schemathesis generates
//! requests for every documented operation (valid and invalid ones) against
//! a real `boxcar serve` on SQLite with handlers deployed, and checks each
//! answer: never a server error, a documented status code and content type,
//! and a body that matches the documented schema.

use std::{
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use crate::{
    api::http,
    harness::{describe, eventually, postgres_schema, Env},
};

const ECHO: &str = "[handler]\njob_type = \"echo\"\ntimeout = \"10s\"\n";
const TRAP: &str = "[handler]\njob_type = \"trap\"\ntimeout = \"10s\"\n";

/// Long polls answer when a job finishes, and a job schemathesis enqueued
/// with a delay may not finish for hours: `wait` is asked with a short
/// timeout (a `408` when the job is still live) and logs are read as pages,
/// not followed (the event stream's shape is checked by the API's unit
/// tests).
const CONFIG: &str = r#"
[[operations]]
include-name = "GET /jobs/{id}/wait"
parameters = { "query.timeout" = "50ms" }

[[operations]]
include-name = "GET /jobs/{id}/logs"
parameters = { "query.follow" = 0 }
"#;

/// The checks every answer must pass.
const CHECKS: &str = "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance,unsupported_method";

/// The schemathesis to run: `BOXCAR_SCHEMATHESIS`, else `schemathesis` on
/// `PATH`; `None` (with a printed reason) when there is none, except in CI.
fn schemathesis() -> Option<String> {
    let candidate = std::env::var("BOXCAR_SCHEMATHESIS")
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "schemathesis".into());
    let found = Command::new(&candidate)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if found {
        return Some(candidate);
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "schemathesis `{candidate}` is not runnable but CI=true: .ci/run installs it (pip install schemathesis)"
    );
    eprintln!(
        "skipping: no schemathesis (pip install schemathesis==4.32.5, or set BOXCAR_SCHEMATHESIS)"
    );
    None
}

#[test]
fn the_api_conforms_to_its_openapi_document() {
    let Some(schemathesis) = schemathesis() else {
        return;
    };
    conforms(&schemathesis, &Env::sqlite());
}

/// The same run on Postgres, which refuses text that SQLite stores (a NUL
/// byte): its first run answered 500 to a NUL in a filter.
#[test]
fn the_api_conforms_to_its_openapi_document_on_postgres() {
    let Some((db, _drop)) = postgres_schema("openapi") else {
        return;
    };
    let Some(schemathesis) = schemathesis() else {
        return;
    };
    conforms(&schemathesis, &Env::with_db(db));
}

/// Serves the API from `env` with two handlers and runs schemathesis on it.
fn conforms(schemathesis: &str, env: &Env) {
    env.fast_config("");
    env.deploy("echo", "echo", ECHO);
    env.deploy("trap", "trap", TRAP);
    let serve = env.serve("serve", &[]);
    serve.wait_for_log("HTTP API listening", Duration::from_secs(60));
    eventually(Duration::from_secs(60), "two deployed handlers", || {
        (serve.output().matches("handler deployed").count() >= 2).then_some(())
    });
    for body in [
        r#"{"job_type":"echo","payload":{"a":1}}"#,
        r#"{"job_type":"trap"}"#,
        r#"{"job_type":"echo","scope":{"type":"account","id":"1"}}"#,
    ] {
        let (status, added) = http(&serve.listen, "POST", "/jobs", Some(body), None);
        assert_eq!(status, 201, "{added}");
    }

    let seed = std::env::var("BOXCAR_SCHEMATHESIS_SEED").unwrap_or_else(|_| "1".into());
    let url = format!("http://{}/openapi.json", serve.listen);
    let config = env.path("schemathesis.toml");
    std::fs::write(&config, CONFIG).expect("write schemathesis.toml");
    let config = config.display().to_string();
    let args = [
        "--config-file",
        &config,
        "run",
        &url,
        "--checks",
        CHECKS,
        "--phases",
        "examples,coverage,fuzzing,stateful",
        "--max-examples",
        "100",
        "--seed",
        &seed,
        "--workers",
        "2",
        "--request-timeout",
        "10",
        "--suppress-health-check",
        "all",
        "--generation-database",
        "none",
        "--no-color",
    ];
    let started = Instant::now();
    let output = Command::new(schemathesis)
        .args(args)
        .current_dir(env.dir.path())
        .stdin(Stdio::null())
        .output()
        .expect("run schemathesis");
    let took = started.elapsed();
    let report = describe(&output);
    eprintln!("schemathesis {} took {took:.1?}\n{report}", args.join(" "));
    assert!(
        output.status.success(),
        "schemathesis found answers that break the document:\n{report}"
    );
    assert!(
        serve.output().contains("HTTP API listening"),
        "the server kept running"
    );
}
