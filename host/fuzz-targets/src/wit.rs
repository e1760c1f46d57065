//! Target for the WIT boundary: the values a guest hands the host — its
//! answer (result, retryable or terminal error), log lines and
//! stdout/stderr bytes, progress reports and `enqueue` arguments — built
//! from the fuzzer's bytes and passed to the host functions a running guest
//! reaches (sandbox, then queue). No guest is instantiated: this fuzzes
//! the host's boundary functions, not a wasm guest.

use std::time::Duration;

use arbitrary::{Arbitrary, Unstructured};
use boxcar_queue::{
    far_future,
    fuzzing::{admit_enqueue, admit_outcome, check_progress, retry_at},
    EnqueueBounds, Outcome, ServiceError,
};
use boxcar_sandbox::fuzzing::{self as sandbox, EnqueueCall, GuestAnswer, LogWrite};
use chrono::DateTime;

use crate::queue;

#[derive(Arbitrary, Debug)]
enum Answer {
    Ok(Option<String>),
    Retryable {
        message: String,
        retry_after_ms: Option<u64>,
        consumes_attempt: bool,
    },
    Terminal {
        message: String,
        code: Option<String>,
        details: Option<String>,
    },
}

#[derive(Arbitrary, Debug)]
enum Write {
    Log(u8, String),
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
}

#[derive(Arbitrary, Debug)]
struct Call {
    job_type: String,
    payload: String,
    scope: Option<(String, String)>,
    dedupe_key: Option<String>,
    delay_ms: Option<u64>,
    priority: Option<i32>,
    max_attempts: Option<u32>,
}

#[derive(Arbitrary, Debug)]
struct Input {
    max_result: u16,
    answer: Answer,
    attempts: u32,
    base_ms: u32,
    max_ms: u64,
    now_ms: i64,
    max_log: u16,
    max_line: u16,
    max_lines: u8,
    writes: Vec<Write>,
    progress: Vec<String>,
    may_enqueue: Vec<String>,
    allow_calls: bool,
    priority: (i32, i32),
    bounds_attempts: u32,
    max_delay_ms: u64,
    calls: Vec<Call>,
}

/// Largest message the engine stores (`MAX_MESSAGE_BYTES`).
const MAX_MESSAGE: usize = 8 << 10;

fn is_json(text: &str) -> bool {
    serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok()
}

/// One guest's worth of boundary crossings; the properties are the
/// invariants of `handler_output` (what the engine stores), `output` (the
/// log budget and escaping) and the enqueue rules.
pub fn wit_boundary(data: &[u8]) {
    let Ok(input) = Input::arbitrary(&mut Unstructured::new(data)) else {
        return;
    };
    answer(&input);
    log(&input);
    for report in &input.progress {
        if check_progress(report).is_ok() {
            assert!(is_json(report), "progress {report:?} accepted");
        }
    }
    enqueue(input);
}

fn answer(input: &Input) {
    let guest = match &input.answer {
        Answer::Ok(result) => GuestAnswer::Ok(result.clone()),
        Answer::Retryable {
            message,
            retry_after_ms,
            consumes_attempt,
        } => GuestAnswer::Retryable {
            message: message.clone(),
            retry_after_ms: *retry_after_ms,
            consumes_attempt: *consumes_attempt,
        },
        Answer::Terminal {
            message,
            code,
            details,
        } => GuestAnswer::Terminal {
            message: message.clone(),
            code: code.clone(),
            details: details.clone(),
        },
    };
    let max_result = usize::from(input.max_result);
    match admit_outcome(sandbox::answer(max_result, guest)) {
        Outcome::Succeeded { result } => {
            if let Some(result) = result {
                assert!(result.len() <= max_result && is_json(&result), "{result:?}");
            }
        }
        Outcome::Retryable {
            message,
            retry_after,
            ..
        } => {
            assert!(message.len() <= MAX_MESSAGE && !message.contains('\0'));
            let Some(now) = DateTime::from_timestamp_millis(input.now_ms) else {
                return;
            };
            let (at, ms) = retry_at(
                input.attempts,
                Duration::from_millis(input.base_ms.into()),
                Duration::from_millis(input.max_ms),
                retry_after,
                now,
            );
            assert!(ms >= 0, "negative delay {ms}");
            assert!(at >= now.min(far_future()), "retry at {at} before {now}");
        }
        Outcome::Terminal {
            message,
            code,
            details,
        } => {
            assert!(message.len() <= MAX_MESSAGE && !message.contains('\0'));
            if let Some(code) = code {
                assert!(
                    (1..=256).contains(&code.len()) && !code.chars().any(char::is_control),
                    "code {code:?}"
                );
            }
            if let Some(details) = details {
                assert!(details.len() <= max_result && is_json(&details));
            }
        }
        Outcome::LimitExceeded { detail, .. } => assert!(!detail.contains('\0')),
        other => panic!("a guest's answer became {other:?}"),
    }
}

fn log(input: &Input) {
    let writes: Vec<LogWrite> = input
        .writes
        .iter()
        .map(|w| match w {
            Write::Log(level, message) => LogWrite::Log(*level, message.clone()),
            Write::Stdout(bytes) => LogWrite::Stdout(bytes.clone()),
            Write::Stderr(bytes) => LogWrite::Stderr(bytes.clone()),
        })
        .collect();
    let (max_log, max_lines) = (usize::from(input.max_log), usize::from(input.max_lines));
    let result = sandbox::log(max_log, usize::from(input.max_line), max_lines, &writes);
    assert!(
        result.used <= max_log,
        "{} bytes used of {max_log}",
        result.used
    );
    assert!(
        result.counted <= max_lines,
        "{} lines of {max_lines}",
        result.counted
    );
    // Flushed partial lines are emitted without charging a line, and a cut
    // budget adds one marker line.
    assert!(
        result.lines.len() <= max_lines + 3,
        "{} lines stored, {max_lines} allowed",
        result.lines.len()
    );
    for line in &result.lines {
        assert!(
            !line
                .message
                .chars()
                .any(|c| c.is_control() || c == '\u{2028}' || c == '\u{2029}'),
            "unescaped line {:?}",
            line.message
        );
    }
}

fn enqueue(input: Input) {
    let (low, high) = input.priority;
    let bounds = EnqueueBounds::new(
        low..=high,
        input.bounds_attempts,
        Duration::from_millis(input.max_delay_ms),
    );
    if bounds.validate().is_err() {
        return;
    }
    let mut may_enqueue = input.may_enqueue;
    if input.allow_calls {
        may_enqueue.extend(input.calls.iter().map(|c| c.job_type.clone()));
    }
    for call in input.calls {
        let request = sandbox::enqueue_request(EnqueueCall {
            job_type: call.job_type,
            payload: call.payload,
            scope: call.scope,
            dedupe_key: call.dedupe_key,
            delay_ms: call.delay_ms,
            priority: call.priority,
            max_attempts: call.max_attempts,
        });
        match admit_enqueue(
            queue::shared(),
            "fuzz.parent",
            may_enqueue.clone(),
            bounds.clone(),
            request,
        ) {
            Ok(Some(key)) => assert!(key.starts_with("boxcar:from:fuzz.parent/"), "{key:?}"),
            Ok(None) => {}
            Err(error) => {
                let not_allowed = matches!(error, ServiceError::NotAllowed(_));
                let told = sandbox::refusal(error);
                assert!(!told.is_empty());
                if not_allowed {
                    assert!(told.len() <= 512, "{} bytes", told.len());
                }
            }
        }
    }
}
