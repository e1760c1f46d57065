//! The sandbox's side of the WIT boundary, for the fuzz targets
//! (`host/fuzz-targets`): the host functions that take what a guest hands
//! over — its answer ([`answer`]), its log lines and stdout/stderr bytes
//! ([`log`]), its `enqueue` arguments ([`enqueue_request`]) and how a
//! refusal is told back to it ([`refusal`]). Not part of the supported API.
//!
//! Invariant: these call the functions a running guest reaches, not
//! copies; no guest is instantiated (a fuzzed input is the values a guest
//! could pass, built directly).

use boxcar_queue::{ChildJobRequest, LogLine, Outcome, RunRecord, ServiceError};

use crate::{
    bindings::boxcar::handler::types as wit,
    host_impl,
    loaded_handler::guest_answer,
    output::{Level, LogSink},
};

/// What a guest's `run` returned.
#[derive(Clone, Debug)]
pub enum GuestAnswer {
    /// `ok(result)`.
    Ok(Option<String>),
    /// `err(retryable(..))`.
    Retryable {
        /// The message.
        message: String,
        /// `retry-after-ms`.
        retry_after_ms: Option<u64>,
        /// `consumes-attempt`.
        consumes_attempt: bool,
    },
    /// `err(terminal(..))`.
    Terminal {
        /// The message.
        message: String,
        /// The code.
        code: Option<String>,
        /// The details (JSON text).
        details: Option<String>,
    },
}

/// The outcome the sandbox makes of a guest's answer under `max_result`.
pub fn answer(max_result: usize, answer: GuestAnswer) -> Outcome {
    let answer = match answer {
        GuestAnswer::Ok(result) => Ok(result),
        GuestAnswer::Retryable {
            message,
            retry_after_ms,
            consumes_attempt,
        } => Err(wit::JobError::Retryable(wit::RetryableError {
            message,
            retry_after_ms,
            consumes_attempt,
        })),
        GuestAnswer::Terminal {
            message,
            code,
            details,
        } => Err(wit::JobError::Terminal(wit::TerminalError {
            message,
            code,
            details,
        })),
    };
    guest_answer(max_result, answer)
}

/// One thing a guest writes to its log.
#[derive(Clone, Debug)]
pub enum LogWrite {
    /// A `log` call at level `0..=4` (trace to error; others are error).
    Log(u8, String),
    /// Bytes written to stdout.
    Stdout(Vec<u8>),
    /// Bytes written to stderr.
    Stderr(Vec<u8>),
}

/// What a job's log budget made of a guest's writes.
#[derive(Debug)]
pub struct LogResult {
    /// The lines stored with the attempt (as escaped for the host's log).
    pub lines: Vec<LogLine>,
    /// The end of stderr kept for a trap message.
    pub stderr_tail: String,
    /// Whether the budget ran out (the guest would be stopped).
    pub exceeded: bool,
    /// Bytes charged against `max_log`.
    pub used: usize,
    /// Lines charged against `max_log_lines`.
    pub counted: usize,
}

/// Runs `writes` through one job's log sink with the given limits, stopping
/// at the first write the budget refuses (as the guest would be stopped),
/// then flushes partial lines as the end of a job does.
pub fn log(max_log: usize, max_line: usize, max_lines: usize, writes: &[LogWrite]) -> LogResult {
    let record = std::sync::Arc::new(RunRecord::new("fuzz-job", 1));
    let sink = LogSink::new(
        "fuzz-job".into(),
        "fuzz.type".into(),
        max_log,
        max_line,
        max_lines,
    )
    .recording(record.clone());
    for write in writes {
        let written = match write {
            LogWrite::Log(level, message) => {
                let level = match level {
                    0 => Level::Trace,
                    1 => Level::Debug,
                    2 => Level::Info,
                    3 => Level::Warn,
                    _ => Level::Error,
                };
                sink.log(level, message)
            }
            LogWrite::Stdout(bytes) => sink.write(false, bytes),
            LogWrite::Stderr(bytes) => sink.write(true, bytes),
        };
        if written.is_err() {
            break;
        }
    }
    sink.flush();
    LogResult {
        lines: record.take_logs(),
        stderr_tail: sink.stderr_tail(),
        exceeded: sink.exceeded(),
        used: sink.used(),
        counted: sink.lines(),
    }
}

/// The arguments of a guest's `enqueue` call.
#[derive(Clone, Debug)]
pub struct EnqueueCall {
    /// `job-type`.
    pub job_type: String,
    /// `payload` (JSON text).
    pub payload: String,
    /// `scope` as (type, id).
    pub scope: Option<(String, String)>,
    /// `dedupe-key`.
    pub dedupe_key: Option<String>,
    /// `delay-ms`.
    pub delay_ms: Option<u64>,
    /// `priority`.
    pub priority: Option<i32>,
    /// `max-attempts`.
    pub max_attempts: Option<u32>,
}

/// The queue request the host makes of a guest's `enqueue` call.
pub fn enqueue_request(call: EnqueueCall) -> ChildJobRequest {
    let options = wit::EnqueueOptions {
        scope: call.scope.map(|(scope_type, scope_id)| wit::Scope {
            scope_type,
            scope_id,
        }),
        dedupe_key: call.dedupe_key,
        delay_ms: call.delay_ms,
        priority: call.priority,
        max_attempts: call.max_attempts,
    };
    host_impl::child_request(call.job_type, call.payload, options)
}

/// The text of the error a guest is given when the queue refuses a call.
pub fn refusal(error: ServiceError) -> String {
    match host_impl::host_error(error) {
        wit::HostError::NotAllowed(m)
        | wit::HostError::LimitReached(m)
        | wit::HostError::Invalid(m)
        | wit::HostError::Unavailable(m) => m,
    }
}
