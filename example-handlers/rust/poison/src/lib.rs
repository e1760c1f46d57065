//! Hostile: hands the host output it must refuse, through the raw bindings
//! (the SDK's helpers would serialize it into valid JSON).
//!
//! Payload `{"mode": M, ...}`; modes:
//! - `nul-result`: a result with a raw NUL inside a JSON string;
//! - `not-json`: a result that is not JSON text;
//! - `nul-message`, `nul-code`, `nul-details`: a terminal error with a raw
//!   NUL in that field (details otherwise valid-looking JSON);
//! - `nul-retry`: a retryable error whose message holds a NUL;
//! - `escape`: a terminal error whose message holds terminal escape
//!   sequences (`\x1b]0;owned\x07`, `\x1b[2J`, a C1 CSI) and whose
//!   details hold one as a JSON escape;
//! - `escape-result`: a result that is a JSON string holding escapes;
//! - `nul-progress`: reports progress with a raw NUL and returns what the
//!   host answered (`{"progress": "..."}`);
//! - `retry-forever`: a retryable error with `retry_after_ms = u64::MAX`;
//! - `enqueue`: enqueues `{"job_type", "dedupe_key", "delay_ms",
//!   "priority", "max_attempts"}` from the payload's `enqueue` object and
//!   returns `{"id": ...}` or `{"refused": "..."}`.

use boxcar_guest::bindings::boxcar::handler::{host, types};
use serde::Deserialize;

#[derive(Deserialize, Default)]
struct Enqueue {
    job_type: String,
    #[serde(default)]
    dedupe_key: Option<String>,
    #[serde(default)]
    delay_ms: Option<u64>,
    #[serde(default)]
    priority: Option<i32>,
    #[serde(default)]
    max_attempts: Option<u32>,
}

#[derive(Deserialize)]
struct Params {
    mode: String,
    #[serde(default)]
    enqueue: Option<Enqueue>,
}

fn terminal(message: &str, code: Option<&str>, details: Option<&str>) -> types::JobError {
    types::JobError::Terminal(types::TerminalError {
        message: message.into(),
        code: code.map(str::to_string),
        details: details.map(str::to_string),
    })
}

fn json(value: serde_json::Value) -> Result<Option<String>, types::JobError> {
    Ok(Some(value.to_string()))
}

fn run(params: Params) -> Result<Option<String>, types::JobError> {
    match params.mode.as_str() {
        "nul-result" => Ok(Some("{\"text\":\"a\0b\"}".into())),
        "not-json" => Ok(Some("this is not JSON".into())),
        "nul-message" => Err(terminal("refused\0with a NUL", None, None)),
        "nul-code" => Err(terminal("refused", Some("bad\0code"), None)),
        "nul-details" => Err(terminal("refused", Some("c"), Some("{\"k\":\"\0\"}"))),
        "nul-retry" => Err(types::JobError::Retryable(types::RetryableError {
            message: "try\0again".into(),
            retry_after_ms: None,
            consumes_attempt: true,
        })),
        "escape" => Err(terminal(
            "\u{1b}]0;owned\u{7}\u{1b}[2Jcleared \u{9b}31mred",
            Some("escape"),
            Some("{\"k\":\"\\u001b[31m\"}"),
        )),
        "escape-result" => Ok(Some("\"\\u001b]0;owned\\u0007 \u{9b}2J\"".into())),
        "nul-progress" => {
            let answer = match host::progress("{\"step\":\"\0\"}") {
                Ok(()) => "accepted".to_string(),
                Err(e) => format!("{e:?}"),
            };
            json(serde_json::json!({ "progress": answer }))
        }
        "retry-forever" => Err(types::JobError::Retryable(types::RetryableError {
            message: "come back never".into(),
            retry_after_ms: Some(u64::MAX),
            consumes_attempt: true,
        })),
        "enqueue" => {
            let e = params.enqueue.unwrap_or_default();
            let options = types::EnqueueOptions {
                scope: None,
                dedupe_key: e.dedupe_key,
                delay_ms: e.delay_ms,
                priority: e.priority,
                max_attempts: e.max_attempts,
            };
            match host::enqueue(&e.job_type, "{}", &options) {
                Ok(id) => json(serde_json::json!({ "id": id })),
                Err(err) => json(serde_json::json!({ "refused": format!("{err:?}") })),
            }
        }
        other => Err(terminal(&format!("unknown mode `{other}`"), None, None)),
    }
}

struct Poison;

impl boxcar_guest::bindings::Guest for Poison {
    fn handle(job: types::Job) -> Result<Option<String>, types::JobError> {
        match serde_json::from_str::<Params>(&job.payload) {
            Ok(params) => run(params),
            Err(e) => Err(terminal(&format!("bad payload: {e}"), None, None)),
        }
    }
}

boxcar_guest::bindings::__export_handler_world!(Poison with_types_in boxcar_guest::bindings);
