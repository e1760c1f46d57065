//! The JSON shapes users see, shared by the CLI's `--json` output and the
//! HTTP API so both always agree.
//!
//! Times are RFC 3339 with milliseconds in UTC. `result` and `progress` are
//! embedded as JSON values, not strings. The payload is deliberately absent:
//! it may hold secrets, and nothing a user sees or an API returns shows it.

use boxcar_queue::{schedule::ScheduleRecord, Attempt, HandlerEvent, Job, Scope, StoredLogLine};
use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;
use serde_json::Value;

/// A job as shown to users.
#[derive(Debug, Serialize)]
pub struct JobView {
    pub id: String,
    pub job_type: String,
    pub status: String,
    pub attempts: u32,
    pub max_attempts: u32,
    pub last_error: Option<String>,
    /// Machine-readable code of a terminal handler error, e.g. `content-refused`.
    pub error_code: Option<String>,
    /// JSON details of a terminal handler error.
    pub error_details: Option<Value>,
    pub result: Option<Value>,
    pub progress: Option<Value>,
    pub scope: Option<Scope>,
    pub priority: i32,
    pub dedupe_key: Option<String>,
    pub parent_id: Option<String>,
    pub schedule_id: Option<String>,
    pub handler_version: Option<String>,
    /// The producer's W3C trace context, when it gave one.
    pub traceparent: Option<String>,
    pub run_at: String,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    pub expires_at: Option<String>,
    pub created_at: String,
    pub updated_at: String,
}

/// Formats an instant as RFC 3339 with milliseconds.
pub fn time(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// Parses stored JSON text; text that is somehow not JSON is shown as a string.
pub fn json_text(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string()))
}

impl From<&Job> for JobView {
    fn from(job: &Job) -> Self {
        Self {
            id: job.id.clone(),
            job_type: job.job_type.clone(),
            status: job.status.as_str().to_string(),
            attempts: job.attempts,
            max_attempts: job.max_attempts,
            last_error: job.last_error.clone(),
            error_code: job.error_code.clone(),
            error_details: job.error_details.as_deref().map(json_text),
            result: job.result.as_deref().map(json_text),
            progress: job.progress.as_deref().map(json_text),
            scope: job.scope.clone(),
            priority: job.priority,
            dedupe_key: job.dedupe_key.clone(),
            parent_id: job.parent_id.clone(),
            schedule_id: job.schedule_id.clone(),
            handler_version: job.handler_version.clone(),
            traceparent: job.traceparent.clone(),
            run_at: time(job.run_at),
            started_at: job.started_at.map(time),
            finished_at: job.finished_at.map(time),
            expires_at: job.expires_at.map(time),
            created_at: time(job.created_at),
            updated_at: time(job.updated_at),
        }
    }
}

/// A handler deploy event as shown to users.
#[derive(Debug, Serialize)]
pub struct HandlerEventView {
    pub at: String,
    pub kind: String,
    pub job_type: Option<String>,
    pub file: Option<String>,
    pub digest: Option<String>,
    pub reason: Option<String>,
}

impl From<&HandlerEvent> for HandlerEventView {
    fn from(event: &HandlerEvent) -> Self {
        Self {
            at: time(event.at),
            kind: event.kind.as_str().to_string(),
            job_type: event.job_type.clone(),
            file: event.file.clone(),
            digest: event.digest.clone(),
            reason: event.reason.clone(),
        }
    }
}

/// A recurring schedule as shown to users. Its payload is left out, as a
/// job's is.
#[derive(Debug, Serialize)]
pub struct ScheduleView {
    pub id: String,
    pub job_type: String,
    /// The interval, e.g. `5m` (exclusive with `cron`).
    pub every: Option<String>,
    pub cron: Option<String>,
    pub tz: Option<String>,
    pub immediately: bool,
    pub start_at: Option<String>,
    pub end_at: Option<String>,
    /// `None` once the schedule is past its `end_at`.
    pub next_run_at: Option<String>,
    pub last_run_at: Option<String>,
    pub owner: Option<String>,
    pub updated_at: String,
}

impl From<&ScheduleRecord> for ScheduleView {
    fn from(s: &ScheduleRecord) -> Self {
        let def = &s.def;
        Self {
            id: def.id.clone(),
            job_type: def.job_type.clone(),
            every: def.every_ms.map(|ms| {
                humantime::format_duration(std::time::Duration::from_millis(
                    u64::try_from(ms).unwrap_or(0),
                ))
                .to_string()
            }),
            cron: def.cron.clone(),
            tz: def.tz.clone(),
            immediately: def.immediately,
            start_at: def.start_at.map(time),
            end_at: def.end_at.map(time),
            next_run_at: s.next_run_at.map(time),
            last_run_at: s.last_run_at.map(time),
            owner: s.owner.clone(),
            updated_at: time(s.updated_at),
        }
    }
}

/// One attempt of a job as shown to users (figures `null` when unmeasured).
#[derive(Debug, Serialize)]
pub struct AttemptView {
    pub attempt: u32,
    pub outcome: String,
    pub worker: Option<String>,
    pub digest: Option<String>,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    pub error: Option<String>,
    pub error_code: Option<String>,
    pub error_details: Option<Value>,
    pub wall_ms: Option<u64>,
    pub peak_memory_bytes: Option<u64>,
    pub fuel: Option<u64>,
    pub log_bytes: Option<u64>,
    pub result_bytes: Option<u64>,
    pub http_requests: Option<u64>,
    pub http_bytes: Option<u64>,
    pub enqueues: Option<u64>,
}

impl From<&Attempt> for AttemptView {
    fn from(a: &Attempt) -> Self {
        let u = &a.usage;
        Self {
            attempt: a.attempt,
            outcome: a.outcome.as_str().to_string(),
            worker: a.worker.clone(),
            digest: a.digest.clone(),
            started_at: a.started_at.map(time),
            finished_at: a.finished_at.map(time),
            error: a.error.clone(),
            error_code: a.error_code.clone(),
            error_details: a.error_details.as_deref().map(json_text),
            wall_ms: u.wall_ms,
            peak_memory_bytes: u.peak_memory_bytes,
            fuel: u.fuel,
            log_bytes: u.log_bytes,
            result_bytes: u.result_bytes,
            http_requests: u.http_requests,
            http_bytes: u.http_bytes,
            enqueues: u.enqueues,
        }
    }
}

/// One stored guest log line as shown to users.
#[derive(Debug, Serialize)]
pub struct LogLineView {
    /// Pass as `after` to read on from this line.
    pub cursor: i64,
    pub attempt: u32,
    pub seq: u32,
    pub at: String,
    pub level: String,
    pub message: String,
}

impl From<&StoredLogLine> for LogLineView {
    fn from(l: &StoredLogLine) -> Self {
        Self {
            cursor: l.cursor,
            attempt: l.line.attempt,
            seq: l.line.seq,
            at: time(l.line.at),
            level: l.line.level.clone(),
            message: l.line.message.clone(),
        }
    }
}
